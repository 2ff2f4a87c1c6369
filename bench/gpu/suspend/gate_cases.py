"""Cases that need the shim's resume gate and the suspend service (gslice-suspend-agent):
idle reclaim of a sleeping PyTorch process with transparent resume on its next call (and
that call's latency), and memory preemption of an opportunistic process for a guaranteed
allocation, resumed once the memory is free again."""
import os
import shutil
import subprocess
import tempfile
import time

GiB = 1 << 30


class Agent:
    def __init__(self, suite, env, args):
        self.log_path = os.path.join(suite.OUT, "suspend-agent.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([os.path.join(suite.BIN, "gslice-suspend-agent"), *args],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def states(self, pid):
        with open(self.log_path) as f:
            return [l for l in f if l.startswith(f"STATE pid={pid} ")]

    def wait_state(self, pid, state, timeout, cause=None):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for l in self.states(pid):
                if f" state={state} " in l and (cause is None or f" cause={cause} " in l):
                    return dict(kv.split("=", 1) for kv in l.split('reason=')[0].split()[1:])
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited {self.proc.returncode}: see {self.log_path}")
            time.sleep(0.05)
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def shim_env(suite, base, slice_name, memory, cls):
    env = dict(base)
    env.update(LD_PRELOAD=os.path.join(suite.SHIM_DIR, "libcuda.so.1"), GSLICE_SLICE=slice_name,
               GSLICE_MEMORY=memory, GSLICE_CLASS=cls, GSLICE_LOG="info")
    return env


def run(args, suite):
    shim = os.path.join(suite.SHIM_DIR, "libcuda.so.1")
    agent_bin = os.path.join(suite.BIN, "gslice-suspend-agent")
    if not (os.path.exists(shim) and os.access(agent_bin, os.X_OK)):
        suite.result("suspend.gate", "FAIL", f"not run: need {shim} and {agent_bin}")
        return
    tag = f"{os.getpid()}"
    base = dict(os.environ, GSLICE_LEDGER=f"/dev/shm/gslice-suite-{tag}-ledger",
                GSLICE_SUSPEND_BOARD=f"/dev/shm/gslice-suite-{tag}-board")
    real = "/usr/local/nvidia/lib64/libcuda.so.1"
    if os.path.exists(real):
        base["GSLICE_REAL_DRIVER"] = real
    extra = []
    nvml = "/usr/local/nvidia/lib64/libnvidia-ml.so.1"
    if os.path.exists(nvml):
        extra = ["--nvml", nvml, "--driver", real]
    agent = Agent(suite, base, ["--idle", "notebook=3", "--opportunistic", "batch", "--tick-ms", "100",
                                "--host-reserve", "8GiB", *extra])
    out = suite.results.setdefault("gate", {})
    try:
        idle_case(args, suite, agent, base, out)
        preemption_case(args, suite, agent, base, out)
    finally:
        agent.stop()
        shutil.rmtree(base["GSLICE_LEDGER"], ignore_errors=True)  # the ledger is a directory
        shutil.rmtree(base["GSLICE_SUSPEND_BOARD"], ignore_errors=True)  # the board is a directory


def idle_case(args, suite, agent, base, out):
    go = tempfile.mktemp(prefix="gslice-go-")
    w = suite.Worker(["sleeper", "--gib", "4", "--go", go], env=shim_env(suite, base, "notebook", "30GiB", "guaranteed"))
    try:
        w.wait_line("READY", 120)
        before = suite.gpu_apps().get(w.pid, 0)
        st = agent.wait_state(w.pid, "suspended", 60, cause="idle")
        if st is None:
            suite.result("suspend.gate.idle_reclaim", "FAIL", f"not suspended within 60 s ({before} MiB held); see suspend-agent.log")
            return
        time.sleep(0.3)
        during = suite.gpu_apps().get(w.pid, 0)
        open(go, "w").close()
        first = w.wait_line("FIRST_CALL_S", 120).split()
        verify = w.wait_line("VERIFY", 60)
        resumed = agent.wait_state(w.pid, "running", 10)
    finally:
        w.kill()
        if os.path.exists(go):
            os.unlink(go)
    first_s, second_s = float(first[1]), float(first[3])
    restore_s = float(resumed["restore_s"]) + float(resumed["unlock_s"]) if resumed else float("nan")
    out["idle"] = dict(mib_before=before, mib_suspended=during, checkpoint_s=float(st["checkpoint_s"]),
                       first_call_s=first_s, second_call_s=second_s, resume_driver_s=restore_s, verify=verify)
    ok = before >= 4096 and during < 256 and verify == "VERIFY ok" and resumed is not None
    suite.result("suspend.gate.idle_reclaim", "PASS" if ok else "FAIL",
                 f"sleeping process suspended after 3 s idle: {before} -> {during} MiB; its next call resumed it; data {verify.split()[1]}")
    suite.result("suspend.gate.first_call", "PASS" if resumed is not None and first_s > 0 else "FAIL",
                 f"first CUDA call after idle reclaim took {first_s:.3f} s (driver restore+unlock {restore_s:.3f} s, "
                 f"gslice added {first_s - restore_s:.3f} s); next call {second_s * 1000:.2f} ms")


def preemption_case(args, suite, agent, base, out):
    go_opp, go_bal, go_g = (tempfile.mktemp(prefix="gslice-go-") for _ in range(3))
    workers = []
    try:
        opp = suite.Worker(["hold", "--gib", "8", "--go", go_opp], env=shim_env(suite, base, "batch", "20GiB", "opportunistic"))
        workers.append(opp)
        opp.wait_line("READY", 120)
        free_mib = int(subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                                      capture_output=True, text=True).stdout.split()[0])
        ballast_gib = (free_mib - 6 * 1024) / 1024
        bal = suite.Worker(["hold", "--gib", f"{ballast_gib:.2f}", "--go", go_bal])  # guaranteed work, no shim
        workers.append(bal)
        bal.wait_line("READY", 180)
        free_left = suite.gpu_free_mib()
        g = suite.Worker(["alloc", "--gib", "10", "--go", go_g], env=shim_env(suite, base, "serving", "20GiB", "guaranteed"))
        workers.append(g)
        alloc = g.wait_line("ALLOC", 300).split()
        preempted = agent.wait_state(opp.pid, "suspended", 5, cause="preemption")
        opp_during = suite.gpu_apps().get(opp.pid, 0)
        open(go_g, "w").close()  # the guaranteed work ends and frees its 10 GiB
        g.finish(60)
        resumed = agent.wait_state(opp.pid, "running", 120)
        open(go_opp, "w").close()
        verify = opp.wait_line("VERIFY", 120)
    finally:
        for p in (go_opp, go_bal, go_g):
            open(p, "w").close()
        for w in workers:
            w.finish(30)
        for p in (go_opp, go_bal, go_g):
            os.unlink(p)
    out["preemption"] = dict(free_mib_before_alloc=free_left, alloc=alloc, opp_mib_during=opp_during,
                             checkpoint_s=float(preempted["checkpoint_s"]) if preempted else None,
                             resumed=resumed is not None, verify=verify)
    ok = alloc[1] == "ok" and preempted is not None and resumed is not None and verify == "VERIFY ok"
    suite.result("suspend.gate.preemption", "PASS" if ok else "FAIL",
                 f"guaranteed 10 GiB allocation with {free_left} MiB free: {alloc[1]} in {alloc[2]} s; "
                 f"opportunistic 8 GiB process suspended: {preempted is not None} ({opp_during} MiB left on GPU); "
                 f"resumed after the guaranteed work ended: {resumed is not None}; data {verify.split()[1]}")
