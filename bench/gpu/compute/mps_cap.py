"""A cap on MPS is held once: a job capped at 50% that MPS gives half the SMs runs at about the
speed of the same job on half the SMs with no gslice, not at a quarter of its free speed.

Three MPS clients of one control daemon (bench/gpu/suites/mps_cap.sh owns it), one at a time
in interleaved phases (suite.py), the same GPU-bound workload (MPS_CAP_WORKLOAD, default
matmul):
  free      native, all the SMs
  sms       native, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50: what half the SMs give
  capped    gslice run --cap=0.5 with the same thread percentage (as gsliced's MPS sets it)
Reports each one's steps/s over free's in the same run; PASS when capped is within 15% of
sms, and names the old behaviour (held twice: about half of sms) when it is not.

  mps_cap.py --out FILE.json
Environment: GSLICE_BUILD, COMPUTE_PHASE_S / COMPUTE_ROUNDS / COMPUTE_SETTLE_S (suite.py's).
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402

WORKLOAD = os.environ.get("MPS_CAP_WORKLOAD", "matmul")
HALF = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}


def speed(state, key, ident):
    counts = suite.phase_counts(state, key, ident)
    rates = [steps / secs for who, steps, secs in (counts or []) if secs > 0 and who == [ident]]
    return statistics.mean(rates) if rates else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    key = "mps-cap"
    procs = [suite.throughput(WORKLOAD, "free", warmup=3),
             suite.throughput(WORKLOAD, "sms", env=HALF, warmup=3),
             suite.throughput(WORKLOAD, "capped", suite.gslice_prefix("--cap=50%", "--class=guaranteed"), env=HALF,
                              warmup=3)]
    res = suite.run_config(key, procs, phases=suite.interleaved([["free"], ["sms"], ["capped"]]))
    state = {key: res}
    doc = {"workload": WORKLOAD, "error": res.get("error")}
    free = speed(state, key, "free")
    for ident in ("free", "sms", "capped"):
        s = speed(state, key, ident)
        doc[ident] = {"steps_per_s": s, "of_free": (s / free) if s and free else None}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    sms, capped = doc["sms"]["of_free"], doc["capped"]["of_free"]
    if sms is None or capped is None:
        print(f"RESULT mps_cap.held_once FAIL no figures ({doc['error']})")
        return 1
    ok = abs(capped / sms - 1) <= 0.15
    print(f"RESULT mps_cap.held_once {'PASS' if ok else 'FAIL'} capped {capped:.3f} of free, half the SMs "
          f"{sms:.3f} of free (capped/sms {capped / sms:.3f}; held twice would be about 0.5)")
    print("\n| client | steps/s | of free |\n|---|---|---|")
    for ident in ("free", "sms", "capped"):
        d = doc[ident]
        print(f"| {ident} | {d['steps_per_s']:.2f} | {d['of_free']:.3f} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
