"""One workload for bench/gpu/suites/remote_train.sh, run the same way locally and through the
forwarding client: prints one line per step ("loss STEP VALUE", the loss as a float64's repr so
that runs compare bit for bit), then "steps_per_s X" and, through the client, "calls ..." (the
client's counters over the timed steps, gslice_remote_stats).

  train.py resnet50|resnet50_bf16|resnet50_loader|bert STEPS [BATCH]
                                   training, deterministic, fixed seed, synthetic data (batch:
                                   ResNet-50 32 images, BERT 8 sequences of 128 by default);
                                   also prints "cpu_per_step S" (the process's CPU time).
                                   resnet50_loader: as a data loader feeds it, each step's batch
                                   copied from page-locked host memory (pin_memory(), 4 batches
                                   in turn) with non_blocking=True; resnet50_bf16: under
                                   torch.autocast to bfloat16
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


def train(kind, steps, batch=None):
    import torch
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda"
    if kind in ("resnet50", "resnet50_bf16"):
        import torchvision
        model = torchvision.models.resnet50(num_classes=100).to(dev)
        g = torch.Generator(device="cpu").manual_seed(1)
        n = batch or 32
        x = torch.randn(n, 3, 224, 224, generator=g).to(dev)
        y = torch.randint(0, 100, (n,), generator=g).to(dev)
        loss_fn = torch.nn.CrossEntropyLoss()
        step_fn = lambda: loss_fn(model(x), y)
        if kind == "resnet50_bf16":
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
    else:
        sys.exit(f"unknown workload {kind}")
    model.train()
    warm = 5
    before = None
    for i in range(warm + steps):
        if i == warm:
            torch.cuda.synchronize()
            before = client_stats()
            t0 = time.perf_counter()
            c0 = time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = step_fn()
        loss.backward()
        opt.step()
        print(f"loss {i} {float(loss.item())!r}", flush=True)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    after = client_stats()
    counts_path = os.environ.get("REMOTE_CALL_COUNTS")
    if counts_path and before is not None:
        # Per call over the whole run (warm-up included): NAME CACHED ASYNC ROUND_TRIPS.
        ctypes.CDLL("libcuda.so.1").gslice_remote_write_call_counts(counts_path.encode())
    print(f"steps_per_s {steps / dt:.4f}")
    print(f"cpu_per_step {cpu / steps:.6f}")
    if before is not None and after is not None:
        d = [(a - b) / steps for a, b in zip(after, before)]
        print(f"calls per step: {d[0] + d[1] + d[2]:.1f} (cached {d[0]:.1f}, async {d[1]:.1f}, round trips {d[2]:.1f})")


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
    else:
        train(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
