"""What MPS alone can give the training and latency pairs of the compute suite: the
opportunistic job at several CUDA_MPS_ACTIVE_THREAD_PERCENTAGE settings, with and without
MPS's below-normal client priority (CUDA_MPS_CLIENT_PRIORITY=1). Run by mps_frontier.sh,
which owns the MPS daemon.

  mps_frontier.py solo  STATE.json    solo runs (no MPS daemon running)
  mps_frontier.py mps   STATE.json    the pairs (the MPS daemon must be running)
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402
from suite import run_config, server, throughput  # noqa: E402

SETTINGS = ((100, None), (100, 1), (50, 1), (25, 1))  # opportunistic (thread %, priority)


def mps_env(pct, priority):
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct)}
    if priority is not None:
        env["CUDA_MPS_CLIENT_PRIORITY"] = str(priority)
    return env


def main():
    phase, path = sys.argv[1], sys.argv[2]
    state = json.load(open(path)) if os.path.exists(path) else {}

    def record(key, value):
        state[key] = value
        brief = {i: {k: v for k, v in r.items() if k in ("steps_per_s", "p50_ms", "p99_ms", "service_ms")}
                 if isinstance(r, dict) else r for i, r in value.items()}
        print(key, json.dumps(brief), flush=True)
        with open(path, "w") as f:
            json.dump(state, f)

    if phase == "solo":
        record("solo/resnet50", run_config("solo/resnet50", [throughput("resnet50", "g", warmup=3)]))
        record("solo/bert", run_config("solo/bert", [throughput("bert-train", "o", warmup=3)]))
        record("solo/server", run_config("solo/server", [server("s")], seconds=suite.WINDOW + 4))
    elif phase == "mps":
        for pct, prio in SETTINGS:
            record(f"train/{pct}/{prio}", run_config("train", [
                throughput("resnet50", "g", env=mps_env(100, None if prio is None else 0), warmup=3),
                throughput("bert-train", "o", env=mps_env(pct, prio), warmup=3)]))
        service_ms = state.get("solo/server", {}).get("s", {}).get("service_ms")
        for pct, prio in ((100, 1), (50, 1)):
            record(f"latency/{pct}/{prio}", run_config("latency", [
                server("s", service_ms, env=mps_env(100, 0)),
                throughput("resnet50", "o", env=mps_env(pct, prio), warmup=3)], seconds=suite.WINDOW + 4))
    else:
        sys.exit(f"unknown phase {phase}")


if __name__ == "__main__":
    main()
