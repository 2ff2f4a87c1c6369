"""The harvest frontier: how much an opportunistic job gets beside a guaranteed one, for
gslice at several protection levels against plain time-slicing and plain MPS, in one call.

  frontier.py plan                          the runs, their commands and estimated wall time
  frontier.py run --json F --logs DIR --mps-dir DIR
                                            runs them; F is rewritten after every run

bench/gpu/suites/frontier.sh runs it and prints frontier_report.py's table. Pairs (the
compute suite's cases 3 and 4, bench/gpu/compute/suite.py):
  train    guaranteed ResNet-50 training, opportunistic BERT-base training
  latency  guaranteed BERT-base inference server at a fixed request rate (~50% load, its
           service time measured alone in the first run), opportunistic ResNet-50 training
  gpu      both GPU-bound matrix products (not in the default FRONTIER_PAIRS)
Configurations, per pair:
  solo-before, solo-after  each job alone, before everything and after everything (drift)
  timeslice                both native, no MPS, no gslice (the GPU's time-slicing)
  gslice-P                 guaranteed `gslice run --class guaranteed --protect P`, the other
                           `--class opportunistic`, time-sliced; P in FRONTIER_PROTECT
  mps-T-pQ                 both MPS clients, the opportunistic one at
                           CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=T and CUDA_MPS_CLIENT_PRIORITY=Q
                           (0 normal, 1 below normal), the guaranteed one at 100 and 0
  gslice-mps-P             gslice-P with both MPS clients (FRONTIER_GSLICE_MPS=1)
  gslice-mps-P-pQ          interleaved only (FRONTIER_GSLICE_PRIO): gslice-mps-P with the
                           opportunistic program started at CUDA_MPS_CLIENT_PRIORITY=Q, over
                           the priority gslice gives it
  gslice-mps-P-capC(-time) interleaved only (FRONTIER_GSLICE_CAP): the first level's guaranteed
                           process beside gslice's opportunistic job capped at C%, by the SMs
                           and the gate (`--cap=C%`), or by time alone (-time: its program at
                           100% of the SMs over gslice's setting); shown, not judged
  gslice-solo-P            interleaved only (FRONTIER_GSLICE_SOLO=1): gslice's guaranteed
                           process at level P alone, its opportunistic process resting (what
                           gslice costs the job with nothing to protect it from); shown, not
                           judged
  gslice-solo-opp          the same for gslice's opportunistic process: alone, every guaranteed
                           process resting (what gslice's shim costs the opportunistic job where
                           nothing holds it back); shown, not judged
  gslice-mps-P-progprio    interleaved only (FRONTIER_GSLICE_PROGPRIO=1): the first level's
                           guaranteed process with GSLICE_STREAM_PRIORITY=program (its streams
                           at the program's priorities, not the GPU's greatest) beside gslice's
                           opportunistic job (with FRONTIER_GSLICE_SOLO also alone:
                           gslice-solo-P-progprio); shown, not judged
  gslice-mps-P-base        interleaved only (FRONTIER_GSLICE_BASE): the first level's pair again,
                           both gslice processes from another build; shown, not judged
  gslice-mps-P-smsS        interleaved only (FRONTIER_GSLICE_SMS): the first level's guaranteed
                           process beside gslice's opportunistic job with no cap, its program
                           at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=S (S% of the SMs, no time held
                           back by a cap); shown, not judged
A run is one set of processes working through phases (suite.run_config): solo-before's
processes also give timeslice, and one guaranteed MPS client works beside each of one
priority's opportunistic clients in turn, so a process's start-up (about 20 s) is paid once
per run. Each phase measures FRONTIER_WINDOW_S seconds after FRONTIER_SETTLE_S (a gslice
run's single phase after FRONTIER_LEAD_S, the opportunistic controller's time to learn).

Interleaved (FRONTIER_INTERLEAVE=R): each pair is one run on MPS whose processes stay up
while every configuration takes its turn: a guaranteed MPS client (alone: the solo phase),
opportunistic MPS clients, one per thread percentage and priority (the one at 100 and normal
priority also alone: the other solo phase), and gslice's guaranteed processes, one per
protection level, beside one gslice opportunistic process. Each of R rounds gives every
configuration a phase of FRONTIER_WINDOW_S / R seconds, the order rotated a phase a round
and every other round run backwards (so no configuration always comes first after another, or
after a process's rest), and each figure is against the solo phases of the same run. Separate runs minutes apart put
the host's drift into every figure (on a two-GPU H200 host, ResNet-50 alone moved from 50 to
43 steps/s between the solo runs before and after, both GPUs alike); interleaved, each
comparison is seconds to minutes apart. The time-slicing configuration runs a native pair of
processes (not MPS clients: their MPS pipe folder has no daemon, so CUDA runs them without
MPS) beside the MPS server, whose clients rest meanwhile, against the MPS clients' solo phases
(FRONTIER_TIMESLICE=0 leaves it out); the latency pair's server measures its service time
alone first (latency/calibrate; lanes run at once take the largest of theirs, FRONTIER_SHARED).

Lanes (FRONTIER_LANES=N, FRONTIER_LANE=k): each lane runs one pair (the lanes split evenly
between the pairs); a pair's runs other than the solo ones are dealt, in order of importance,
each to its lane with the least estimated time so far, and every lane gets its own solo runs
before and after (time-slicing in the pair's first lane): each lane is self-contained, its figures against its own solo runs, so lanes can run at
once on the GPUs of one machine (frontier.sh's FRONTIER_GPUS) and frontier_report.py merges
their JSON. `plan` prints every lane; `run` runs lane k. Interleaved, a lane is a pair's
run (the pairs in turn, again on further lanes); with FRONTIER_SPLIT=S a pair's
configurations are split over S runs, each with its own solo phases and plain MPS at priority
1 (every gslice level against it in its own rounds), a lane each (the pairs in turn, then each
pair's next part): a pair's every configuration at 60 s windows takes more than a call on one
GPU (nine configurations, ~690 s), in S lanes it takes one.

Runs go in order of importance, the pairs side by side: solo-before, gslice at the first
protection level, MPS at the first priority, gslice at the other levels, MPS at the other
priorities, gslice on MPS; solo-after always last, with its time kept aside. A run that would
end past the deadline (FRONTIER_DEADLINE, epoch seconds; else now + FRONTIER_BUDGET_S) is
skipped and recorded as skipped. A run is failed when a process exits non-zero, reports a
non-finite output, or logs a CUDA error; failed runs are kept in the JSON with their error.
While a run works, nvidia-smi samples its GPU's SM clock, busy share and power every 0.5 s
(raw/RUN.gpu.csv); each configuration's phases' means go in the JSON ("gpu").
"""

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import suite  # noqa: E402  (no torch: job.py processes do the GPU work)
from frontier_report import SIDE_BY_SIDE_PLAIN  # noqa: E402  (split, every part runs it)


def floats(name, default):
    return [float(x) for x in os.environ.get(name, default).split(",") if x.strip()]


def ints(name, default):
    return [int(x) for x in os.environ.get(name, default).split(",") if x.strip()]


PAIRS = [p.strip() for p in os.environ.get("FRONTIER_PAIRS", "train,latency").split(",") if p.strip()]
PROTECT = floats("FRONTIER_PROTECT", "0.97,0.90,0.80")
MPS_PCT = ints("FRONTIER_MPS_PCT", "100,50,25,10")
MPS_PRIO = ints("FRONTIER_MPS_PRIO", "1,0")
# FRONTIER_MPS_PCT_P0, FRONTIER_MPS_PCT_P1: one priority's thread percentages, where they
# differ from FRONTIER_MPS_PCT (a call that cannot hold every pairing).
MPS_PCT_OF = {q: ints(f"FRONTIER_MPS_PCT_P{q}", ",".join(map(str, MPS_PCT))) for q in (0, 1)}
# FRONTIER_GSLICE_PRIO=Q[,Q]: interleaved, one gslice opportunistic process per client priority
# Q, its program's environment setting it over gslice's (gslice-mps-P-pQ); unset: one, at the
# priority gslice gives it (gslice-mps-P).
GSLICE_PRIO = ints("FRONTIER_GSLICE_PRIO", "")
# FRONTIER_GSLICE_CAP=C[,C]: interleaved, beside the first protection level's guaranteed
# process, gslice's opportunistic job with a hard cap of C%, held two ways: by the SMs
# (`--cap=C%`: its MPS client at C% of the SMs, the gate holding the rest; gslice-mps-P-capC)
# and by time alone (the same, its program's environment setting 100% of the SMs over
# gslice's: gslice-mps-P-capC-time). Which one buys back a loss that plain MPS's thread cap
# buys back says which actuator a controller needs.
GSLICE_CAP = ints("FRONTIER_GSLICE_CAP", "")
# FRONTIER_GSLICE_SMS=S[,S]: interleaved, beside the first protection level's guaranteed
# process, gslice's opportunistic job with no cap, its program's environment setting
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=S (gslice-mps-P-smsS): the SMs alone as the actuator, as
# plain MPS's thread percentage is, with gslice's controller and gate as they are.
GSLICE_SMS = ints("FRONTIER_GSLICE_SMS", "")
# FRONTIER_GSLICE_BASE=DIR: interleaved, the first protection level's gslice pair again, both
# processes from the build in DIR (its bin/gslice; gslice-mps-P-base): a change to gslice set
# beside the build before it round by round, on one GPU.
GSLICE_BASE = os.environ.get("FRONTIER_GSLICE_BASE", "")
# FRONTIER_GSLICE_SOLO=1: interleaved, each level's gslice guaranteed process also works a phase
# alone (gslice-solo-P), against the plain guaranteed process's solo phases: gslice's own cost to
# the job, apart from what sharing costs it; and gslice's opportunistic process too
# (gslice-solo-opp), against the plain opportunistic process's.
GSLICE_SOLO = os.environ.get("FRONTIER_GSLICE_SOLO", "0") == "1"
# FRONTIER_GSLICE_PROGPRIO=1: interleaved, the first level's guaranteed process again with
# GSLICE_STREAM_PRIORITY=program (gslice-mps-P-progprio): whether the greatest stream priority
# gslice gives guaranteed work costs a launch-bound job beside opportunistic work (preempting
# the other client's kernels for each of its own) more than it protects it.
GSLICE_PROGPRIO = os.environ.get("FRONTIER_GSLICE_PROGPRIO", "0") == "1"
# FRONTIER_HOST_SPIN=N: interleaved, the plain guaranteed process beside N processes that each
# keep one host thread busy and do no GPU work (host-spin, job.py's workload of that name):
# what another job's host loop alone costs a job bound by its launches. Shown, not judged.
HOST_SPIN = int(os.environ.get("FRONTIER_HOST_SPIN", "0") or "0")
# FRONTIER_TWIN=1: interleaved, a second plain guaranteed process works a phase alone each round
# (solo-twin), against the first's solo phases: how far two processes of the same job differ
# alone (host cores, memory placement), the spread that gslice-solo-P's figure is read against.
TWIN = os.environ.get("FRONTIER_TWIN", "0") == "1"
# FRONTIER_PIN=N: every process of a run on N host cores of its own (taskset), the lane's share
# of the cores this process may use split between lanes run at once: a launch-bound job's speed
# is its host's, and processes left to the scheduler may share a core or move between them
# (same for plain and gslice processes; a gslice process's gate thread shares its N cores).
PIN = int(os.environ.get("FRONTIER_PIN", "0") or "0")
# FRONTIER_FIRST_ROUND=K: interleaved, the rounds run are K to K + FRONTIER_INTERLEAVE - 1 of the
# rotation (each round starts one phase later, every other one backwards): a run too long for
# one call runs its rounds over several, rounds 0-1 in one and 2-3 in the next, and
# frontier_report.py pools the calls' files of a lane as one run.
FIRST_ROUND = int(os.environ.get("FRONTIER_FIRST_ROUND", "0") or "0")
# FRONTIER_SPLIT=S: interleaved, each pair's configurations split over S runs, each with its
# own solo phases: with FRONTIER_GPUS, a run a GPU (see the top).
SPLIT = max(1, int(os.environ.get("FRONTIER_SPLIT", "1") or "1"))
# FRONTIER_TIMESLICE=0: interleaved, no time-slicing configuration (see the top).
TIMESLICE = os.environ.get("FRONTIER_TIMESLICE", "1") != "0"
# The MPS pipe folder of a run's native processes: no daemon is ever there, so CUDA runs them
# without MPS (time-sliced against the MPS server) whatever the environment says.
NO_MPS = {"CUDA_MPS_PIPE_DIRECTORY": "/nonexistent/gslice-frontier-native"}
# FRONTIER_GSLICE_MPS: 0 gslice time-sliced only; 1 also gslice on MPS (after everything
# else); only: gslice on MPS in the time-sliced runs' places, no time-sliced gslice runs.
GSLICE_MPS_MODE = os.environ.get("FRONTIER_GSLICE_MPS", "0")
GSLICE_MPS = GSLICE_MPS_MODE in ("1", "only")
GSLICE_MPS_ONLY = GSLICE_MPS_MODE == "only"
WINDOW_S = float(os.environ.get("FRONTIER_WINDOW_S", "15"))
# FRONTIER_INTERLEAVE=R: each pair in one run whose processes stay up while every
# configuration takes its turn, R rounds of phases of FRONTIER_WINDOW_S / R seconds (see the top).
INTERLEAVE = int(os.environ.get("FRONTIER_INTERLEAVE", "0") or "0")
# Where every configuration's processes share one GPU at once (the interleaved run), each
# gslice slice's limit, so that together they stay inside the card (not what is measured).
SHARED_MEMORY = "30GiB"
# The latency pair's interleaved run takes the server's service time from a short run of the
# server alone before it (seconds measured).
CALIBRATE_S = 2.0
# FRONTIER_SHARED=DIR (frontier.sh sets it for lanes run at once): the lanes that measure the
# server's service time each write theirs there and all take the largest, so the server's
# request rate is the same in every lane and its load at most 0.5 in each. Measured alone, the
# same server on two GPUs of one host gave 8.27 and 5.98 ms in one call; the second lane's
# server then ran at 0.67 of its time (its solo p99 95 ms against 48 ms), and the two lanes'
# figures, which the report compares, were of different pairs.
SHARED = os.environ.get("FRONTIER_SHARED", "")
SHARED_WAIT_S = 120.0
SETTLE_S = float(os.environ.get("FRONTIER_SETTLE_S", "1"))
LEAD_S = float(os.environ.get("FRONTIER_LEAD_S", "10"))
BUDGET_S = float(os.environ.get("FRONTIER_BUDGET_S", "560"))
LANES = int(os.environ.get("FRONTIER_LANES", "1") or "1")
LANE = int(os.environ.get("FRONTIER_LANE", "0") or "0")
# Estimated seconds a run costs beyond its phases: process start, torch import, model build,
# warm-up (3 s) and the window's tail, in parallel for its processes. On an H200 with torch
# 2.11 (bench/results/compute-frontier-h200-2026-11-29-one-level.md) runs of two such processes spent 12-15 s
# beyond their phases (19-22 s on the H100 of bench/results/compute-2026-11-26.md).
STARTUP_S = 16.0
# Each process beyond two adds to a run's start-up (more imports and builds at once).
EXTRA_PROC_S = 2.0
# The latency pair's first run starts its training job once the server has measured its
# service time alone (job.py --after): that much later.
AFTER_S = 8.0
# Starting or stopping the MPS control daemon.
MPS_SWITCH_S = 3.0
# What frontier.sh spends outside frontier.py's runs (its torch check, the report, time kept
# at the end); the plan (dry run) counts it against FRONTIER_BUDGET_S.
SUITE_S = 25.0
# A process log line that fails its run (CUDA_ERROR_NOT_READY is an event query's normal answer).
ERROR_PATTERNS = re.compile(r"CUDA error|CUDA_ERROR_(?!NOT_READY)|cudaError|Traceback \(most recent call last\)")

JOBS = {  # pair -> role -> (job.py mode, workload)
    "train": {"g": ("throughput", "resnet50"), "o": ("throughput", "bert-train")},
    "latency": {"g": ("server", "bert-infer"), "o": ("throughput", "resnet50")},
    # Both GPU-bound (bf16 8192 x 8192 matrix products, eight a step): where a guaranteed job
    # waits on the GPU all the time, what the controller holds back.
    "gpu": {"g": ("throughput", "matmul"), "o": ("throughput", "matmul")},
}
# Roles "h0", "h1", ... (FRONTIER_HOST_SPIN), in every pair: a busy host thread, no GPU work.
HOST_JOB = ("throughput", "host-spin")


def job_of(pair, role):
    """(job.py mode, workload) of a process of this role."""
    return HOST_JOB if role.startswith("h") else JOBS[pair][role]


def fmt_level(p):
    """A protection level as configuration names and --protect show it: two decimals unless it has more."""
    two = f"{p:.2f}"
    return two if float(two) == p else repr(p)


class Run:
    """One set of processes and its phases. phases: [(configuration, {role: process id})];
    procs(service_ms, mps_env) gives suite.run_config's process list."""

    def __init__(self, pair, name, mps, phases, settle, tier, reserved=False, after=False, window=None,
                 calibrates=False):
        self.pair, self.name, self.mps, self.phases = pair, name, mps, phases
        self.settle, self.tier, self.reserved, self.after = settle, tier, reserved, after
        self.window = WINDOW_S if window is None else window  # each phase's measured seconds
        # Whether the latency pair's server measures its service time alone here (the runs
        # after it take that time).
        self.calibrates = calibrates
        self.memory = suite.GSLICE_MEMORY  # each gslice slice's limit
        # Further job.py flags of every throughput process: interleaved, ("--rest",): a warm
        # process waits for the start without working, so that an opportunistic one held back
        # beside busy guaranteed ones still warms up (a GPU-bound pair); the first phase drains.
        self.rest = ()
        self.configs = {}  # configuration -> its attributes (kind, protect, mps_pct, mps_prio)
        self.part = None  # interleaved: which of the pair's FRONTIER_SPLIT runs
        # process id -> (role, gslice flags or None, MPS env or None, extra job.py args). A gslice
        # process's MPS env is what its program's environment sets over what `gslice run` gives.
        self.proc_specs = {}
        self.builds = {}  # process id -> the build its `gslice run` comes from, where not suite's

    @property
    def key(self):
        return f"{self.pair}/{self.name}"

    def estimate(self):
        return (STARTUP_S + EXTRA_PROC_S * max(0, len(self.proc_specs) - 2) + (AFTER_S if self.after else 0)
                + len(self.phases) * (self.settle + self.window))

    def procs(self, service_ms, mps_env, plan=False):
        """plan: for the dry run, cores numbered from 0 where FRONTIER_PIN is set (this machine
        need not have them)."""
        out = []
        cores = pinned_cores(len(self.proc_specs), plan)
        for i, (ident, (role, gslice_flags, mps, args)) in enumerate(self.proc_specs.items()):
            mode, workload = job_of(self.pair, role)
            prefix, env = (), dict(mps_env, **mps) if mps is not None else {}
            if gslice_flags is not None:
                over = ["env", *(f"{k}={v}" for k, v in sorted((mps or {}).items()))] if mps else []
                prefix = [*suite.gslice_prefix(*gslice_flags, memory=self.memory, build=self.builds.get(ident)), *over]
                env = dict(mps_env) if mps is not None else {}
            if cores:
                prefix = ["taskset", "-c", ",".join(map(str, cores[i])), *prefix]
            if mode == "server":
                out.append(suite.server(ident, service_ms, prefix, env))
            else:
                out.append(suite.throughput(workload, ident, prefix, env, warmup=3, args=(*args, *self.rest)))
        return out


def pinned_cores(n, plan=False):
    """FRONTIER_PIN: n processes' cores, PIN each from this lane's share of the cores this
    process may use ([] unpinned); too few cores for them is an error, not a silent overlap.
    plan: as on a machine with just enough cores for every lane."""
    if not PIN:
        return []
    cores = list(range(PIN * n * LANES)) if plan else sorted(os.sched_getaffinity(0))
    share = len(cores) // LANES
    mine = cores[LANE * share:(LANE + 1) * share]
    if PIN * n > len(mine):
        sys.exit(f"frontier.py: FRONTIER_PIN={PIN}: {n} processes need {PIN * n} cores, lane {LANE} has "
                 f"{len(mine)} of {len(cores)}")
    return [mine[i * PIN:(i + 1) * PIN] for i in range(n)]


def mps_client(pct, prio):
    return {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct), "CUDA_MPS_CLIENT_PRIORITY": str(prio)}


def solo_run(pair, name, tier, reserved, with_timeslice):
    # The latency pair's first run measures the server's service time with the GPU to itself.
    calibrates = pair == "latency" and name == "solo-before"
    phases = [(name, {"g": "g"}), (name, {"o": "o"})] + ([("timeslice", {"g": "g", "o": "o"})] if with_timeslice else [])
    r = Run(pair, name, False, phases, SETTLE_S, tier, reserved, after=calibrates, calibrates=calibrates)
    r.configs[name] = {"kind": "solo"}
    if with_timeslice:
        r.configs["timeslice"] = {"kind": "timeslice"}
    r.proc_specs = {"g": ("g", None, None, ()), "o": ("o", None, None, ("--after", "g") if calibrates else ())}
    return r


def gslice_run(pair, protect, tier, on_mps):
    name = f"gslice-{'mps-' if on_mps else ''}{fmt_level(protect)}"
    r = Run(pair, name, on_mps, [(name, {"g": "g", "o": "o"})], LEAD_S, tier)
    r.configs[name] = {"kind": "gslice-mps" if on_mps else "gslice", "protect": protect}
    r.proc_specs = {"g": ("g", ("--class=guaranteed", "--protect", fmt_level(protect)), {} if on_mps else None, ()),
                    "o": ("o", ("--class=opportunistic",), {} if on_mps else None, ())}
    return r


def mps_run(pair, prio, tier):
    phases, configs = [], {}
    specs = {"g": ("g", None, mps_client(100, 0), ())}
    for pct in MPS_PCT_OF[prio]:
        name, ident = f"mps-{pct}-p{prio}", f"o{pct}"
        phases.append((name, {"g": "g", "o": ident}))
        configs[name] = {"kind": "mps", "mps_pct": pct, "mps_prio": prio}
        specs[ident] = ("o", None, mps_client(pct, prio), ())
    r = Run(pair, f"mps-p{prio}", True, phases, SETTLE_S, tier)
    r.configs, r.proc_specs = configs, specs
    return r


def calibrate_run(pair):
    """The server alone on MPS for CALIBRATE_S, to measure its service time (no configuration)."""
    r = Run(pair, "calibrate", True, [("calibrate", {"g": "g"})], 0.0, 0, window=CALIBRATE_S, calibrates=True)
    r.proc_specs = {"g": ("g", None, mps_client(100, 0), ())}
    return r


def interleaved_run(pair, part=0):
    """Every configuration of a pair on MPS in one run (FRONTIER_INTERLEAVE): a guaranteed MPS
    client (the solo phases' and the plain MPS configurations'), one opportunistic MPS client
    per thread percentage and priority, one gslice guaranteed process per protection level and
    one gslice opportunistic process, and a native pair for time-slicing (FRONTIER_TIMESLICE);
    each round gives every configuration one phase, rotated, every other round backwards. With
    FRONTIER_SPLIT=S, part k of S: plain MPS at priority 1 on all the SMs (SIDE_BY_SIDE_PLAIN,
    which the report sets every gslice level beside in the same rounds) and the other
    configurations in order of importance dealt in turn (the k-th, the k+S-th, ...), each part
    with solo phases of its own, and only the processes its phases need."""
    specs = {"g": ("g", None, mps_client(100, 0), ()), "o100p0": ("o", None, mps_client(100, 0), ())}
    solos = [("solo", {"g": "g"}), ("solo", {"o": "o100p0"})]
    entries = []  # (configuration, its roles' processes, its attributes), in order of importance
    for pct, q in [(pct, q) for q in MPS_PRIO for pct in MPS_PCT_OF[q]]:
        ident = f"o{pct}p{q}"
        specs[ident] = ("o", None, mps_client(pct, q), ())
        entries.append((f"mps-{pct}-p{q}", {"g": "g", "o": ident}, {"kind": "mps", "mps_pct": pct, "mps_prio": q}))
    if TIMESLICE:
        specs["gT"], specs["oT"] = ("g", None, NO_MPS, ()), ("o", None, NO_MPS, ())
        entries.append(("timeslice", {"g": "gT", "o": "oT"}, {"kind": "timeslice"}))
    # gslice's opportunistic processes: "O" at the priority gslice gives, or "Op<Q>" at each Q.
    opps = [(f"Op{q}", f"-p{q}", q) for q in GSLICE_PRIO] or [("O", "", None)]
    for x in PROTECT:
        ident = f"G{fmt_level(x)}"
        specs[ident] = ("g", ("--class=guaranteed", "--protect", fmt_level(x)), {}, ())
        for o, suffix, q in opps:
            entries.append((f"gslice-mps-{fmt_level(x)}{suffix}", {"g": ident, "o": o},
                            {"kind": "gslice-mps", "protect": x, "gslice_prio": q}))
    for x in PROTECT if GSLICE_SOLO else []:
        entries.append((f"gslice-solo-{fmt_level(x)}", {"g": f"G{fmt_level(x)}"}, {"kind": "gslice-solo", "protect": x}))
    if GSLICE_SOLO and PROTECT:
        entries.append(("gslice-solo-opp", {"o": opps[0][0]}, {"kind": "gslice-solo"}))
    if GSLICE_PROGPRIO and PROTECT:
        x = PROTECT[0]
        ident = f"G{fmt_level(x)}p"
        specs[ident] = ("g", ("--class=guaranteed", "--protect", fmt_level(x)), {"GSLICE_STREAM_PRIORITY": "program"}, ())
        entries.append((f"gslice-mps-{fmt_level(x)}-progprio", {"g": ident, "o": opps[0][0]},
                        {"kind": "gslice-mps-progprio", "protect": x}))
        if GSLICE_SOLO:
            entries.append((f"gslice-solo-{fmt_level(x)}-progprio", {"g": ident},
                            {"kind": "gslice-solo", "protect": x, "stream_priority": "program"}))
    for o, _, q in opps if PROTECT else []:
        specs[o] = ("o", ("--class=opportunistic",), {} if q is None else {"CUDA_MPS_CLIENT_PRIORITY": str(q)}, ())
    # The cap by the SMs ("Oc<C>"), and by time alone ("Oc<C>t": 100% of the SMs over gslice's).
    ways = (("sms", "", {}), ("time", "-time", {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}))
    for cap, (by, suffix, over) in [(c, w) for c in GSLICE_CAP for w in ways] if PROTECT else []:
        x, ident = PROTECT[0], f"Oc{cap}{'t' if over else ''}"
        specs[ident] = ("o", ("--class=opportunistic", f"--cap={cap}%"), over, ())
        entries.append((f"gslice-mps-{fmt_level(x)}-cap{cap}{suffix}", {"g": f"G{fmt_level(x)}", "o": ident},
                        {"kind": "gslice-mps-cap", "protect": x, "gslice_cap": cap, "cap_by": by}))
    for sms in GSLICE_SMS if PROTECT else []:
        x, ident = PROTECT[0], f"Os{sms}"
        specs[ident] = ("o", ("--class=opportunistic",), {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(sms)}, ())
        entries.append((f"gslice-mps-{fmt_level(x)}-sms{sms}", {"g": f"G{fmt_level(x)}", "o": ident},
                        {"kind": "gslice-mps-sms", "protect": x, "gslice_sms": sms}))
    if TWIN:
        specs["g2"] = ("g", None, mps_client(100, 0), ())
        entries.append(("solo-twin", {"g": "g2"}, {"kind": "twin"}))
    if HOST_SPIN:
        spinners = {f"h{k}": f"h{k}" for k in range(HOST_SPIN)}
        specs.update({ident: (ident, None, mps_client(100, 1), ()) for ident in spinners})
        entries.append(("host-spin", {"g": "g", **spinners}, {"kind": "host", "host_spin": HOST_SPIN}))
    builds = {}
    if GSLICE_BASE and PROTECT:
        x = PROTECT[0]
        g, o = f"Gb{fmt_level(x)}", "Ob"
        specs[g] = ("g", ("--class=guaranteed", "--protect", fmt_level(x)), {}, ())
        specs[o] = ("o", ("--class=opportunistic",), {}, ())
        builds = {g: GSLICE_BASE, o: GSLICE_BASE}
        entries.append((f"gslice-mps-{fmt_level(x)}-base", {"g": g, "o": o},
                        {"kind": "gslice-mps-base", "protect": x, "build": GSLICE_BASE}))
    shared = [e for e in entries if e[0] == SIDE_BY_SIDE_PLAIN] if SPLIT > 1 else []
    mine = shared + [e for e in entries if e not in shared][part::SPLIT]
    pattern = solos + [(name, roles) for name, roles, _ in mine]
    configs = {"solo": {"kind": "solo"}, **{name: attrs for name, _, attrs in mine}}
    used = {ident for _, roles in pattern for ident in roles.values()}
    specs = {ident: spec for ident, spec in specs.items() if ident in used}
    n = len(pattern)
    # Every process works through its warm-up until the phases start; the first phase, which
    # nobody works in, lets the GPU drain what they queued.
    # Round k starts at the pattern's k-th entry, and every other round runs backwards: a process
    # that rests between its phases comes back in a different configuration round by round
    # (gslice's opportunistic one works through its levels' phases back to back, so rotated
    # alone its first level would always take the cost of its return).
    def round_order(k):
        order = [pattern[(k + i) % n] for i in range(n)]
        return order[::-1] if k % 2 else order

    phases = [("drain", {})] + [p for k in range(FIRST_ROUND, FIRST_ROUND + INTERLEAVE) for p in round_order(k)]
    name = "interleaved" if SPLIT == 1 else f"interleaved-{part + 1}of{SPLIT}"
    r = Run(pair, name, True, phases, SETTLE_S, 1, window=WINDOW_S / INTERLEAVE)
    r.configs, r.proc_specs, r.memory, r.rest = configs, specs, SHARED_MEMORY, ("--rest",)
    r.builds = {ident: b for ident, b in builds.items() if ident in specs}
    r.part = part
    return r


def plan():
    """Every run, most important first; the pairs side by side within each tier."""
    if INTERLEAVE:
        return [r for p in PAIRS
                for r in ([calibrate_run(p)] if p == "latency" else []) + [interleaved_run(p, k) for k in range(SPLIT)]]
    runs = []
    tiers = [lambda p: [solo_run(p, "solo-before", 0, False, True)]]
    on_mps = GSLICE_MPS_ONLY
    if PROTECT:
        tiers.append(lambda p: [gslice_run(p, PROTECT[0], 1, on_mps)])
    if MPS_PRIO and MPS_PCT_OF[MPS_PRIO[0]]:
        tiers.append(lambda p: [mps_run(p, MPS_PRIO[0], 2)])
    tiers.append(lambda p: [gslice_run(p, x, 3, on_mps) for x in PROTECT[1:]])
    tiers.append(lambda p: [mps_run(p, q, 4) for q in MPS_PRIO[1:] if MPS_PCT_OF[q]])
    if GSLICE_MPS and not GSLICE_MPS_ONLY:
        tiers.append(lambda p: [gslice_run(p, x, 5, True) for x in PROTECT])
    for tier in tiers:
        for p in PAIRS:
            runs += tier(p)
    runs += [solo_run(p, "solo-after", 9, True, False) for p in PAIRS]
    return runs


def lanes(runs):
    """plan()'s runs in LANES self-contained lanes (see the top). Each lane holds one pair (the
    lanes split evenly between the pairs, the first pairs getting one more where they do not
    divide): a pair's runs other than the solo ones are dealt in order to its lane with the
    least estimated time so far, then each lane gets that pair's solo runs around them, the
    time-slicing phase in the pair's first lane. With fewer lanes than pairs, pairs share."""
    if LANES <= 1:
        return [runs]
    if INTERLEAVE:  # a pair's part a lane (again on further lanes): its runs are self-contained
        def mine(k, r):
            part = (k // len(PAIRS)) % SPLIT
            return r.pair == PAIRS[k % len(PAIRS)] and r.part in (None, part)
        return [[r for r in runs if mine(k, r)] for k in range(LANES)]
    owners = [PAIRS[k % len(PAIRS)] for k in range(LANES)]  # the pair of each lane
    firsts = [owners.index(owners[k]) == k for k in range(LANES)]
    solos = [(solo_run(owners[k], "solo-before", 0, False, firsts[k]), solo_run(owners[k], "solo-after", 9, True, False))
             for k in range(LANES)]
    dealt, load = [[] for _ in range(LANES)], [b.estimate() + a.estimate() for b, a in solos]
    for r in runs:
        if r.tier in (0, 9):
            continue
        mine = [k for k in range(LANES) if owners[k] == r.pair]
        k = min(mine, key=lambda i: load[i])
        dealt[k].append(r)
        load[k] += r.estimate()
    return [[solos[k][0]] + work + [solos[k][1]] for k, work in enumerate(dealt)]


def need_s(runs, i, mps_on):
    """Seconds run i needs before the deadline: its own estimate, an MPS daemon switch, and,
    unless it is kept aside itself, the time kept aside for the runs after it that are."""
    r = runs[i]
    switch = MPS_SWITCH_S if r.mps != mps_on else 0.0
    later = sum(x.estimate() for x in runs[i + 1:] if x.reserved)
    return r.estimate() + switch + (0.0 if r.reserved else later + MPS_SWITCH_S)


def check_env():
    bad = [p for p in PAIRS if p not in JOBS]
    if bad:
        sys.exit(f"frontier.py: FRONTIER_PAIRS names {bad}: the pairs are train, latency and gpu")
    if any(not 0 < p <= 1 for p in PROTECT):
        sys.exit(f"frontier.py: FRONTIER_PROTECT {PROTECT}: levels are fractions of solo speed in (0, 1]")
    if any(not 1 <= t <= 100 for t in MPS_PCT + MPS_PCT_OF[0] + MPS_PCT_OF[1]) or any(q not in (0, 1) for q in MPS_PRIO):
        sys.exit("frontier.py: FRONTIER_MPS_PCT(_P0, _P1) take 1..100, FRONTIER_MPS_PRIO 0 (normal) or 1 (below normal)")
    if any(q not in (0, 1) for q in GSLICE_PRIO) or len(set(GSLICE_PRIO)) < len(GSLICE_PRIO):
        sys.exit(f"frontier.py: FRONTIER_GSLICE_PRIO {GSLICE_PRIO}: client priorities 0 (normal) or 1 (below normal), "
                 "each once")
    for name, shares, what in (("CAP", GSLICE_CAP, "caps"), ("SMS", GSLICE_SMS, "shares of the SMs")):
        if any(not 1 <= c <= 100 for c in shares) or len(set(shares)) < len(shares):
            sys.exit(f"frontier.py: FRONTIER_GSLICE_{name} {shares}: {what} in percent, 1..100, each once")
    # Configurations only the interleaved run has, each with a gslice guaranteed process.
    for name, wanted in (("CAP", GSLICE_CAP), ("PROGPRIO", GSLICE_PROGPRIO), ("SOLO", GSLICE_SOLO), ("SMS", GSLICE_SMS),
                         ("BASE", GSLICE_BASE)):
        if wanted and not (INTERLEAVE and PROTECT):
            sys.exit(f"frontier.py: FRONTIER_GSLICE_{name} needs FRONTIER_INTERLEAVE and a protection level")
    if GSLICE_BASE and not os.access(os.path.join(GSLICE_BASE, "bin", "gslice"), os.X_OK):
        sys.exit(f"frontier.py: FRONTIER_GSLICE_BASE={GSLICE_BASE}: no bin/gslice there to run")
    if PIN < 0:
        sys.exit(f"frontier.py: FRONTIER_PIN={PIN}: host cores a process, 0 for none")
    if TWIN and not INTERLEAVE:
        sys.exit("frontier.py: FRONTIER_TWIN needs FRONTIER_INTERLEAVE (the twin's phase beside the solo phases)")
    if FIRST_ROUND < 0 or (FIRST_ROUND and not INTERLEAVE):
        sys.exit(f"frontier.py: FRONTIER_FIRST_ROUND={FIRST_ROUND}: a round from 0, with FRONTIER_INTERLEAVE")
    if not 0 <= HOST_SPIN <= 8 or (HOST_SPIN and not INTERLEAVE):
        sys.exit(f"frontier.py: FRONTIER_HOST_SPIN={HOST_SPIN}: 0 to 8 busy host threads, with FRONTIER_INTERLEAVE")
    if GSLICE_PRIO and not INTERLEAVE:
        sys.exit("frontier.py: FRONTIER_GSLICE_PRIO needs FRONTIER_INTERLEAVE (gslice's priorities side by side)")
    if INTERLEAVE < 0 or (INTERLEAVE and WINDOW_S / INTERLEAVE < 5):
        sys.exit(f"frontier.py: FRONTIER_INTERLEAVE={INTERLEAVE}: rounds of at least 5 s each "
                 f"(FRONTIER_WINDOW_S={WINDOW_S:g})")
    if not 1 <= LANES <= 16 or not 0 <= LANE < LANES:
        sys.exit(f"frontier.py: FRONTIER_LANES={LANES}, FRONTIER_LANE={LANE}: 1 to 16 lanes, and a lane from 0 to "
                 "FRONTIER_LANES - 1")


def settings():
    return {"pairs": PAIRS, "protect": PROTECT, "mps_pct": MPS_PCT, "mps_pct_of_prio": MPS_PCT_OF, "mps_prio": MPS_PRIO, "gslice_mps": GSLICE_MPS_MODE,
            "gslice_prio": GSLICE_PRIO, "gslice_cap": GSLICE_CAP, "gslice_sms": GSLICE_SMS,
            "gslice_solo": GSLICE_SOLO, "gslice_progprio": GSLICE_PROGPRIO, "gslice_base": GSLICE_BASE,
            "host_spin": HOST_SPIN, "first_round": FIRST_ROUND, "twin": TWIN, "pin": PIN, "lanes": LANES, "interleave": INTERLEAVE,
            "round_order": "rotated one phase a round, every other round backwards",
            "window_s": WINDOW_S, "settle_s": SETTLE_S, "lead_s": LEAD_S, "budget_s": BUDGET_S,
            "server_load": suite.SERVER_LOAD}


ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))


def shown(arg):
    """An argument as the report shows it: the interpreter as python3, paths in the checkout relative to it."""
    if arg == suite.PY:
        return "python3"
    if arg.startswith("/"):
        arg = os.path.normpath(arg)
        return os.path.relpath(arg, ROOT) if arg.startswith(ROOT + os.sep) else arg
    return arg


def command_line(run, ident, argv, env):
    mps = " ".join(f"{k}={v}" for k, v in env.items() if k.startswith("CUDA_MPS_") and k not in (
        "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"))
    native = env.get("CUDA_MPS_PIPE_DIRECTORY") == NO_MPS["CUDA_MPS_PIPE_DIRECTORY"]
    pipe = "(not an MPS client) " if native else "CUDA_MPS_PIPE_DIRECTORY=… " if run.mps else ""
    return f"{pipe}{mps + ' ' if mps else ''}{' '.join(shown(a) for a in argv)} --sync DIR"


def print_plan(runs, lane=None):
    """The runs as run_all would take them if each took its estimate (lane: which one they are)."""
    now, everything, mps_on, skipped = 0.0, 0.0, False, 0
    if lane is None:
        print(f"frontier plan: {json.dumps(settings())}")
    else:
        print(f"\n=== lane {lane} of {LANES} (FRONTIER_LANE={lane})")
    if "latency" in PAIRS:
        print(f"SERVICE_MS: the server's service time, measured alone in latency/{'calibrate' if INTERLEAVE else 'solo-before'}")
    for i, r in enumerate(runs):
        est = r.estimate()
        everything += est + (MPS_SWITCH_S if r.mps != mps_on else 0.0)
        fits = now + need_s(runs, i, mps_on) <= BUDGET_S - SUITE_S
        if fits:
            now += est + (MPS_SWITCH_S if r.mps != mps_on else 0.0)
            mps_on = r.mps
        else:
            skipped += 1
        print(f"\nrun {r.key} [{'MPS' if r.mps else 'no MPS'}, tier {r.tier}{', time kept aside' if r.reserved else ''}]"
              f" ~{est:.0f} s" + (f", done at ~{now:.0f} s" if fits else ": SKIPPED within FRONTIER_BUDGET_S"))
        shown_phases = r.phases[:1 + (len(r.phases) - 1) // INTERLEAVE] if r.name.startswith("interleaved") else r.phases
        for i, (cfg, roles) in enumerate(shown_phases):
            who = ' + '.join(f'{role}={ident}' for role, ident in roles.items()) or "nobody works"
            print(f"  phase {i + 1}: {cfg}: {who}, "
                  f"{r.settle:g} s unmeasured + {r.window:g} s measured")
        if len(shown_phases) < len(r.phases):
            print(f"  ... {INTERLEAVE} rounds of these after the first, each starting one phase later, every other one backwards "
                  f"({len(r.phases)} phases)")
        # The server's service time, measured in the latency pair's solo-before run, stands in
        # as a placeholder.
        placeholder = 1234.5678
        calibrating = r.pair != "latency" or r.calibrates
        for ident, argv, env in r.procs(None if calibrating else placeholder, {}, plan=True):
            line = command_line(r, ident, argv, env).replace(f"{placeholder:.4f}", "SERVICE_MS")
            print(f"  {ident}: {line}")
        if PIN:
            print(f"  pinned: {len(r.proc_specs)} processes x {PIN} cores = {PIN * len(r.proc_specs)} cores of "
                  f"{'its lane' if LANES > 1 else 'the machine'}, numbered from 0 here")
    print(f"\nestimated wall: ~{SUITE_S + now + (MPS_SWITCH_S if mps_on else 0):.0f} s of FRONTIER_BUDGET_S={BUDGET_S:.0f} for "
          f"{len(runs) - skipped} of {len(runs)} runs ({sum(len(r.configs) for r in runs)} configurations); "
          f"all of them would take ~{SUITE_S + everything:.0f} s")


def measure(results, run, settle):
    """{configuration: {role: measures}} of one finished run (suite.phase_steps / phase_latency)."""
    state = {run.key: results}
    out = {}
    # An interleaved run repeats each phase once a round: each is measured once, over all of them.
    distinct = {(cfg, tuple(roles.items())): roles for cfg, roles in run.phases}
    repeated = {cfg for cfg, _ in run.phases if sum(c == cfg for c, _ in run.phases) > 1}
    for (cfg, _), roles in distinct.items():
        ids = list(roles.values())
        m = out.setdefault(cfg, {})
        for role, ident in roles.items():
            mode, workload = job_of(run.pair, role)
            finite = results.get(ident, {}).get("finite", True)
            if mode == "server":
                lat = suite.phase_latency(state, run.key, ident, ids, settle)
                m[role] = dict(lat or {"p50_ms": None, "p99_ms": None, "requests": 0}, finite=finite)
            else:
                rate = suite.phase_steps(state, run.key, ident, ids, settle)
                # Fewer than two steps ended in the window: an opportunistic job held back all
                # along made about nothing.
                m[role] = {"steps_per_s": rate if rate is not None else 0.0, "finite": finite}
                if rate is None:
                    m[role]["note"] = "fewer than two steps in the window"
            if cfg in repeated:
                m[role]["rounds"] = round_figures(results, ident, ids, settle, mode == "server")
    return out


def round_figures(results, ident, ids, settle, server):
    """ident's figure in each phase in which exactly `ids` worked, in order (an interleaved
    run's rounds): steps/s, or the server's p99 in ms; None where a phase has too few."""
    if not server:
        counts = suite.phase_counts({"r": results}, "r", ident, settle) or []
        return [n / sec if n else None for who, n, sec in counts if sorted(who) == sorted(ids)]
    out = []
    for phase in results.get("phases", []):
        if sorted(phase[2]) == sorted(ids):
            lat = suite.phase_latency({"r": dict(results, phases=[phase])}, "r", ident, ids, settle)
            out.append(lat["p99_ms"] if lat and lat["requests"] >= 20 else None)
    return out


# The GPU's state while a run works: nvidia-smi's samples every GPU_SAMPLE_MS of the lane's GPU
# (its SM clock, how busy it was, its power), each configuration's phases averaged. A job
# bound by its host moves with the host, not the GPU: where the SM clock held in every phase
# and the GPU's busy share followed the job's speed, the host set the pace. Reading only.
GPU_SAMPLE_MS = 500
GPU_FIELDS = ("sm_mhz", "busy_pct", "power_w")


class GpuSampler:
    """nvidia-smi sampling the lane's GPU (CUDA_VISIBLE_DEVICES, a UUID in lanes; else GPU 0)
    into a CSV file while a run works; samples() parses what it wrote."""

    def __init__(self, path):
        self.path, self.proc = path, None

    def __enter__(self):
        gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
        try:
            with open(self.path, "w") as out:
                self.proc = subprocess.Popen(
                    ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,utilization.gpu,power.draw",
                     "--format=csv,noheader,nounits", f"--loop-ms={GPU_SAMPLE_MS}", f"--id={gpu}"],
                    stdout=out, stderr=subprocess.DEVNULL)
        except OSError:  # no nvidia-smi: the run goes on without the GPU's state
            self.proc = None
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return False

    def samples(self):
        try:
            with open(self.path) as f:
                return parse_gpu_samples(f.read())
        except OSError:
            return []


def parse_gpu_samples(text):
    """[(epoch seconds, {field: value})] of nvidia-smi's CSV lines (its timestamps are the
    host's local time, as time.time() is read here); lines it could not read are left out."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 1 + len(GPU_FIELDS):
            continue
        try:
            t = datetime.datetime.strptime(cells[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            values = {k: float(v) for k, v in zip(GPU_FIELDS, cells[1:])}
        except ValueError:  # "[N/A]", a partial line
            continue
        out.append((t, values))
    return out


def gpu_by_config(samples, results, run, settle):
    """{configuration: {field: mean}} over the samples inside its phases' measured windows."""
    phases = results.get("phases") or []
    out = {}
    for (cfg, _), (a, b, _ids) in zip(run.phases, phases):
        inside = [v for t, v in samples if a + settle <= t < b]
        acc = out.setdefault(cfg, {k: [] for k in GPU_FIELDS})
        for v in inside:
            for k in GPU_FIELDS:
                acc[k].append(v[k])
    return {cfg: {k: round(sum(v) / len(v), 1) for k, v in acc.items()} for cfg, acc in out.items()
            if all(acc.values())}


def log_errors(logs, run):
    """The first CUDA error or traceback line in the run's process logs, or None."""
    for ident in run.proc_specs:
        path = os.path.join(logs, f"{run.key.replace('/', '_')}_{ident}.log")
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    if ERROR_PATTERNS.search(line):
                        return f"{ident}: {line.strip()[:200]}"
        except OSError:
            continue
    return None


def gpu_info():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        name, driver, memory = [x.strip() for x in out[0].split(",")]
        return {"gpu": name, "driver": driver, "memory": memory}
    except Exception as e:  # recorded, not fatal: the runs say whether the GPU works
        return {"gpu": f"unknown ({e})", "driver": "unknown", "memory": "unknown"}


def software():
    try:
        return subprocess.run([suite.PY, "-c", "import torch, torchvision; print(f'torch {torch.__version__} "
                                                "(CUDA {torch.version.cuda}), torchvision {torchvision.__version__}')"],
                              capture_output=True, text=True, timeout=120).stdout.strip()
    except Exception as e:
        return f"unknown ({e})"


class Mps:
    """The MPS control daemon through mps.sh, on only while MPS runs run."""

    def __init__(self, folder):
        self.folder, self.on, self.failed = folder, False, None
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(folder, "pipe"),
                    "CUDA_MPS_LOG_DIRECTORY": os.path.join(folder, "log")}

    def want(self, on):
        if on == self.on:
            return
        script = os.path.join(HERE, "mps.sh")
        rc = subprocess.run(["bash", script, "start" if on else "stop", self.folder]).returncode
        if on and rc != 0:
            self.failed = "the MPS control daemon did not start (mps.sh start)"
            return
        self.on, self.failed = on, None
        print(f"MPS control daemon {'started' if on else 'stopped'} ({self.folder})", flush=True)


def write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def run_all(json_path, logs, mps_dir):
    deadline = float(os.environ.get("FRONTIER_DEADLINE") or time.time() + BUDGET_S)
    suite.DEADLINE = deadline
    suite.LOGS = logs
    suite.LEARN_S = 0  # every run's unmeasured time is its phases' settle (FRONTIER_LEAD_S for gslice)
    os.makedirs(logs, exist_ok=True)
    # Each lane's raw results beside its logs (lanes write at once).
    raw_dir = os.path.join(os.path.dirname(os.path.abspath(logs)), "raw")
    os.makedirs(raw_dir, exist_ok=True)
    runs = lanes(plan())[LANE]
    doc = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "lane": LANE,
           **gpu_info(), "software": software(), "build": suite.build_dir(),
           "settings": settings(),
           "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("FRONTIER_", "GSLICE_"))},
           "command": os.environ.get("FRONTIER_COMMAND", "bash bench/gpu/suites/frontier.sh"),
           "service_ms": {}, "runs": [], "configs": []}
    mps = Mps(mps_dir)
    service_ms = None
    stopped = None
    t_start = time.time()
    try:
        for i, r in enumerate(runs):
            need = need_s(runs, i, mps.on)
            entry = {"name": r.key, "pair": r.pair, "mps": r.mps, "tier": r.tier, "estimate_s": round(r.estimate()),
                     "phases": [[cfg, roles] for cfg, roles in r.phases], "settle_s": r.settle, "window_s": r.window}
            error = None
            if time.time() + need > deadline:
                entry.update(status="skipped", error=f"budget: needs ~{need:.0f} s, {max(0, deadline - time.time()):.0f} s left")
            elif r.pair == "latency" and not r.calibrates and not service_ms:
                entry.update(status="failed", error="no server service time: the latency pair's run that measures it failed")
            else:
                mps.want(r.mps)
                if r.mps and mps.failed:
                    entry.update(status="failed", error=mps.failed)
                else:
                    procs = r.procs(service_ms, mps.env)
                    entry["commands"] = {ident: command_line(r, ident, argv, env) for ident, argv, env in procs}
                    t0 = time.time()
                    sampler = GpuSampler(os.path.join(raw_dir, r.key.replace("/", "_") + ".gpu.csv"))
                    try:
                        with sampler:
                            results = suite.run_config(r.key, procs,
                                                       phases=[list(roles.values()) for _, roles in r.phases],
                                                       phase_s=r.settle + r.window)
                    except KeyboardInterrupt as e:
                        results = {"error": f"stopped mid-run ({e}): the suite's time ran out"}
                        stopped = e
                    entry["wall_s"] = round(time.time() - t0, 1)
                    with open(os.path.join(raw_dir, r.key.replace("/", "_") + ".json"), "w") as f:
                        json.dump(results, f)
                    if "error" in results:
                        error = results["error"]
                        entry.update(status="skipped" if error.startswith("skipped") else "failed", error=error)
                    else:
                        error = log_errors(logs, r)
                        bad = [p for p, x in results.items() if isinstance(x, dict) and x.get("finite") is False]
                        if bad:
                            error = f"non-finite output (loss NaN or inf) in {', '.join(bad)}"
                        entry.update(status="failed" if error else "ok", error=error)
                        entry["measured"] = measure(results, r, r.settle)
                        for cfg, gpu in gpu_by_config(sampler.samples(), results, r, r.settle).items():
                            entry["measured"].setdefault(cfg, {})["gpu"] = gpu
                        if r.pair == "latency" and r.calibrates and not error:
                            service_ms, measured = shared_service_ms(results["g"].get("service_ms"))
                            doc["service_ms"]["latency"] = service_ms
                            doc["service_measured_ms"] = {f"lane {k}": v for k, v in sorted(measured.items())}
                if r.pair == "latency" and r.calibrates and entry.get("status") != "ok":
                    shared_service_ms(None)  # the other lanes wait for no measurement from this one
            doc["runs"].append(entry)
            for cfg, attrs in r.configs.items():
                c = {"pair": r.pair, "config": cfg, **attrs, "run": r.key, "status": entry["status"],
                     "error": entry.get("error")}
                c.update(entry.get("measured", {}).get(cfg, {}))
                doc["configs"].append(c)
            doc["wall_s"] = round(time.time() - t_start, 1)
            write(json_path, doc)
            print(f"run {r.key}: {entry['status']}{': ' + entry['error'] if entry.get('error') else ''}"
                  f" ({time.time() - t_start:.0f} s in)", flush=True)
            if stopped:
                raise stopped
    finally:
        mps.want(False)
        doc["wall_s"] = round(time.time() - t_start, 1)
        write(json_path, doc)


def shared_service_ms(own):
    """The service time every calibrating lane uses: the largest of the lanes' measurements
    (FRONTIER_SHARED), own alone without it or once SHARED_WAIT_S passes; and the lanes'."""
    if not SHARED:
        return own, {LANE: own}
    want = [k for k, lane in enumerate(lanes(plan())) if any(r.pair == "latency" and r.calibrates for r in lane)]
    path = os.path.join(SHARED, f"service-latency-lane{LANE}")
    with open(path + ".tmp", "w") as f:
        f.write(repr(own) if own else "none")  # "none": this lane has no measurement to give
    os.replace(path + ".tmp", path)
    seen, until = {}, time.time() + SHARED_WAIT_S
    while True:
        for k in want:
            try:
                with open(os.path.join(SHARED, f"service-latency-lane{k}")) as f:
                    text = f.read()
            except OSError:
                continue
            try:
                seen[k] = float(text)
            except ValueError:
                seen[k] = None
        if len(seen) == len(want) or time.time() > until:
            break
        time.sleep(0.5)
    missing = [k for k in want if seen.get(k) is None]
    if missing:
        print(f"frontier: lanes {missing} gave no service time; the largest of the others'", flush=True)
    given = {k: v for k, v in seen.items() if v is not None}
    return (max(given.values()) if given else own), given


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", choices=["plan", "run"])
    p.add_argument("--json")
    p.add_argument("--logs")
    p.add_argument("--mps-dir")
    args = p.parse_args()
    check_env()
    if args.phase == "plan":
        if LANES <= 1:
            print_plan(plan())
        else:
            print(f"frontier plan: {json.dumps(settings())}")
            for k, runs in enumerate(lanes(plan())):
                print_plan(runs, k)
        return
    if not (args.json and args.logs and args.mps_dir):
        p.error("run needs --json, --logs and --mps-dir")

    def stop(signum, _frame):  # children and the MPS daemon are cleaned up by the finally blocks
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, stop)
    try:
        run_all(args.json, args.logs, args.mps_dir)
    except KeyboardInterrupt as e:
        print(f"frontier.py: stopped ({e}); {args.json} holds the runs so far", flush=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
