"""A PyTorch job that holds a known amount of GPU memory inside a slice and keeps computing.

    python3 hold.py GIB SECONDS READY_FILE

Prints what the slice looks like from inside (torch.cuda.mem_get_info), writes READY_FILE once
it holds GIB GiB, then runs matrix products for SECONDS and checks their result against the
first one (the data must survive whatever the daemon does meanwhile, e.g. its restart).
"""
import sys
import time

import torch

gib, seconds, ready = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
free, total = torch.cuda.mem_get_info()
print(f"inside the slice: total={total} free={free}", flush=True)
ballast = torch.empty(int(gib * (1 << 30)) // 4, dtype=torch.float32, device="cuda")
ballast.fill_(1.5)
a = torch.randn(4096, 4096, device="cuda")
reference = (a @ a).sum().item()
torch.cuda.synchronize()
open(ready, "w").write("ready\n")
end = time.time() + seconds
steps = 0
while time.time() < end:
    value = (a @ a).sum().item()
    if abs(value - reference) > 1e-3 * max(1.0, abs(reference)):
        print(f"FAIL: result changed: {value} vs {reference}", flush=True)
        sys.exit(1)
    steps += 1
ok = bool(torch.all(ballast == 1.5).item())
print(f"steps={steps} ballast_intact={ok}", flush=True)
sys.exit(0 if ok else 1)
