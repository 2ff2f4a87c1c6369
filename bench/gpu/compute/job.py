"""One benchmark process: a throughput job or a Poisson-arrival inference server.

Processes of one configuration measure over the same wall-clock window. Each warms up,
writes SYNC/<id>.ready, keeps working (so contention during everyone's warm-up is the same
as in the window) until SYNC/go names the window (t0, seconds), works through it and one
more second, and writes SYNC/<id>.json.

Interleaved windows: SYNC/go may instead name phases ([start, end, [ids that run]], back to
back). A process works only in the phases that name it and sleeps through the others (its
context stays), and reports when each step ended (throughput) or when each request arrived
and what it took (server); suite.py splits them by phase. Alone and together then come from
the same processes minutes apart at most, so a host that drifts by 5-10% between separate
runs does not decide a 3% target.

  job.py throughput --workload resnet50 --sync DIR --id a [--raise-default-stream] [--after srv]
  job.py server --sync DIR --id srv [--service-ms 4.1] [--load 0.5]

Throughput is measured between the first and last step completed inside the window
(steps / seconds, no partial-step error). Server latency is completion time minus
arrival time, queueing included; arrivals in the window (in each phase, when phased) come
from a fixed seed, so every configuration and phase sees the same arrival pattern.
Each result carries "finite": whether the last step's output (the loss, for training) was
finite; a CUDA error raises, and the process exits non-zero.
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
import service_time  # noqa: E402
import workloads  # noqa: E402

TAIL_S = 1.0


def wait_for_go(sync):
    path = os.path.join(sync, "go")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


class Schedule:
    """When this process works: one window (t0, t0 + seconds), or the phases that name it."""

    def __init__(self, go, ident):
        if "phases" in go:
            self.runs = [(a, b) for a, b, ids in go["phases"] if ident in ids]
            self.t0, self.end = go["phases"][0][0], go["phases"][-1][1]
        else:
            self.t0, self.end = go["t0"], go["t0"] + go["seconds"]
            self.runs = [(self.t0, self.end)]
        self.phased = "phases" in go

    def next_run(self, now):
        """now if this process works at now, else when it next does (None: never again)."""
        for a, b in self.runs:
            if now < b:
                return max(a, now)
        return None

    def sleep_until_run(self):
        """Sleeps while this process is paused; False once the schedule has ended."""
        now = time.time()
        t = self.next_run(now)
        if t is None:
            return False
        if t > now:
            time.sleep(t - now)
        return True


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


class Readiness:
    """Writes SYNC/<id>.ready once: when warm, or after READY_LIMIT_S even if not (an
    opportunistic job next to a busy guaranteed one may be held at its gate for good, and
    then its partner's window must still open; its first phase alone finishes its warm-up)."""

    READY_LIMIT_S = 60.0

    def __init__(self, sync, ident):
        self.sync, self.ident = sync, ident
        self.lock = threading.Lock()
        self.done = False
        self.timer = threading.Timer(self.READY_LIMIT_S, self.mark, kwargs={"warm": False})
        self.timer.daemon = True
        self.timer.start()

    def mark(self, warm=True):
        with self.lock:
            if self.done:
                return
            self.done = True
            self.timer.cancel()
            mark_ready(self.sync, self.ident, {"pid": os.getpid(), "warm": warm})


def raise_default_stream():
    """Gives the legacy default stream the device's greatest priority through the driver, as
    the shim does for a guaranteed process (case 5 measures this layer without any shim)."""
    import ctypes
    torch.zeros(1, device="cuda")  # the primary context is current from here
    cuda = ctypes.CDLL("libcuda.so.1")
    least, greatest = ctypes.c_int(), ctypes.c_int()
    rc = cuda.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest))
    if rc != 0:
        raise SystemExit(f"job.py: cuCtxGetStreamPriorityRange failed ({rc})")
    value = (ctypes.c_char * 64)()  # CUstreamAttrValue; priority is its first int
    ctypes.c_int.from_buffer(value).value = greatest.value
    rc = cuda.cuStreamSetAttribute(ctypes.c_void_p(1), 8, ctypes.byref(value))  # CU_STREAM_LEGACY, PRIORITY
    if rc != 0:
        raise SystemExit(f"job.py: cuStreamSetAttribute(CU_STREAM_LEGACY, PRIORITY) failed ({rc})")
    got = ctypes.c_int(99)
    rc = cuda.cuStreamGetPriority(ctypes.c_void_p(1), ctypes.byref(got))
    if rc != 0 or got.value != greatest.value:
        raise SystemExit(f"job.py: the legacy stream's priority reads {got.value} (rc {rc}), not {greatest.value}")
    print(f"default stream raised to priority {greatest.value}", flush=True)


def finite(out):
    """Whether a step's output tensor holds only finite values (True for no tensor)."""
    return out is None or bool(torch.isfinite(out).all().item())


def run_throughput(args):
    if args.after:
        # Starts once another process is warm (a server measuring its service time alone).
        while not os.path.exists(os.path.join(args.sync, f"{args.after}.ready")):
            time.sleep(0.05)
    if args.raise_default_stream:
        raise_default_stream()
    step = workloads.build(args.workload)
    sampler = GpuSampler() if args.gpu_sampler else None
    ready = Readiness(args.sync, args.id)
    start = time.time()
    n = 0
    out = None
    while n < 3 or time.time() - start < args.warmup:
        out = step()
        torch.cuda.synchronize()
        n += 1
    ready.mark()
    go = None
    while go is None:
        if args.rest:
            time.sleep(0.02)
        else:
            out = step()
            torch.cuda.synchronize()
        go = wait_for_go(args.sync)
    sched = Schedule(go, args.id)
    t0, end = sched.t0, sched.end
    done = []
    while True:
        if sched.phased and not sched.sleep_until_run():
            break
        out = step()
        torch.cuda.synchronize()
        now = time.time()
        if t0 <= now <= end:
            done.append(now)
        if not sched.phased and now > end + TAIL_S:
            break
    if len(done) < 2:
        rate = 0.0
    else:
        rate = (len(done) - 1) / (done[-1] - done[0])
    result = {"workload": args.workload, "steps_per_s": rate, "steps": len(done), "finite": finite(out)}
    if sched.phased:
        result["step_ends"] = done
    write_result(args.sync, args.id, dict(result, **(sampler.summary(t0, end) if sampler else {})))


def serve(step, arrival, latencies, services=None):
    """Serves one request arriving at `arrival`; returns the step's output."""
    now = time.time()
    if arrival > now:
        delay = arrival - now
        if delay > 0.0005:
            time.sleep(delay - 0.0003)
        while time.time() < arrival:
            pass
    started = time.time()
    out = step()
    torch.cuda.synchronize()
    if latencies is not None:
        done = time.time()
        latencies.append(done - arrival)
        services.append(done - started)
    return out


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
        # A first estimate, then rounds served as the phases serve (service_time.py).
        first_ms = statistics.median(times) * 1e3

        def serve_one(arrival):
            lat, svc = [], []
            serve(step, arrival, lat, svc)
            return svc[0]

        service_s, rounds = service_time.measure(serve_one, first_ms / 1e3, args.load)
        service_ms = service_s * 1e3
        print(f"server: service time {first_ms:.3f} ms after 5 ms pauses; served at load {args.load}: "
              + ", ".join(f"{x * 1e3:.3f}" for x in rounds) + " ms", file=sys.stderr, flush=True)
    rate = args.load / (service_ms / 1e3)
    mark_ready(args.sync, args.id, {"pid": os.getpid(), "service_ms": service_ms})
    warm_rng = random.Random(1)
    arrival = time.time()
    go = None
    while go is None:
        arrival = max(arrival, time.time() - 0.05) + warm_rng.expovariate(rate)
        serve(step, arrival, None)
        go = wait_for_go(args.sync)
    sched = Schedule(go, args.id)
    t0 = sched.t0
    rng = random.Random(2)
    while True:
        arrival = max(arrival, time.time() - 0.05) + warm_rng.expovariate(rate)
        if arrival >= t0:
            break
        serve(step, arrival, None)
    latencies, services, arrivals = [], [], []
    out = None
    for a, b in sched.runs:
        # Every phase gets the same arrival pattern (the same seed from its start), so alone
        # and together phases compare like for like.
        if sched.phased:
            rng = random.Random(2)
        arrival = a
        while True:
            arrival += rng.expovariate(rate)
            if arrival > b:
                break
            out = serve(step, arrival, latencies, services)
            arrivals.append(arrival)
    result = {"workload": "bert-infer-server", "service_ms": service_ms, "rate_per_s": rate, "finite": finite(out)}
    if sched.phased:
        result["requests_at"] = [[t, lat, svc] for t, lat, svc in zip(arrivals, latencies, services)]
    result.update(latency_summary(latencies, services, rate))
    write_result(args.sync, args.id, result)
    if sched.phased:
        return
    # Keep the arrival process going briefly so a partner's window ends under the same load.
    end = time.time() + TAIL_S
    arrival = time.time()
    while time.time() < end:
        arrival += rng.expovariate(rate)
        serve(step, arrival, None)


def latency_summary(latencies, services, rate):
    """p50/p99/mean of request latencies (s, completion minus arrival) in ms, and the load
    actually offered: rate x the mean service time (above 1 the queue grows without bound
    and p99 measures the queue)."""
    if not latencies:
        return {"requests": 0}
    ordered = sorted(latencies)

    def pct(p):
        return ordered[min(len(ordered) - 1, int(p / 100.0 * len(ordered)))] * 1e3

    return {"requests": len(ordered), "p50_ms": pct(50), "p99_ms": pct(99),
            "mean_ms": statistics.fmean(ordered) * 1e3,
            "service_in_window_ms": statistics.median(services) * 1e3,
            "offered_load": rate * statistics.fmean(services)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["throughput", "server"])
    p.add_argument("--workload", default="matmul")
    p.add_argument("--sync", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--service-ms", type=float, default=None)
    p.add_argument("--load", type=float, default=0.5)
    p.add_argument("--no-gpu-sampler", dest="gpu_sampler", action="store_false",
                   help="throughput: no NVML sampling thread (utilisation, clock, power are not reported)")
    p.add_argument("--after", metavar="ID",
                   help="throughput: start once process ID is warm (its SYNC/ID.ready exists)")
    p.add_argument("--rest", action="store_true",
                   help="throughput: once warm, wait for the start without working (so that a partner "
                        "still warming up, held back beside this one, gets the GPU)")
    p.add_argument("--raise-default-stream", action="store_true",
                   help="throughput: run at the device's greatest priority on the legacy stream (no shim needed)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("job.py: torch sees no CUDA device")
    if args.mode == "throughput":
        run_throughput(args)
    else:
        run_server(args)


if __name__ == "__main__":
    main()
