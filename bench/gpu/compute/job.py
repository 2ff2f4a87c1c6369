"""One benchmark process: a throughput job or a Poisson-arrival inference server.

Processes of one configuration measure over the same wall-clock window. Each warms up,
writes SYNC/<id>.ready, keeps working (so contention during everyone's warm-up is the same
as in the window) until SYNC/go names the window (t0, seconds), works through it and one
more second, and writes SYNC/<id>.json.

  job.py throughput --workload resnet50 --sync DIR --id a
  job.py server --sync DIR --id srv [--service-ms 4.1] [--load 0.5]

Throughput is measured between the first and last step completed inside the window
(steps / seconds, no partial-step error). Server latency is completion time minus
arrival time, queueing included; arrivals in the window come from a fixed seed, so every
configuration sees the same arrival pattern.
"""

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402

TAIL_S = 1.0


def wait_for_go(sync):
    path = os.path.join(sync, "go")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        go = json.load(f)
    return go["t0"], go["seconds"]


def mark_ready(sync, ident, info):
    tmp = os.path.join(sync, f".{ident}.ready")
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.rename(tmp, os.path.join(sync, f"{ident}.ready"))


def write_result(sync, ident, result):
    tmp = os.path.join(sync, f".{ident}.json")
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.rename(tmp, os.path.join(sync, f"{ident}.json"))


class GpuSampler:
    """GPU 0 through NVML every 50 ms, averaged over the measured window: utilisation (the
    share of time a kernel ran, as the driver samples it), SM clock (MHz), power (W), and
    the share of samples in which the clock was held down by the power cap."""

    POWER_CAP_REASON = 0x4  # nvmlClocksEventReasonSwPowerCap

    def __init__(self):
        self.samples = []
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # NVML missing: no samples, the job still runs
            self.nvml = None
            return
        threading.Thread(target=self._run, daemon=True).start()

    def _reasons(self):
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(self.nvml, name, None)
            if fn is not None:
                try:
                    return fn(self.handle)
                except Exception:
                    continue
        return 0

    def _run(self):
        while True:
            try:
                util = self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
                mhz = self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)
                watts = self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
                capped = 1.0 if self._reasons() & self.POWER_CAP_REASON else 0.0
                self.samples.append((time.time(), util, mhz, watts, capped))
            except Exception:
                return
            time.sleep(0.05)

    def summary(self, t0, t1):
        inside = [x[1:] for x in self.samples if t0 <= x[0] <= t1]
        if not inside:
            return {}
        cols = list(zip(*inside))
        return {"util_pct": statistics.fmean(cols[0]), "sm_mhz": statistics.fmean(cols[1]),
                "power_w": statistics.fmean(cols[2]), "power_capped": statistics.fmean(cols[3])}


def run_throughput(args):
    step = workloads.build(args.workload)
    sampler = GpuSampler()
    start = time.time()
    n = 0
    while n < 3 or time.time() - start < args.warmup:
        step()
        torch.cuda.synchronize()
        n += 1
    mark_ready(args.sync, args.id, {"pid": os.getpid()})
    go = None
    while go is None:
        step()
        torch.cuda.synchronize()
        go = wait_for_go(args.sync)
    t0, seconds = go
    end = t0 + seconds
    done = []
    while True:
        step()
        torch.cuda.synchronize()
        now = time.time()
        if t0 <= now <= end:
            done.append(now)
        if now > end + TAIL_S:
            break
    if len(done) < 2:
        rate = 0.0
    else:
        rate = (len(done) - 1) / (done[-1] - done[0])
    write_result(args.sync, args.id, dict({"workload": args.workload, "steps_per_s": rate,
                                           "steps": len(done)}, **sampler.summary(t0, end)))


def serve(step, arrival, latencies, services=None):
    now = time.time()
    if arrival > now:
        delay = arrival - now
        if delay > 0.0005:
            time.sleep(delay - 0.0003)
        while time.time() < arrival:
            pass
    started = time.time()
    step()
    torch.cuda.synchronize()
    if latencies is not None:
        done = time.time()
        latencies.append(done - arrival)
        services.append(done - started)


def run_server(args):
    step = workloads.build("bert-infer")
    start = time.time()
    while time.time() - start < args.warmup:
        step()
        torch.cuda.synchronize()
    service_ms = args.service_ms
    if service_ms is None:
        # Served the way requests arrive: each after an idle pause of about the mean gap
        # at 50% load, not back to back (a request that finds the GPU idle takes longer).
        times = []
        for _ in range(100):
            time.sleep(0.005)
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        service_ms = statistics.median(times) * 1e3
    rate = args.load / (service_ms / 1e3)
    mark_ready(args.sync, args.id, {"pid": os.getpid(), "service_ms": service_ms})
    warm_rng = random.Random(1)
    arrival = time.time()
    go = None
    while go is None:
        arrival = max(arrival, time.time() - 0.05) + warm_rng.expovariate(rate)
        serve(step, arrival, None)
        go = wait_for_go(args.sync)
    t0, seconds = go
    rng = random.Random(2)
    while True:
        arrival = max(arrival, time.time() - 0.05) + warm_rng.expovariate(rate)
        if arrival >= t0:
            break
        serve(step, arrival, None)
    latencies, services = [], []
    arrival = t0
    while True:
        arrival += rng.expovariate(rate)
        if arrival > t0 + seconds:
            break
        serve(step, arrival, latencies, services)
    latencies.sort()

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p / 100.0 * len(latencies)))] * 1e3

    write_result(args.sync, args.id, {
        "workload": "bert-infer-server", "service_ms": service_ms, "rate_per_s": rate,
        "requests": len(latencies), "p50_ms": pct(50), "p99_ms": pct(99),
        "mean_ms": statistics.fmean(latencies) * 1e3,
        # What requests took once started, in the window: the load actually offered is
        # rate x this (above 1 the queue grows without bound and p99 measures the queue).
        "service_in_window_ms": statistics.median(services) * 1e3,
        "offered_load": rate * statistics.fmean(services)})
    # Keep the arrival process going briefly so a partner's window ends under the same load.
    end = time.time() + TAIL_S
    arrival = time.time()
    while time.time() < end:
        arrival += rng.expovariate(rate)
        serve(step, arrival, None)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["throughput", "server"])
    p.add_argument("--workload", default="matmul")
    p.add_argument("--sync", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--service-ms", type=float, default=None)
    p.add_argument("--load", type=float, default=0.5)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("job.py: torch sees no CUDA device")
    if args.mode == "throughput":
        run_throughput(args)
    else:
        run_server(args)


if __name__ == "__main__":
    main()
