"""One workload for bench/gpu/suites/remote_train.sh, run the same way locally and through the
forwarding client: prints one line per step ("loss STEP VALUE", the loss as a float64's repr so
that runs compare bit for bit), then "steps_per_s X" and, through the client, "calls ..." (the
client's counters over the timed steps, gslice_remote_stats).

  train.py resnet50|resnet50_bf16|resnet50_bf16_cl|resnet50_loader|bert|transformer STEPS [BATCH]
                                   training, deterministic, fixed seed, synthetic data (batch:
                                   ResNet-50 32 images, BERT 8 sequences of 128, the transformer
                                   1 sequence of 128 by default); also prints "cpu_per_step S"
                                   (the process's CPU time) and, through the client, "waits NAME
                                   N" per call that still waited (round trips per timed step).
                                   resnet50_loader: as a data loader feeds it, each step's batch
                                   copied from page-locked host memory (pin_memory(), 4 batches
                                   in turn) with non_blocking=True; resnet50_bf16: under
                                   torch.autocast to bfloat16; resnet50_bf16_cl: the same with
                                   the model and the batch channels-last; transformer: a small
                                   causal language model (4 layers, width 256, 1000 words)
  train.py jax_mlp STEPS [BATCH]   a small MLP (4 layers of 1024) trained under jax.jit, batch 64
                                   by default, deterministic, XLA's autotuner off
  train.py cases KIND:BATCH:STEPS,...
                                   several of the above one after another in one process (one
                                   start-up), each after a line "case KIND-bBATCH"
  train.py check NAME              a framework check: tensor, torch_exp, compile, jax,
                                   jax_noautotune (XLA's autotuner off), cupy
"""
import ctypes, os, sys, time


def client_stats():
    """The forwarding client's counters (cached, async, round trips), or None locally."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.gslice_remote_stats
    except (OSError, AttributeError):
        return None
    out = (ctypes.c_uint64 * 3)()
    fn(out)
    return list(out)


def added_delay():
    """The client's added delay (GSLICE_REMOTE_ADDED_DELAY_US): round trip ns, messages held, the
    shortest hold in ns; None locally."""
    try:
        fn = ctypes.CDLL("libcuda.so.1").gslice_remote_added_delay
    except (OSError, AttributeError):
        return None
    out = (ctypes.c_uint64 * 4)()
    fn(out)
    return list(out)[:3]


def call_counts():
    """The client's per-call counters ({name: (cached, async, round trips)}), or None locally."""
    try:
        fn = ctypes.CDLL("libcuda.so.1").gslice_remote_write_call_counts
    except (OSError, AttributeError):
        return None
    path = f"/tmp/gslice-train-counts-{os.getpid()}"
    if fn(path.encode()) != 0:
        return None
    try:
        with open(path) as f:
            return {l.split()[0]: tuple(int(v) for v in l.split()[1:4]) for l in f if len(l.split()) == 4}
    finally:
        os.unlink(path)


def train(kind, steps, batch=None):
    import torch
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda"
    if kind in ("resnet50", "resnet50_bf16", "resnet50_bf16_cl"):
        import torchvision
        model = torchvision.models.resnet50(num_classes=100).to(dev)
        g = torch.Generator(device="cpu").manual_seed(1)
        n = batch or 32
        x = torch.randn(n, 3, 224, 224, generator=g).to(dev)
        y = torch.randint(0, 100, (n,), generator=g).to(dev)
        if kind == "resnet50_bf16_cl":
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        loss_fn = torch.nn.CrossEntropyLoss()
        step_fn = lambda: loss_fn(model(x), y)
        if kind in ("resnet50_bf16", "resnet50_bf16_cl"):
            def step_fn():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return loss_fn(model(x), y)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif kind == "resnet50_loader":
        import torchvision
        model = torchvision.models.resnet50(num_classes=100).to(dev)
        g = torch.Generator(device="cpu").manual_seed(1)
        n = batch or 32
        host = [(torch.randn(n, 3, 224, 224, generator=g).pin_memory(),
                 torch.randint(0, 100, (n,), generator=g).pin_memory()) for _ in range(4)]
        x = torch.empty(n, 3, 224, 224, device=dev)
        y = torch.empty(n, dtype=torch.long, device=dev)
        loss_fn = torch.nn.CrossEntropyLoss()
        turn = [0]

        def step_fn():
            hx, hy = host[turn[0] % len(host)]
            turn[0] += 1
            x.copy_(hx, non_blocking=True)
            y.copy_(hy, non_blocking=True)
            return loss_fn(model(x), y)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif kind == "bert":
        from transformers import BertConfig, BertForSequenceClassification
        cfg = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2)
        model = BertForSequenceClassification(cfg).to(dev)
        g = torch.Generator(device="cpu").manual_seed(1)
        n = batch or 8
        ids = torch.randint(0, cfg.vocab_size, (n, 128), generator=g).to(dev)
        labels = torch.randint(0, 2, (n,), generator=g).to(dev)
        step_fn = lambda: model(input_ids=ids, labels=labels).loss
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    elif kind == "transformer":
        # Small enough that every step is launch-bound: the GPU waits on each kernel's launch.
        vocab, width, length = 1000, 256, 128
        layer = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width, dropout=0.0,
                                                 batch_first=True, norm_first=True)
        model = torch.nn.ModuleDict({"embed": torch.nn.Embedding(vocab, width),
                                     "blocks": torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False),
                                     "head": torch.nn.Linear(width, vocab)}).to(dev)
        g = torch.Generator(device="cpu").manual_seed(1)
        n = batch or 1
        ids = torch.randint(0, vocab, (n, length + 1), generator=g).to(dev)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(length, device=dev)
        loss_fn = torch.nn.CrossEntropyLoss()

        from torch.nn.attention import SDPBackend, sdpa_kernel

        def step_fn():
            # The math backend: deterministic with a backward pass (use_deterministic_algorithms).
            with sdpa_kernel(SDPBackend.MATH):
                h = model["blocks"](model["embed"](ids[:, :-1]), mask=mask, is_causal=True)
            return loss_fn(model["head"](h).reshape(-1, vocab), ids[:, 1:].reshape(-1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    else:
        sys.exit(f"unknown workload {kind}")
    model.train()

    def one_step():
        opt.zero_grad(set_to_none=True)
        loss = step_fn()
        loss.backward()
        opt.step()
        return float(loss.item())
    timed(steps, one_step, torch.cuda.synchronize)
    return model, opt


def train_jax(steps, batch):
    """A small MLP trained with plain SGD under jax.jit: XLA's own launches, events and copies."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # Deterministic kernels, and no autotuner (which needs page-locked memory mapped into the
    # GPU, only a same-host worker has: docs/remote.md), so that every side runs the same code.
    # XLA's command buffers stay on, as by default: CUDA graphs built by hand and by capture
    # into a graph, which the client forwards.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_gpu_deterministic_ops=true --xla_gpu_autotune_level=0").strip()
    import jax, jax.numpy as jnp
    k = jax.random.PRNGKey(0)
    sizes = [512, 1024, 1024, 1024, 10]
    keys = jax.random.split(k, len(sizes) + 1)
    params = [(jax.random.normal(keys[i], (a, b), jnp.float32) / a ** 0.5, jnp.zeros((b,), jnp.float32))
              for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))]
    x = jax.random.normal(keys[-2], (batch or 64, sizes[0]), jnp.float32)
    y = jax.random.randint(keys[-1], (batch or 64,), 0, sizes[-1])

    def loss_fn(p):
        h = x
        for w, b in p[:-1]:
            h = jax.nn.relu(h @ w + b)
        logits = h @ p[-1][0] + p[-1][1]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y])

    @jax.jit
    def step(p):
        loss, g = jax.value_and_grad(loss_fn)(p)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(p, g)], loss

    state = [params]

    def one_step():
        state[0], loss = step(state[0])
        return float(loss)
    with jax.default_matmul_precision("highest"):
        timed(steps, one_step, lambda: jax.block_until_ready(state[0]))
    return state


def timed(steps, one_step, sync):
    """Runs warm-up steps (at least 5, and for at least TRAIN_WARM_S seconds, 2 by default: a
    GPU idle during the start-up runs at low clocks at first) and `steps` timed ones, printing
    each loss (the same sequence whatever the warm-up's length), then steps/s, the process's CPU
    time per step and, through the client, its counters per timed step."""
    warm_s = float(os.environ.get("TRAIN_WARM_S", "2"))
    start = time.perf_counter()
    i = 0
    while i < 5 or time.perf_counter() - start < warm_s:
        print(f"loss {i} {one_step()!r}", flush=True)
        i += 1
    sync()
    before = client_stats()
    counts_before = call_counts()
    t0 = time.perf_counter()
    c0 = time.process_time()
    for _ in range(steps):
        print(f"loss {i} {one_step()!r}", flush=True)
        i += 1
    sync()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    after = client_stats()
    counts_after = call_counts()
    counts_path = os.environ.get("REMOTE_CALL_COUNTS")
    if counts_path and before is not None:
        # Per call over the whole run (warm-up included): NAME CACHED ASYNC ROUND_TRIPS.
        ctypes.CDLL("libcuda.so.1").gslice_remote_write_call_counts(counts_path.encode())
    print(f"steps_per_s {steps / dt:.4f}")
    print(f"cpu_per_step {cpu / steps:.6f}")
    if before is not None and after is not None:
        d = [(a - b) / steps for a, b in zip(after, before)]
        print(f"calls per step: {d[0] + d[1] + d[2]:.1f} (cached {d[0]:.1f}, async {d[1]:.1f}, round trips {d[2]:.1f})")
    delay = added_delay()
    if delay is not None and delay[0] > 0:
        print(f"added_delay {delay[0]} {delay[1]} {delay[2]}")
    if counts_before is not None and counts_after is not None:
        # The calls that still waited during the timed steps, most first.
        waits = {name: (c[2] - counts_before.get(name, (0, 0, 0))[2]) / steps for name, c in counts_after.items()}
        for name, per_step in sorted(waits.items(), key=lambda kv: -kv[1]):
            if per_step > 0:
                print(f"waits {name} {per_step:.2f}")
        # The calls answered on the client, most first (what the client's own cost is made of).
        kept = {name: (c[0] - counts_before.get(name, (0, 0, 0))[0]) / steps for name, c in counts_after.items()}
        for name, per_step in sorted(kept.items(), key=lambda kv: -kv[1])[:8]:
            if per_step > 0:
                print(f"kept {name} {per_step:.1f}")


def cases(spec):
    """Runs KIND:BATCH:STEPS,... one after another, each after a line "case KIND-bBATCH"."""
    import gc
    for item in spec.split(","):
        kind, batch, steps = item.split(":")
        print(f"case {kind}-b{batch}", flush=True)
        if kind == "jax_mlp":
            state = train_jax(int(steps), int(batch))
            del state
            continue
        import torch
        state = train(kind, int(steps), int(batch))
        del state
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def check(name):
    if name == "tensor":
        import torch
        x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
        print("value", repr(float((x * 2 + 1).sum())))
    elif name == "torch_exp":
        # expandable segments: the caching allocator on the VMM calls
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        import torch
        torch.manual_seed(0)
        xs = [torch.randn(1 << 20, device="cuda") for _ in range(64)]
        del xs[::2]
        y = torch.randn(1 << 24, device="cuda")
        print("value", repr(float(y.double().sum()) + sum(float(t.double().sum()) for t in xs)))
    elif name == "compile":
        import torch
        torch.manual_seed(0)
        f = torch.compile(lambda a, b: (a.sin() * b.cos() + a * b).sum(dim=1))
        a = torch.randn(1024, 1024, device="cuda")
        b = torch.randn(1024, 1024, device="cuda")
        print("value", repr(float(f(a, b).double().abs().sum())))
    elif name in ("jax", "jax_noautotune"):
        if name == "jax_noautotune":
            # XLA's autotuner treats page-locked host memory as device memory (zero-copy),
            # which a remote GPU cannot reach (docs/remote.md); without it XLA picks defaults.
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()
        import jax, jax.numpy as jnp
        k = jax.random.PRNGKey(0)
        a = jax.random.normal(k, (512, 512), dtype=jnp.float32)
        with jax.default_matmul_precision("highest"):
            v = float(jnp.abs(a @ a.T).sum())
        print("device", jax.devices()[0].platform)
        print("value", repr(v))
    elif name == "cupy":
        import cupy as cp
        x = cp.arange(1 << 20, dtype=cp.float32)
        k = cp.ElementwiseKernel("float32 x", "float32 y", "y = x * 2 + 1", "gslice_affine")
        print("value", repr(float(k(x).sum())))
    else:
        sys.exit(f"unknown check {name}")
    print("ok")


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check(sys.argv[2])
    elif sys.argv[1] == "cases":
        cases(sys.argv[2])
    elif sys.argv[1] == "jax_mlp":
        train_jax(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
    else:
        train(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
