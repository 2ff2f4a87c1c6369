"""The suspend suite (issue 6) on a real GPU: PyTorch workloads suspended and resumed through
the driver's checkpoint API, raw and through gslice. Prints RESULT lines for bench/gpu/run,
writes every number to $OUT/suspend.json and a markdown table to $OUT/suspend.md.

  python3 bench/gpu/suspend/suite.py [--sizes 1,10,40] [--cases train,bench,gate]

Cases:
  train  a deterministic training loop is suspended mid-run; NVML must show its memory freed
         and no step may finish while it is suspended; after resume its loss trajectory must
         equal an uninterrupted run's with the same seed, bit for bit.
  bench  suspend (lock+checkpoint) and resume (restore+unlock) of a process holding 1, 10 and
         40 GiB, raw driver calls vs gslice's SuspendManager, alternated (ABBA), data verified.
  gate   needs the shim with its resume gate and gslice-suspend-agent: idle reclaim of a
         sleeping process, its first CUDA call's latency, and memory preemption.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
OUT = os.environ.get("OUT", os.path.join(ROOT, "gpu-out"))
BIN = os.environ.get("SUSPEND_BIN", os.path.join(os.environ.get("GSLICE_BUILD", os.path.join(ROOT, "build")), "bin"))
BENCH = os.path.join(BIN, "gslice-checkpoint-bench")
SHIM_DIR = os.environ.get("SUSPEND_SHIM_DIR", os.path.join(os.path.dirname(BIN), "lib", "gslice"))
WORKER = [sys.executable, os.path.join(HERE, "worker.py")]
GiB = 1 << 30
results = {}


def result(name, status, detail):
    print(f"RESULT {name} {status} {detail}", flush=True)
    results.setdefault("table", []).append([name, status, detail])


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Worker:
    """A workload process whose stdout lines are read as they come."""

    def __init__(self, args, env=None):
        self.lines = []
        self.proc = subprocess.Popen(WORKER + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1, env=env)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf = ""

    @property
    def pid(self):
        return self.proc.pid

    def poll_lines(self):
        try:
            chunk = self.proc.stdout.read()
        except (BlockingIOError, TypeError):
            chunk = None
        if chunk:
            self.buf += chunk
            *done, self.buf = self.buf.split("\n")
            for line in done:
                self.lines.append((time.monotonic(), line))
        return self.lines

    def wait_line(self, prefix, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for t, line in self.poll_lines():
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None:
                self.poll_lines()
                for t, line in self.lines:
                    if line.startswith(prefix):
                        return line
                raise RuntimeError(f"worker exited {self.proc.returncode}: " +
                                   " | ".join(l for _, l in self.lines[-8:]))
            time.sleep(0.01)
        raise RuntimeError(f"timed out waiting for {prefix}: " + " | ".join(l for _, l in self.lines[-5:]))

    def count(self, prefix):
        return sum(1 for _, l in self.poll_lines() if l.startswith(prefix))

    def finish(self, timeout=300):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.poll_lines()
        rest = self.proc.stdout.read() or ""
        for line in (self.buf + rest).split("\n"):
            if line:
                self.lines.append((time.monotonic(), line))
        self.buf = ""
        return [l for _, l in self.lines]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def bench_tool(*args, timeout=300):
    r = subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"gslice-checkpoint-bench {' '.join(args)}: {r.stderr.strip()}")
    line = next(l for l in r.stdout.splitlines() if l.startswith(("TIMES", "STATE")))
    return dict(kv.split("=", 1) for kv in line.split()[1:])


def gpu_apps():
    """pid -> MiB used, from NVML through nvidia-smi."""
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True)
    apps = {}
    for line in r.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            apps[int(parts[0])] = int(parts[1]) if parts[1].isdigit() else 0
    return apps


def gpu_free_mib():
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    return int(r.stdout.split()[0])


def gpu_used_mib():
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    return int(r.stdout.split()[0])


def case_train(args):
    steps, ballast = args.train_steps, 8
    ref = Worker(["train", "--steps", str(steps), "--ballast-gib", str(ballast)])
    ref_lines = ref.finish()
    ref_losses = [l.split()[3] for l in ref_lines if l.startswith("STEP")]
    if len(ref_losses) != steps:
        result("suspend.train", "FAIL", f"reference run did not finish: {ref_lines[-3:]}")
        return
    w = Worker(["train", "--steps", str(steps), "--ballast-gib", str(ballast)])
    try:
        w.wait_line("READY", 120)
        w.wait_line(f"STEP {steps // 4} ", 120)
        before = gpu_apps().get(w.pid, 0)
        used_before = gpu_used_mib()
        s = bench_tool("--pid", str(w.pid), "--mode", "gslice", "--action", "suspend",
                       "--bytes", f"{before}MiB")
        steps_at_suspend = w.count("STEP")
        time.sleep(0.5)
        during = gpu_apps().get(w.pid, 0)
        used_during = gpu_used_mib()
        time.sleep(2.0)
        steps_while = w.count("STEP") - steps_at_suspend
        r = bench_tool("--pid", str(w.pid), "--mode", "gslice", "--action", "resume")
        lines = w.finish()
    finally:
        w.kill()
    losses = [l.split()[3] for l in lines if l.startswith("STEP")]
    ballast_ok = any(l == "BALLAST ok" for l in lines)
    freed = before - during
    results["train"] = dict(steps=steps, suspended_after_step=steps_at_suspend, proc_mib_before=before,
                            proc_mib_during=during, gpu_used_before=used_before, gpu_used_during=used_during,
                            steps_while_suspended=steps_while, suspend=s, resume=r,
                            losses_equal=losses == ref_losses, ballast_ok=ballast_ok,
                            first_diff=next((i for i, (a, b) in enumerate(zip(losses, ref_losses)) if a != b), None))
    ok_nvml = before >= ballast * 1024 and during < 256
    result("suspend.train.nvml_freed", "PASS" if ok_nvml else "FAIL",
           f"process {before} MiB -> {during} MiB while suspended (GPU {used_before} -> {used_during} MiB used)")
    result("suspend.train.paused", "PASS" if steps_while == 0 else "FAIL",
           f"{steps_while} steps finished while suspended (suspended after step {steps_at_suspend})")
    same = losses == ref_losses and len(losses) == steps and 0 < steps_at_suspend < steps
    result("suspend.train.loss_match", "PASS" if same and ballast_ok else "FAIL",
           f"{len(losses)} losses, bit-identical to the uninterrupted run: {losses == ref_losses}; "
           f"ballast intact: {ballast_ok}; suspend {float(s['total_s']):.2f} s, resume {float(r['total_s']):.2f} s")


def cycle(pid, mode, size_gib):
    t = bench_tool("--pid", str(pid), "--mode", mode, "--action", "cycle", "--bytes", f"{size_gib}GiB")
    return dict(suspend=float(t["lock_s"]) + float(t["checkpoint_s"]), added=float(t.get("added_s", "0")),
                resume=float(t["restore_s"]) + float(t["unlock_s"]),
                **{k: float(v) for k, v in t.items() if k.endswith("_s")})


def case_bench(args):
    rows = []
    for size in args.sizes:
        go = tempfile.mktemp(prefix="gslice-go-")
        w = Worker(["hold", "--gib", str(size), "--go", go])
        try:
            w.wait_line("READY", 300)
            order = ["raw", "gslice", "gslice", "raw"] if size <= 10 else ["raw", "gslice"]
            runs = {"raw": [], "gslice": []}
            for mode in order:
                runs[mode].append(cycle(w.pid, mode, size))
            open(go, "w").close()
            verify = w.wait_line("VERIFY", 300)
        finally:
            w.kill()
            if os.path.exists(go):
                os.unlink(go)
        row = {"gib": size, "verify": verify, "raw": runs["raw"], "gslice": runs["gslice"]}
        for half in ("suspend", "resume"):
            raw = statistics.mean(r[half] for r in runs["raw"])
            gs = statistics.mean(r[half] for r in runs["gslice"])
            row[f"{half}_raw_s"], row[f"{half}_gslice_s"] = raw, gs
            row[f"{half}_ratio"] = gs / raw if raw > 0 else float("nan")
        rows.append(row)
        ok = verify == "VERIFY ok"
        result(f"suspend.bench.{size}GiB", "PASS" if ok else "FAIL",
               f"suspend raw {row['suspend_raw_s']:.3f} s gslice {row['suspend_gslice_s']:.3f} s "
               f"({row['suspend_ratio']:.3f}x); resume raw {row['resume_raw_s']:.3f} s gslice "
               f"{row['resume_gslice_s']:.3f} s ({row['resume_ratio']:.3f}x); data {verify.split()[1]}")
    results["bench"] = rows
    added = [r2["added"] for r in rows for r2 in r["gslice"]]
    if added:
        cycles = [r2["suspend"] + r2["resume"] for r in rows for r2 in r["gslice"]]
        result("suspend.bench.added", "PASS" if max(a / c for a, c in zip(added, cycles)) <= 0.10 else "FAIL",
               f"time gslice's manager adds around the driver calls: max {max(added) * 1000:.3f} ms per "
               f"suspend+resume cycle, at most {100 * max(a / c for a, c in zip(added, cycles)):.4f}% of the cycle")
    worst = max(max(r["suspend_ratio"], r["resume_ratio"]) for r in rows)
    total_raw = sum(r["suspend_raw_s"] + r["resume_raw_s"] for r in rows)
    total_gs = sum(r["suspend_gslice_s"] + r["resume_gslice_s"] for r in rows)
    result("suspend.bench.overhead", "PASS" if total_gs <= 1.10 * total_raw else "FAIL",
           f"gslice/raw over all sizes {total_gs / total_raw:.3f} (limit 1.10); worst single half {worst:.3f}")


def write_reports():
    with open(os.path.join(OUT, "suspend.json"), "w") as f:
        json.dump(results, f, indent=2)
    md = ["| case | status | detail |", "| --- | --- | --- |"]
    md += [f"| {n} | {s} | {d} |" for n, s, d in results.get("table", [])]
    if results.get("bench"):
        md += ["", "| size | suspend raw (s) | suspend gslice (s) | ratio | resume raw (s) | resume gslice (s) | ratio |",
               "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in results["bench"]:
            md.append(f"| {r['gib']} GiB | {r['suspend_raw_s']:.3f} | {r['suspend_gslice_s']:.3f} | "
                      f"{r['suspend_ratio']:.3f} | {r['resume_raw_s']:.3f} | {r['resume_gslice_s']:.3f} | "
                      f"{r['resume_ratio']:.3f} |")
    with open(os.path.join(OUT, "suspend.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1,10,40")
    p.add_argument("--cases", default="train,bench,gate")
    p.add_argument("--train-steps", type=int, default=300)
    args = p.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    os.makedirs(OUT, exist_ok=True)
    if not os.access(BENCH, os.X_OK):
        result("suspend.setup", "FAIL", f"no {BENCH}: build gslice-checkpoint-bench first")
        return 1
    cases = args.cases.split(",")
    import gate_cases  # noqa: E402  (needs the shim; kept apart)
    table = {"train": case_train, "bench": case_bench, "gate": lambda a: gate_cases.run(a, sys.modules[__name__])}
    for c in cases:
        start = time.monotonic()
        try:
            table[c](args)
        except Exception as e:  # a broken case must not hide the others
            result(f"suspend.{c}", "FAIL", f"{type(e).__name__}: {e}")
        log(f"case {c}: {time.monotonic() - start:.1f} s")
        write_reports()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
