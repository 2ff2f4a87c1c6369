#!/usr/bin/env python3
"""PyTorch inside a gslice memory slice (run under `gslice run --memory 10GiB -- ...`).

  torch_slice.py memory LIMIT_GIB   mem_get_info reports the slice; allocating past it raises
                                    torch.OutOfMemoryError; freeing and allocating again works
  torch_slice.py smi LIMIT_GIB      nvidia-smi inside the slice shows its total and usage
  torch_slice.py graph              CUDA graph capture and replay give the right result
  torch_slice.py train STEPS        a small training loop; prints samples/s

Each check prints "CHECK <name> PASS|FAIL <detail>"; the exit status is 0 only if all passed.
Plain device allocations only (no managed memory).
"""
import os
import subprocess
import sys
import time

import torch

GiB = 1 << 30
failures = 0


def check(name, ok, detail=""):
    global failures
    print(f"CHECK {name} {'PASS' if ok else 'FAIL'} {detail}", flush=True)
    if not ok:
        failures += 1


def memory(limit_gib):
    limit = int(float(limit_gib) * GiB)
    free, total = torch.cuda.mem_get_info()
    check("mem_get_info_total", total == limit, f"total={total} limit={limit}")
    check("mem_get_info_free", 0 < free <= limit, f"free={free}")
    held = []
    oom = False
    try:
        for _ in range(4 * int(float(limit_gib)) + 8):
            held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e:
        oom = True
        msg = str(e).splitlines()[0][:120]
    got = len(held) * 256 / 1024
    check("oom_past_limit", oom and got <= limit / GiB, f"raised after {got:.2f} GiB" + (f": {msg}" if oom else ""))
    # Data written before the OOM is intact.
    for i in range(min(4, len(held))):
        held[i].fill_(i + 1)
    torch.cuda.synchronize()
    check("data_intact", all(int(held[i][-1].item()) == i + 1 for i in range(min(4, len(held)))))
    n = len(held)
    held.clear()
    torch.cuda.empty_cache()
    free2, _ = torch.cuda.mem_get_info()
    check("free_returns_memory", free2 >= free - (64 << 20), f"free before={free} after={free2}")
    again = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(n)]
    check("allocate_again", len(again) == n, f"{n} x 256 MiB")
    del again
    torch.cuda.empty_cache()


def smi(limit_gib):
    limit_mib = int(float(limit_gib) * 1024)
    x = torch.empty(3 * GiB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    line = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    try:
        total, used = (int(v) for v in line.split(","))
    except ValueError:
        total, used = -1, -1
    check("nvidia_smi_total", total == limit_mib, f"memory.total={total} MiB, slice {limit_mib} MiB ({line!r})")
    check("nvidia_smi_used", 3 * 1024 <= used <= limit_mib, f"memory.used={used} MiB with 3 GiB held")
    full = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
    print(full)
    del x


def graph():
    torch.manual_seed(0)
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    static_in = torch.randn(1024, 1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            out = (static_in @ a).relu() @ b
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = (static_in @ a).relu() @ b
    ok = True
    for i in range(5):
        x = torch.randn(1024, 1024, device="cuda")
        static_in.copy_(x)
        g.replay()
        ref = (x.double() @ a.double()).relu() @ b.double()
        err = float((static_out.double() - ref).norm() / ref.norm())
        ok = ok and err < 1e-2
    torch.cuda.synchronize()
    check("cuda_graph_replay", ok, f"relative error {err:.2e} after 5 replays")
    free, total = torch.cuda.mem_get_info()
    check("graph_memory_accounted", free <= total, f"free={free} total={total}")


def train(steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096), torch.nn.GELU(),
        torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(512, 4096, device="cuda")
    y = torch.randn(512, 1024, device="cuda")
    for _ in range(10):  # warm-up
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(int(steps)):
        opt.zero_grad(set_to_none=True)
        # Fresh activations each step go through the caching allocator as in real training.
        loss = torch.nn.functional.mse_loss(model(x + 0.0), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    rate = int(steps) * x.shape[0] / dt
    print(f"TRAIN samples_per_s={rate:.1f} loss={loss.item():.4f}", flush=True)
    check("train_loss_finite", bool(torch.isfinite(loss)), f"loss={loss.item():.4f}")


if __name__ == "__main__":
    mode = sys.argv[1]
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name(0)}, "
          f"alloc conf {os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '-')}", flush=True)
    {"memory": memory, "smi": smi, "graph": graph, "train": train}[mode](*sys.argv[2:])
    sys.exit(1 if failures else 0)
