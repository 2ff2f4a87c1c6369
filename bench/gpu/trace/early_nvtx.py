"""NVTX ranges opened before CUDA starts (bench/gpu/suites/trace.sh, docs/trace.md).

    python3 early_nvtx.py run            the program: "outer" and "prologue" (20 ms asleep)
                                         opened before torch initialises CUDA, then "inner"
                                         around a few kernels, inside "outer"
    python3 early_nvtx.py check TRACE    prints one line "<PASS|FAIL> <detail>": outer holds
                                         prologue and inner, prologue lasts its 20 ms and ends
                                         before the first driver call, the file's zero is not
                                         after outer, and inner holds GPU kernels (CUPTI)
"""
import json
import sys
import time


def run():
    import torch  # loads torch, but CUDA starts only at the first tensor on the GPU
    torch.cuda.nvtx.range_push("outer")
    torch.cuda.nvtx.range_push("prologue")
    time.sleep(0.02)
    torch.cuda.nvtx.range_pop()
    assert not torch.cuda.is_initialized(), "CUDA started before the prologue ended"
    x = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("inner")
    for _ in range(10):
        x = x * 1.0001 + 1
    total = x.sum().item()
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_pop()
    print(f"early_nvtx sum {total:.1f}")


def check(path):
    t = json.load(open(path))
    ev = t["traceEvents"]
    ranges = {}
    for e in ev:
        if e.get("cat") == "nvtx" and e.get("ph") == "X":
            ranges.setdefault(e["name"], []).append(e)
    problems = []
    got = {n: len(ranges.get(n, [])) for n in ("outer", "prologue", "inner")}
    if any(v != 1 for v in got.values()):
        return f"FAIL ranges {got}"
    outer, prologue, inner = (ranges[n][0] for n in ("outer", "prologue", "inner"))
    end = lambda e: e["ts"] + e.get("dur", 0)
    within = lambda a, b: a["ts"] >= b["ts"] - 1 and end(a) <= end(b) + 1
    if outer["ts"] < 0:
        problems.append(f"outer starts before the file's zero ({outer['ts']:.0f} us)")
    if not within(prologue, outer) or not within(inner, outer):
        problems.append("outer does not hold prologue and inner")
    if prologue.get("dur", 0) < 20000:
        problems.append(f"prologue lasts {prologue.get('dur', 0):.0f} us, not its 20 ms")
    api = sorted(e["ts"] for e in ev if e.get("cat") == "api")
    if not api or api[0] < end(prologue) - 1:
        problems.append("no driver call, or one before the prologue ended")
    kernels = [e for e in ev if e.get("cat") == "kernel" and within(e, inner)]
    if not kernels:
        problems.append("no GPU kernel inside inner")
    if problems:
        return "FAIL " + "; ".join(problems)
    lead = (api[0] - outer["ts"]) / 1000
    return f"PASS outer opened {lead:.0f} ms before the first driver call, {len(kernels)} kernels in inner"


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "run":
        run()
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        print(check(sys.argv[2]))
    else:
        sys.exit(__doc__)
