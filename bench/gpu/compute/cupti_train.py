"""What CUPTI's kernel activity records cost a launch-bound training job.

ResNet-50 bf16 training (workloads.py) in one process, in phases of PHASE_S seconds that
alternate: CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL off, on, off, on, ... (ROUNDS of each). The
library is loaded before the first phase, so every phase has it loaded; only collection moves.
Records are counted (bytes handed back), not parsed. Prints a RESULT line with the steps per
second of each phase and the on / off ratio of each adjacent pair.

  cupti_train.py [--libcupti PATH] [--phase-s 5] [--rounds 4] [--workload resnet50]
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402
import torch  # noqa: E402

CONCURRENT_KERNEL = 10  # CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
BUFFER = 8 << 20

REQUEST = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                           ctypes.POINTER(ctypes.c_size_t))
COMPLETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.c_size_t)

_buffers = {}
_valid = [0, 0]  # bytes of records, buffers


@REQUEST
def _request(buf, size, max_records):
    b = ctypes.create_string_buffer(BUFFER + 8)
    addr = (ctypes.addressof(b) + 7) & ~7
    _buffers[addr] = b
    buf[0] = addr
    size[0] = BUFFER
    max_records[0] = 0


@COMPLETE
def _complete(ctx, stream, buf, size, valid):
    _valid[0] += valid
    _valid[1] += 1
    _buffers.pop(buf, None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--libcupti", default="libcupti.so")
    ap.add_argument("--phase-s", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--workload", default="resnet50")
    args = ap.parse_args()
    step = workloads.build(args.workload)
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    cupti = ctypes.CDLL(args.libcupti)
    if cupti.cuptiActivityRegisterCallbacks(_request, _complete) != 0:
        raise SystemExit("cupti_train: cuptiActivityRegisterCallbacks refused")
    phases = []
    for r in range(args.rounds):
        for on in (False, True):
            if on and cupti.cuptiActivityEnable(CONCURRENT_KERNEL) != 0:
                raise SystemExit("cupti_train: kernel activity refused")
            torch.cuda.synchronize()
            t0 = time.monotonic()
            steps = 0
            loss = None
            while time.monotonic() - t0 < args.phase_s:
                loss = step()
                steps += 1
                if steps % 4 == 0:
                    loss.item()
            loss = float(loss.item()) if loss is not None else float("nan")
            torch.cuda.synchronize()
            rate = steps / (time.monotonic() - t0)
            if on:
                cupti.cuptiActivityDisable(CONCURRENT_KERNEL)
                cupti.cuptiActivityFlushAll(1)
            if loss != loss:
                raise SystemExit("cupti_train: loss is not finite")
            phases.append({"on": on, "steps_per_s": rate})
            print(f"phase {len(phases)} cupti {'on ' if on else 'off'} {rate:.2f} steps/s", flush=True)
    ratios = [phases[i + 1]["steps_per_s"] / phases[i]["steps_per_s"] for i in range(0, len(phases), 2)]
    # Each on phase also against the off phase after it: drift touches both sides alike.
    ratios += [phases[i]["steps_per_s"] / phases[i + 1]["steps_per_s"] for i in range(1, len(phases) - 1, 2)]
    out = {"workload": args.workload, "phases": phases, "on_over_off": ratios,
           "on_over_off_median": statistics.median(ratios), "record_bytes": _valid[0], "buffers": _valid[1]}
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
