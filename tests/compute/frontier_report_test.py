"""The harvest frontier's selection and verdicts (bench/gpu/compute/frontier_report.py) on
made-up figures, and frontier.py's run loop on made-up runs (suite.run_config replaced):
what is measured from which phase, failed and skipped runs kept, the time kept for the solo
runs after, and interleaved runs judged round by round. No GPU and no torch.

  python3 frontier_report_test.py PATH/TO/bench/gpu/compute
"""

import contextlib
import importlib.util
import io
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import unittest

HERE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..", "bench", "gpu", "compute")


def load(name):
    sys.path.insert(0, HERE)
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


report = load("frontier_report")


def train(config, kind, g, o, status="ok", **attrs):
    return {"pair": "train", "config": config, "kind": kind, "status": status, "error": None if status == "ok" else "boom",
            "g": {"steps_per_s": g, "finite": True}, "o": {"steps_per_s": o, "finite": True}, **attrs}


def latency(config, kind, p99, o, status="ok", **attrs):
    return {"pair": "latency", "config": config, "kind": kind, "status": status, "error": None,
            "g": {"p99_ms": p99, "p50_ms": p99 / 2, "requests": 1000, "finite": True},
            "o": {"steps_per_s": o, "finite": True}, **attrs}


def doc(configs, runs=()):
    return {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.1", "memory": "81559 MiB", "software": "torch 2.11",
            "started": "2026-11-26T09:00:00+00:00", "command": "FRONTIER_PAIRS=train bash bench/gpu/suites/frontier.sh",
            "wall_s": 450, "settings": {"pairs": ["train", "latency"], "protect": [0.97, 0.90, 0.80],
                                        "window_s": 15, "settle_s": 1, "lead_s": 10, "server_load": 0.5},
            "service_ms": {"latency": 5.0}, "configs": configs, "runs": list(runs)}


# Solo: guaranteed 40 steps/s, opportunistic 30 (the training pair); server p99 10 ms before,
# 10.4 after (4% drift); its partner 20 steps/s.
SOLO = [train("solo-before", "solo", 40, 30), train("solo-after", "solo", 40, 30),
        latency("solo-before", "solo", 10.0, 20), latency("solo-after", "solo", 10.4, 20)]


def rounds_cfg(name, kind, lane, g, o=None, **attrs):
    """A training-pair configuration of an interleaved run: its rounds' steps/s, one list a job."""
    c = {"pair": "train", "config": name, "kind": kind, "status": "ok", "lane": lane,
         "g": {"steps_per_s": sum(g) / len(g), "finite": True, "rounds": g}, **attrs}
    if o is not None:
        c["o"] = {"steps_per_s": sum(o) / len(o), "finite": True, "rounds": o}
    return c


def two_lane_solos():
    """The training pair's solo runs in lanes 0 and 1: guaranteed 40 steps/s, opportunistic 30."""
    return [train(name, "solo", 40, 30, lane=lane) for lane in (0, 1) for name in ("solo-before", "solo-after")]


def by(verdicts, level, mode="gslice"):
    return next(v for v in verdicts if abs(v["level"] - level) < 1e-9 and v["mode"] == mode)


class SelectionTest(unittest.TestCase):
    def setUp(self):
        self.doc = doc(SOLO + [
            train("timeslice", "timeslice", 24, 15),           # 0.60 / 0.50
            train("mps-100-p1", "mps", 34, 21, mps_pct=100),    # 0.85 / 0.70
            train("mps-25-p1", "mps", 38.8, 9, mps_pct=25),     # 0.97 / 0.30
            train("mps-10-p1", "mps", 39.6, 4.5, mps_pct=10),   # 0.99 / 0.15
            train("mps-50-p0", "mps", 50, 29, status="failed", mps_pct=50),  # failed: never a comparator
            train("gslice-0.97", "gslice", 39.2, 10.5, protect=0.97),  # 0.98 / 0.35: met
            train("gslice-0.90", "gslice", 38, 7.5, protect=0.90),     # 0.95 / 0.25: harvest short
            train("gslice-0.80", "gslice", 30, 25, protect=0.80),      # 0.75 / 0.83: guaranteed short
            latency("timeslice", "timeslice", 15.3, 18),               # 1.5x / 0.9
            latency("mps-50-p1", "mps", 10.6, 12, mps_pct=50),         # 1.039x / 0.6
            latency("gslice-0.97", "gslice", 10.812, 14, protect=0.97),  # 1.06x / 0.7: p99 over by 1 point
            latency("gslice-0.90", "gslice", 11.0, 10, protect=0.90),  # 1.078x / 0.5: harvest short
        ])

    def test_solo_base_is_the_mean_of_before_and_after_and_drift_their_ratio(self):
        s = report.solo(self.doc, "latency")[("g", "p99_ms")]
        self.assertAlmostEqual(s["base"], 10.2)
        self.assertAlmostEqual(s["drift"], 1.04)

    def test_best_plain_is_the_most_harvest_among_those_keeping_the_level(self):
        v = report.frontier(self.doc, "train")
        self.assertEqual(by(v, 0.97)["best"]["config"], "mps-25-p1")
        self.assertEqual(by(v, 0.90)["best"]["config"], "mps-25-p1")
        self.assertEqual(by(v, 0.80)["best"]["config"], "mps-100-p1")  # the failed mps-50-p0 is no comparator

    def test_verdicts_and_misses_say_by_how_much(self):
        v = report.frontier(self.doc, "train")
        self.assertTrue(by(v, 0.97)["met"])
        self.assertEqual(by(v, 0.97)["misses"], [])
        self.assertFalse(by(v, 0.90)["met"])
        self.assertIn("short of mps-25-p1's 0.300 by 0.050", by(v, 0.90)["misses"][0])
        self.assertFalse(by(v, 0.80)["met"])
        self.assertIn("guaranteed 0.750× solo, short of 0.80 by 0.050", by(v, 0.80)["misses"][0])

    def test_latency_level_is_a_p99_bound_of_plus_5_percent_at_0_97(self):
        self.assertAlmostEqual(report.p99_bound(0.97), 1.05)
        v = report.frontier(self.doc, "latency")
        self.assertEqual(by(v, 0.97)["best"]["config"], "mps-50-p1")
        g97 = by(v, 0.97)
        self.assertFalse(g97["met"])
        self.assertEqual(len(g97["misses"]), 1)  # harvest 0.7 >= 0.6: only the p99
        self.assertIn("over the 1.050× allowed by 1.0 points (within the solo runs' drift of 4.0%)", g97["misses"][0])
        g90 = by(v, 0.90)
        self.assertEqual(g90["best"]["config"], "mps-50-p1")
        self.assertIn("short of mps-50-p1's 0.600 by 0.100", g90["misses"][0])
        self.assertIsNone(by(v, 0.80)["met"])  # no gslice-0.80 run
        self.assertIn("gslice not run", by(v, 0.80)["misses"][0])

    def test_an_interleaved_servers_p99_miss_says_what_its_rounds_resolve(self):
        def cfg(name, kind, p99s, steps, **attrs):
            return dict({"pair": "latency", "config": name, "kind": kind, "status": "ok", "lane": 0,
                         "g": {"p99_ms": statistics.mean(p99s), "p50_ms": 5.0, "rounds": p99s, "finite": True},
                         "o": {"steps_per_s": statistics.mean(steps), "rounds": steps, "finite": True}}, **attrs)
        solo = cfg("solo", "solo", [10.0] * 4, [20.0] * 4)
        # p99 over solo's 1.25-1.43 a round: solo over it 0.70-0.80, under the 0.857 of 0.90's bound.
        steady = cfg("gslice-mps-0.90", "gslice-mps", [12.5, 13.0, 13.5, 14.3], [18.0] * 4, protect=0.90)
        # The same mean, one round at 0.8 of its solo's p99 and the others far over: unresolved.
        noisy = cfg("gslice-mps-0.90", "gslice-mps", [8.0, 19.0, 17.0, 9.3], [18.0] * 4, protect=0.90)
        misses = {}
        for name, c in (("steady", steady), ("noisy", noisy)):
            d = doc([solo, c])
            d["settings"].update(interleave=4, protect=[0.90])
            misses[name] = by(report.frontier(d, "latency"), 0.90, "gslice-mps")["misses"][0]
        for m in misses.values():
            self.assertIn("over the 1.167× allowed by", m)
            self.assertIn("against the level (0.857 of solo's p99) over 4 rounds", m)
        self.assertNotIn("within two standard errors", misses["steady"])
        self.assertIn("(within two standard errors)", misses["noisy"])

    def test_no_plain_configuration_keeping_the_level_leaves_only_the_guarantee(self):
        d = doc(SOLO + [train("timeslice", "timeslice", 24, 15), train("gslice-0.97", "gslice", 39, 1, protect=0.97)])
        v = by(report.frontier(d, "train"), 0.97)
        self.assertIsNone(v["best"])
        self.assertTrue(v["met"])

    def test_failed_gslice_run_is_reported_failed(self):
        d = doc(SOLO + [train("gslice-0.97", "gslice", 0, 0, status="failed", protect=0.97)])
        lines = report.result_lines(d)
        self.assertTrue(any(line.startswith("RESULT frontier.train.gslice-0.97 FAIL failed: boom") for line in lines))
        self.assertTrue(any(line.startswith("RESULT frontier.train.gslice-0.97 FAIL gslice failed") for line in lines))

    def test_markdown_and_table_hold_the_setup_the_rows_and_the_misses(self):
        md = report.markdown(self.doc)
        for text in ("NVIDIA H100 80GB HBM3", "driver 580.1", "FRONTIER_PAIRS=train bash bench/gpu/suites/frontier.sh",
                     "| mps-25-p1 | 0.970 | 0.300 | ok |", "## Misses", "train, 0.90, gslice: opportunistic 0.250",
                     "| train | 0.97 | gslice | 0.980 / 0.350 | mps-25-p1: 0.970 / 0.300 | **met** |"):
            self.assertIn(text, md)
        table = report.text_table(self.doc)
        self.assertIn("MISSED", table)
        self.assertIn("mps-50-p0", table)  # failed rows stay in the table
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(self.doc, f)
        try:
            out = io.StringIO()
            sys.argv = ["frontier_report.py", "--table", f.name]
            with contextlib.redirect_stdout(out):
                report.main()
            self.assertTrue(out.getvalue().startswith("RESULT frontier.gpu INFO NVIDIA H100"))
        finally:
            os.unlink(f.name)


class ServiceTimeTest(unittest.TestCase):
    """The latency server's service time, measured as its phases serve (service_time.py)."""

    def test_the_rate_follows_what_requests_take_at_that_rate(self):
        service_time = load("service_time")

        class Gpu:
            """A fake server on a fake clock: a request after an idle gap of over 2 ms takes
            8 ms (the GPU slowed down meanwhile), one after less 6 ms; one in 40 takes 200 ms
            (a stall of the host)."""

            def __init__(self):
                self.clock, self.done, self.served = 1000.0, 1000.0, 0

            def now(self):
                return self.clock

            def serve(self, arrival):
                self.clock = max(self.clock, arrival)
                took = 0.008 if self.clock - self.done > 0.002 else 0.006
                self.served += 1
                if self.served % 40 == 0:
                    took = 0.200
                self.clock += took
                self.done = self.clock
                return took

        def offered(gpu, service, n=4000):
            """The load a phase then offers: its rate times the (trimmed) mean request."""
            rng, times, arrival = random.Random(7), [], gpu.now()
            for _ in range(n):
                arrival = max(arrival, gpu.now() - service_time.BEHIND_S) + rng.expovariate(0.5 / service)
                times.append(gpu.serve(arrival))
            return 0.5 / service * service_time.trimmed_mean(times)

        # The first estimate (requests 5 ms apart) says 6 ms: at that rate the requests take more.
        self.assertGreater(offered(Gpu(), 0.006), 0.54)
        gpu = Gpu()
        service, rounds = service_time.measure(gpu.serve, 0.006, 0.5, rng=random.Random(1), now=gpu.now)
        self.assertEqual(len(rounds), 2)
        self.assertGreater(service, 0.0066)
        self.assertAlmostEqual(offered(gpu, service), 0.5, delta=0.02)
        # The stalls are left out of the mean (with them it would be 11-12 ms).
        self.assertLess(service, 0.008)
        self.assertEqual(service_time.trimmed_mean([1.0] * 18 + [0.0, 100.0]), 1.0)


class SoloOutlierTest(unittest.TestCase):
    def test_a_solo_round_far_over_the_others_is_named(self):
        solo = latency("solo", "solo", 60.0, 20)
        solo["g"]["rounds"] = [24.0, 32.0, 272.0, 37.0]
        d = doc([solo, latency("mps-100-p1", "mps", 33.0, 19, mps_pct=100, mps_prio=1)])
        d["settings"]["interleave"] = 4
        self.assertEqual(report.solo_outliers(d, "latency"), [(0, 3, 272.0, 32.0)])
        self.assertIn("**Solo round 3 of lane 0:** the server's p99 272.0 ms, 8.5× the other solo rounds' median",
                      report.markdown(d))
        solo["g"]["rounds"] = [24.0, 32.0, 90.0, 37.0]  # under 3× the others' median: noise, not named
        self.assertEqual(report.solo_outliers(d, "latency"), [])
        self.assertNotIn("Solo round", report.markdown(d))

    def test_the_load_the_server_offered_alone_is_stated(self):
        solo = latency("solo", "solo", 60.0, 20)
        d = doc([solo, latency("mps-100-p1", "mps", 33.0, 19, mps_pct=100, mps_prio=1)])
        self.assertNotIn("the load it offered", report.markdown(d))  # not measured: not stated
        solo["g"]["offered_load"] = 0.6713  # the measurement alone came out short
        self.assertIn("the load it offered in its solo phases: 0.67.", report.markdown(d))


class LanesTest(unittest.TestCase):
    def test_lanes_are_judged_against_their_own_solo_runs(self):
        # Two lanes of the training pair on two GPUs, the second GPU 10% slower all along:
        # its configurations are against its own solos, so both read the same.
        lane0 = doc([train("solo-before", "solo", 40, 30), train("solo-after", "solo", 40, 30),
                     train("gslice-0.90", "gslice", 38, 24, protect=0.90)])      # 0.95 / 0.80
        lane1 = doc([train("solo-before", "solo", 36, 27), train("solo-after", "solo", 36, 27),
                     train("mps-100-p1", "mps", 34.2, 25.65, mps_pct=100)])      # 0.95 / 0.95
        lane0["lane"], lane1["lane"] = 0, 1
        d = report.merge([lane0, lane1])
        rows = {r["config"]: r for r in report.rows(d, "train")}
        self.assertAlmostEqual(rows["gslice-0.90"]["g"], 0.95)
        self.assertAlmostEqual(rows["mps-100-p1"]["g"], 0.95)
        self.assertAlmostEqual(rows["mps-100-p1"]["o"], 0.95)
        v = by(report.frontier(d, "train"), 0.90)
        self.assertEqual(v["best"]["config"], "mps-100-p1")
        self.assertFalse(v["met"])
        self.assertIn("short of mps-100-p1's 0.950 by 0.150", v["misses"][0])
        md = report.markdown(d)
        self.assertIn("**Lanes:** 2", md)
        self.assertIn("| train (lane 1) | guaranteed steps_per_s | 36.000 | 36.000 | 1.000 |", md)
        self.assertIn("| mps-100-p1 (lane 1) |", md)
        self.assertIn("RESULT frontier.train.solo.lane1 INFO", "\n".join(report.result_lines(d)))

    def test_the_plan_splits_into_lanes_each_with_its_own_solo_runs(self):
        os.environ.update(FRONTIER_PAIRS="train,latency", FRONTIER_PROTECT="0.97,0.90,0.80", FRONTIER_MPS_PCT="100,50",
                          FRONTIER_MPS_PRIO="1,0", FRONTIER_GSLICE_MPS="only", FRONTIER_WINDOW_S="60",
                          FRONTIER_LANES="8", FRONTIER_LANE="0")
        try:
            frontier = load("frontier")
        finally:
            for k in ("FRONTIER_LANES", "FRONTIER_LANE", "FRONTIER_GSLICE_MPS", "FRONTIER_WINDOW_S", "FRONTIER_PROTECT",
                      "FRONTIER_MPS_PRIO"):
                os.environ.pop(k, None)
        everything = frontier.plan()
        lanes = frontier.lanes(everything)
        self.assertEqual(len(lanes), 8)
        dealt = [r.key for lane in lanes for r in lane if r.tier not in (0, 9)]
        self.assertEqual(sorted(dealt), sorted(r.key for r in everything if r.tier not in (0, 9)))  # each once
        for lane in lanes:
            pairs = {r.pair for r in lane}
            self.assertEqual(len(pairs), 1)  # one pair a lane
            self.assertEqual((lane[0].name, lane[-1].name), ("solo-before", "solo-after"))
        # Time-slicing once per pair, in the pair's first lane.
        ts = [k for k, lane in enumerate(lanes) if "timeslice" in lane[0].configs]
        self.assertEqual(sorted(lanes[k][0].pair for k in ts), ["latency", "train"])
        # Within a lane the runs keep their order of importance.
        for lane in lanes:
            tiers = [r.tier for r in lane[1:-1]]
            self.assertEqual(tiers, sorted(tiers))
        # Every lane fits a call's budget on its estimates.
        for lane in lanes:
            self.assertLessEqual(sum(r.estimate() for r in lane) + frontier.SUITE_S + 2 * frontier.MPS_SWITCH_S,
                                 frontier.BUDGET_S)

    def test_a_miss_against_another_lanes_configuration_names_gslices_own_lane(self):
        # A pair split over two GPUs: the best plain configuration keeping 0.90 ran in lane 0,
        # gslice in lane 1, where only mps-50-p1 kept it.
        d = doc(two_lane_solos() + [
                 train("mps-100-p1", "mps", 38, 28.5, lane=0, mps_pct=100),   # 0.95 / 0.95
                 train("mps-50-p1", "mps", 39, 24, lane=1, mps_pct=50),       # 0.975 / 0.80
                 train("gslice-mps-0.90", "gslice-mps", 38, 27, lane=1, protect=0.90)])  # 0.95 / 0.90
        d["settings"]["protect"] = [0.90]
        v = by(report.frontier(d, "train"), 0.90, "gslice-mps")
        self.assertFalse(v["met"])
        self.assertIn("across lanes (mps-100-p1 in lane 0, gslice in lane 1; in gslice's lane mps-50-p1 kept it "
                      "at 0.800)", v["misses"][0])
        # In one lane nothing is said of lanes.
        d["configs"][-1]["lane"] = 0
        v = by(report.frontier(d, "train"), 0.90, "gslice-mps")
        self.assertNotIn("across lanes", v["misses"][0])

    def test_a_configuration_that_ran_in_gslices_lane_is_taken_from_there(self):
        # Split, plain MPS at priority 1 runs in every lane: gslice is judged against its own
        # lane's (same GPU, same rounds), not against another lane's luckier phases.
        d = doc(two_lane_solos() + [
                 train("mps-100-p1", "mps", 38, 29.4, lane=0, mps_pct=100),  # 0.95 / 0.98
                 train("mps-100-p1", "mps", 38, 26.4, lane=1, mps_pct=100),  # 0.95 / 0.88
                 train("gslice-mps-0.90", "gslice-mps", 38, 27, lane=1, protect=0.90)])  # 0.95 / 0.90
        d["settings"]["protect"] = [0.90]
        v = by(report.frontier(d, "train"), 0.90, "gslice-mps")
        self.assertEqual(v["best"]["lane"], 1)
        self.assertTrue(v["met"], v["misses"])
        # Where it did not keep the level in gslice's lane, another lane's run of it is no comparator.
        d["configs"][5]["g"]["steps_per_s"] = 34  # 0.85 in lane 1
        v = by(report.frontier(d, "train"), 0.90, "gslice-mps")
        self.assertIsNone(v["best"])
        self.assertTrue(v["met"], v["misses"])


def run_all(frontier, fake_run_config):
    """frontier.run_all with suite.run_config replaced and no MPS daemon, in a scratch folder:
    the JSON it wrote."""
    frontier.suite.run_config = fake_run_config
    frontier.Mps.want = lambda self, on: setattr(self, "on", on)
    tmp = tempfile.mkdtemp(prefix=f"frontier-test-{os.getpid()}-")
    try:
        path = os.path.join(tmp, "frontier.json")
        with contextlib.redirect_stdout(io.StringIO()):
            frontier.run_all(path, os.path.join(tmp, "logs"), os.path.join(tmp, "mps"))
        with open(path) as f:
            return json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class RunLoopTest(unittest.TestCase):
    """frontier.run_all with suite.run_config made up: the guaranteed job runs at 40 steps/s
    alone (the server at 10 ms), 30 beside anything; the opportunistic job at 30 alone, 6
    beside it; the training pair's gslice-0.90 run reports a NaN loss."""

    def test_runs_measures_and_keeps_failures(self):
        os.environ.update(FRONTIER_PAIRS="train,latency", FRONTIER_MPS_PCT="50,10", FRONTIER_MPS_PRIO="1",
                          FRONTIER_WINDOW_S="15")
        # A clock that each run moves on by its phases and a start-up of 20 s; room for less
        # than everything.
        clock = [1000.0]
        os.environ["FRONTIER_DEADLINE"] = str(clock[0] + 520)
        frontier = load("frontier")
        frontier.time = type("Clock", (), {"time": staticmethod(lambda: clock[0])})
        calls = []

        def fake_run_config(name, procs, seconds=None, phases=None, phase_s=None):
            calls.append((name, procs, phases))
            clock[0] += 20 + len(phases) * phase_s
            out = {"phases": []}
            ends = {}
            for i, ids in enumerate(phases):
                a, b = 100 + i * phase_s, 100 + (i + 1) * phase_s
                out["phases"].append([a, b, ids])
                for ident in ids:
                    if ident == "g":
                        rate = 40 if len(ids) == 1 else 30
                    else:
                        rate = 30 if len(ids) == 1 else 6
                    ends.setdefault(ident, []).extend(a + 0.05 + k / rate for k in range(int((b - a - 0.1) * rate)))
            for ident, argv, _ in procs:
                if "server" in argv:
                    reqs = [[t, 0.010 if len(ph[2]) == 1 else 0.0105, 0.005] for ph in out["phases"] if ident in ph[2]
                            for t in [ph[0] + 1.5 + k * 0.01 for k in range(int((ph[1] - ph[0] - 1.6) / 0.01))]]
                    out[ident] = {"service_ms": 5.0, "rate_per_s": 100, "requests_at": reqs, "finite": True}
                else:
                    out[ident] = {"step_ends": ends.get(ident, []), "finite": not (name == "train/gslice-0.90")}
            return out

        d = run_all(frontier, fake_run_config)
        runs = {r["name"]: r for r in d["runs"]}
        # Order: solo-before of both pairs first, the solo runs after last.
        self.assertEqual([r["name"] for r in d["runs"]][:2], ["train/solo-before", "latency/solo-before"])
        self.assertEqual([r["name"] for r in d["runs"]][-2:], ["train/solo-after", "latency/solo-after"])
        self.assertEqual(runs["train/solo-after"]["status"], "ok")
        self.assertEqual(runs["train/gslice-0.90"]["status"], "failed")
        self.assertIn("non-finite", runs["train/gslice-0.90"]["error"])
        self.assertTrue(any(r["status"] == "skipped" and "budget" in r["error"] for r in d["runs"]))
        cfg = {(c["pair"], c["config"]): c for c in d["configs"]}
        self.assertAlmostEqual(cfg[("train", "solo-before")]["g"]["steps_per_s"], 40, delta=0.5)
        self.assertAlmostEqual(cfg[("train", "solo-before")]["o"]["steps_per_s"], 30, delta=0.5)
        self.assertAlmostEqual(cfg[("train", "timeslice")]["o"]["steps_per_s"], 6, delta=0.5)
        self.assertAlmostEqual(cfg[("train", "mps-10-p1")]["g"]["steps_per_s"], 30, delta=0.5)
        self.assertAlmostEqual(cfg[("latency", "solo-before")]["g"]["p99_ms"], 10.0, delta=0.01)
        self.assertAlmostEqual(cfg[("latency", "gslice-0.97")]["g"]["p99_ms"], 10.5, delta=0.01)
        self.assertEqual(cfg[("train", "gslice-0.90")]["status"], "failed")  # kept, not dropped
        # The server's service time from the first latency run fixes the later runs' rate;
        # the training job of that first run starts after the server is warm.
        self.assertEqual(d["service_ms"]["latency"], 5.0)
        argv = {name: {i: a for i, a, _ in procs} for name, procs, _ in calls}
        self.assertIn("--service-ms", argv["latency/gslice-0.97"]["g"])
        self.assertNotIn("--service-ms", argv["latency/solo-before"]["g"])
        self.assertIn("--after", argv["latency/solo-before"]["o"])
        self.assertIn("--protect", argv["train/gslice-0.97"]["g"])
        self.assertEqual(argv["train/gslice-0.97"]["g"][argv["train/gslice-0.97"]["g"].index("--protect") + 1], "0.97")
        envs = {i: e for i, _, e in next(p for n, p, _ in calls if n == "train/mps-p1")}
        self.assertEqual(envs["o10"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "10")
        self.assertEqual(envs["o10"]["CUDA_MPS_CLIENT_PRIORITY"], "1")
        self.assertIn("CUDA_MPS_PIPE_DIRECTORY", envs["g"])
        self.assertNotIn("CUDA_MPS_PIPE_DIRECTORY", {i: e for i, _, e in calls[0][1]}["g"])
        # The report reads what the loop wrote.
        self.assertIn("## At each protection level", report.markdown(d))


def load_frontier(**env):
    """frontier.py loaded with FRONTIER_* from env (the rest of the environment's removed)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("FRONTIER_")}
    for k in saved:
        del os.environ[k]
    os.environ.update(env)
    try:
        return load("frontier")
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)


class InterleavedTest(unittest.TestCase):
    """FRONTIER_INTERLEAVE: every configuration of a pair in one run, rounds rotated, against
    the same run's solo phases."""

    def test_plan_has_every_configuration_in_each_round_rotated(self):
        frontier = load_frontier(FRONTIER_PAIRS="train,latency", FRONTIER_PROTECT="0.97,0.90", FRONTIER_MPS_PCT="100,50",
                                 FRONTIER_MPS_PCT_P0="100", FRONTIER_MPS_PRIO="1,0", FRONTIER_INTERLEAVE="3",
                                 FRONTIER_WINDOW_S="54", FRONTIER_LANES="2")
        lanes = frontier.lanes(frontier.plan())
        self.assertEqual([[r.key for r in lane] for lane in lanes],
                         [["train/interleaved"], ["latency/calibrate", "latency/interleaved"]])
        run = lanes[0][0]
        self.assertEqual(run.window, 18)
        self.assertEqual(run.phases[0], ("drain", {}))  # nobody works first
        # Solo twice (each job alone), plain MPS at 100 and 50 below normal and 100 at normal
        # priority (FRONTIER_MPS_PCT_P0), time-slicing, gslice at each level: each once a round.
        every = {"solo", "mps-100-p1", "mps-50-p1", "mps-100-p0", "timeslice", "gslice-mps-0.97", "gslice-mps-0.90"}
        self.assertEqual(len(run.phases), 1 + 3 * 8)
        rounds = [run.phases[1 + 8 * k:1 + 8 * (k + 1)] for k in range(3)]
        for r in rounds:
            self.assertEqual({cfg for cfg, _ in r}, every)
            self.assertEqual(sum(cfg == "solo" for cfg, _ in r), 2)
        # Each round starts one phase later, every other round backwards: the phase after
        # gslice-mps-0.97 in one round comes before it in the next.
        self.assertEqual(rounds[1][::-1][0], rounds[0][1])
        self.assertEqual(rounds[2][0], rounds[0][2])
        self.assertEqual(rounds[1], rounds[0][:1] + rounds[0][1:][::-1])
        def after(phases, cfg):
            names = [c for c, _ in phases]
            i = names.index(cfg) + 1
            return names[i] if i < len(names) else None
        self.assertNotEqual(after(rounds[0], "gslice-mps-0.97"), after(rounds[1], "gslice-mps-0.97"))
        self.assertEqual(set(run.configs), every)
        specs = run.proc_specs
        self.assertEqual(specs["o50p1"][2]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50")
        self.assertEqual(specs["o50p1"][2]["CUDA_MPS_CLIENT_PRIORITY"], "1")
        self.assertNotIn("o50p0", specs)
        self.assertIn("--protect", specs["G0.97"][1])
        self.assertEqual(specs["O"][1], ("--class=opportunistic",))
        # gslice's four slices share the card: each is limited to less than a quarter of it.
        argv = {i: a for i, a, _ in run.procs(None, {"CUDA_MPS_PIPE_DIRECTORY": "/p"})}
        self.assertIn(f"--memory={frontier.SHARED_MEMORY}", argv["G0.90"])
        # Time-slicing: a native pair, whose MPS pipe folder has no daemon (not MPS clients).
        self.assertIn(("timeslice", {"g": "gT", "o": "oT"}), rounds[0])
        envs = {i: e for i, _, e in run.procs(None, {"CUDA_MPS_PIPE_DIRECTORY": "/p"})}
        self.assertEqual(envs["gT"]["CUDA_MPS_PIPE_DIRECTORY"], frontier.NO_MPS["CUDA_MPS_PIPE_DIRECTORY"])
        self.assertEqual(envs["oT"]["CUDA_MPS_PIPE_DIRECTORY"], frontier.NO_MPS["CUDA_MPS_PIPE_DIRECTORY"])
        self.assertNotIn("CUDA_MPS_CLIENT_PRIORITY", envs["oT"])
        self.assertEqual(envs["g"]["CUDA_MPS_PIPE_DIRECTORY"], "/p")
        self.assertNotIn("--memory=60GiB", argv["O"])
        self.assertTrue(lanes[1][0].calibrates and not lanes[1][1].calibrates)
        # Each lane fits a call.
        for lane in lanes:
            self.assertLessEqual(sum(r.estimate() for r in lane) + frontier.SUITE_S + frontier.MPS_SWITCH_S, 600)

    def test_a_run_over_two_calls_runs_the_rotations_later_rounds_in_the_second(self):
        env = dict(FRONTIER_PAIRS="train", FRONTIER_PROTECT="0.90", FRONTIER_MPS_PCT="100,50", FRONTIER_MPS_PRIO="1")
        whole = load_frontier(FRONTIER_INTERLEAVE="4", FRONTIER_WINDOW_S="60", **env).plan()[0]
        first = load_frontier(FRONTIER_INTERLEAVE="2", FRONTIER_WINDOW_S="30", **env).plan()[0]
        second = load_frontier(FRONTIER_INTERLEAVE="2", FRONTIER_WINDOW_S="30", FRONTIER_FIRST_ROUND="2", **env).plan()[0]
        self.assertEqual(first.window, whole.window)
        n = (len(whole.phases) - 1) // 4
        self.assertEqual(first.phases, whole.phases[:1 + 2 * n])
        self.assertEqual(second.phases, whole.phases[:1] + whole.phases[1 + 2 * n:])

    def test_split_deals_a_pairs_configurations_over_lanes(self):
        frontier = load_frontier(FRONTIER_PAIRS="train,latency", FRONTIER_PROTECT="0.97,0.90,0.80",
                                 FRONTIER_MPS_PCT="100,50", FRONTIER_MPS_PCT_P0="100", FRONTIER_MPS_PRIO="1,0",
                                 FRONTIER_INTERLEAVE="4", FRONTIER_WINDOW_S="60", FRONTIER_LANES="4",
                                 FRONTIER_SPLIT="2")
        lanes = frontier.lanes(frontier.plan())
        self.assertEqual([[r.key for r in lane] for lane in lanes],
                         [["train/interleaved-1of2"], ["latency/calibrate", "latency/interleaved-1of2"],
                          ["train/interleaved-2of2"], ["latency/calibrate", "latency/interleaved-2of2"]])
        parts = [lanes[0][0], lanes[2][0]]
        # Plain MPS at priority 1 in every part, for the report's same-round comparison of each
        # gslice level; the others in order of importance, dealt in turn, each in exactly one part.
        self.assertEqual(set(parts[0].configs), {"solo", "mps-100-p1", "mps-50-p1", "timeslice", "gslice-mps-0.90"})
        self.assertEqual(set(parts[1].configs), {"solo", "mps-100-p1", "mps-100-p0", "gslice-mps-0.97",
                                                 "gslice-mps-0.80"})
        for part in parts:
            self.assertEqual(part.window, 15)
            names = [cfg for cfg, _ in part.phases[1:]]
            self.assertEqual(names.count("solo"), 2 * 4)  # each part has solo phases of its own
            # Only the processes its phases need.
            used = {i for _, roles in part.phases for i in roles.values()}
            self.assertEqual(set(part.proc_specs), used)
        self.assertNotIn("gT", parts[1].proc_specs)
        self.assertNotIn("G0.90", parts[1].proc_specs)
        self.assertIn("O", parts[0].proc_specs)
        self.assertIn("o100p1", parts[0].proc_specs)
        self.assertIn("o100p1", parts[1].proc_specs)
        # The whole frontier at 60 s windows fits one call of a four-GPU machine.
        for lane in lanes:
            self.assertLessEqual(sum(r.estimate() for r in lane) + frontier.SUITE_S + frontier.MPS_SWITCH_S, 600)

    def test_gslice_caps_by_the_sms_and_by_time_side_by_side(self):
        frontier = load_frontier(FRONTIER_PAIRS="train", FRONTIER_PROTECT="0.97,0.90", FRONTIER_MPS_PCT="100,50",
                                 FRONTIER_MPS_PRIO="1", FRONTIER_GSLICE_CAP="50", FRONTIER_GSLICE_SMS="50",
                                 FRONTIER_INTERLEAVE="4", FRONTIER_WINDOW_S="40", FRONTIER_TIMESLICE="0")
        run = frontier.plan()[0]
        self.assertEqual(set(run.configs), {"solo", "mps-100-p1", "mps-50-p1", "gslice-mps-0.97", "gslice-mps-0.90",
                                            "gslice-mps-0.97-cap50", "gslice-mps-0.97-cap50-time",
                                            "gslice-mps-0.97-sms50"})
        self.assertEqual(run.configs["gslice-mps-0.97-cap50-time"]["cap_by"], "time")
        self.assertEqual(run.configs["gslice-mps-0.97-sms50"]["kind"], "gslice-mps-sms")
        rounds = [run.phases[1 + 9 * k:1 + 9 * (k + 1)] for k in range(4)]
        for r in rounds:
            self.assertIn(("gslice-mps-0.97-cap50", {"g": "G0.97", "o": "Oc50"}), r)
            self.assertIn(("gslice-mps-0.97-cap50-time", {"g": "G0.97", "o": "Oc50t"}), r)
            self.assertIn(("gslice-mps-0.97-sms50", {"g": "G0.97", "o": "Os50"}), r)
        argv = {i: a for i, a, _ in run.procs(None, {"CUDA_MPS_PIPE_DIRECTORY": "/p"})}
        # By the SMs: gslice's own MPS settings for the cap; by time: 100% of the SMs over them.
        a = argv["Oc50"]
        self.assertIn("--cap=50%", a[:a.index("--")])
        self.assertEqual(a[a.index("--") + 1], frontier.suite.PY)
        a = argv["Oc50t"]
        self.assertIn("--cap=50%", a[:a.index("--")])
        self.assertEqual(a[a.index("--") + 1:a.index("--") + 3], ["env", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"])
        # The SMs alone: no cap, its program at 50% of the SMs over gslice's settings.
        a = argv["Os50"]
        self.assertFalse([x for x in a[:a.index("--")] if x.startswith("--cap")])
        self.assertEqual(a[a.index("--") + 1:a.index("--") + 3], ["env", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"])
        # The report shows them and judges only gslice's own configuration at each level.
        configs = [dict({"pair": "train", "config": name, "status": "ok", "lane": 0,
                         "g": {"steps_per_s": 40 * (1 if name == "solo" else 0.95), "finite": True, "rounds": [40] * 4},
                         "o": {"steps_per_s": 30 * (1 if name == "solo" else 0.5), "finite": True, "rounds": [30] * 4}},
                        **attrs) for name, attrs in run.configs.items()]
        d = doc(configs)
        d["settings"].update(interleave=4, protect=[0.97, 0.90])
        self.assertEqual({v["mode"] for v in report.frontier(d, "train")}, {"gslice-mps"})
        md = report.markdown(d)
        self.assertIn("| gslice-mps-0.97-cap50-time | 0.950 | 0.500 |", md)
        self.assertIn("| gslice-mps-0.97-sms50 | 0.950 | 0.500 |", md)

    def test_gslice_guaranteed_alone_is_shown_against_the_plain_solo(self):
        frontier = load_frontier(FRONTIER_PAIRS="train", FRONTIER_PROTECT="0.97", FRONTIER_MPS_PCT="100",
                                 FRONTIER_MPS_PRIO="1", FRONTIER_GSLICE_SOLO="1", FRONTIER_INTERLEAVE="4",
                                 FRONTIER_WINDOW_S="40", FRONTIER_TIMESLICE="0")
        run = frontier.plan()[0]
        self.assertEqual(run.configs["gslice-solo-0.97"], {"kind": "gslice-solo", "protect": 0.97})
        self.assertEqual(run.configs["gslice-solo-opp"], {"kind": "gslice-solo"})
        rounds = [run.phases[1 + 6 * k:1 + 6 * (k + 1)] for k in range(4)]
        for r in rounds:
            self.assertIn(("gslice-solo-0.97", {"g": "G0.97"}), r)  # alone: no opportunistic process
            self.assertIn(("gslice-solo-opp", {"o": "O"}), r)  # and the other way round
        configs = []
        for name, attrs in run.configs.items():
            c = dict({"pair": "train", "config": name, "status": "ok", "lane": 0}, **attrs)
            alone = 1 if name == "solo" else 0.96
            if name != "gslice-solo-opp":
                c["g"] = {"steps_per_s": 40 * alone, "finite": True, "rounds": [40 * alone] * 4}
            if name != "gslice-solo-0.97":
                o = 1 if name == "solo" else 0.9 if name == "gslice-solo-opp" else 0.5
                c["o"] = {"steps_per_s": 30 * o, "finite": True, "rounds": [30 * o] * 4}
            configs.append(c)
        d = doc(configs)
        d["settings"].update(interleave=4, protect=[0.97])
        self.assertEqual({v["mode"] for v in report.frontier(d, "train")}, {"gslice-mps"})
        md = report.markdown(d)
        self.assertIn("| gslice-solo-0.97 | 0.960 | n/a |", md)
        self.assertIn("| gslice-solo-opp | n/a | 0.900 |", md)
        self.assertIn("gslice-solo-0.97", report.text_table(d))
        # Each against the solo phases, round by round: the guaranteed job's figure, or the other's.
        side = {c: (a, g, o) for c, a, g, o in report.side_by_side(d, "train")}
        self.assertEqual(side["gslice-solo-opp"][0], "solo")
        self.assertIsNone(side["gslice-solo-opp"][1])
        self.assertAlmostEqual(side["gslice-solo-opp"][2][0], -0.1)
        self.assertAlmostEqual(side["gslice-solo-0.97"][1][0], -0.04)
        self.assertIsNone(side["gslice-solo-0.97"][2])
        # Rounds counted by whichever job ran: the opportunistic process's four.
        self.assertIn("| gslice-solo-opp | solo | 4 | n/a | -0.100 ± 0.000 |", md)
        self.assertIn("gslice-solo-opp − solo, same round: guaranteed n/a, opportunistic -0.100 ± 0.000 (4 rounds)",
                      report.text_table(d))

    def test_a_second_plain_guaranteed_process_alone_is_shown_against_the_first(self):
        frontier = load_frontier(FRONTIER_PAIRS="train", FRONTIER_PROTECT="0.97", FRONTIER_MPS_PCT="100",
                                 FRONTIER_MPS_PRIO="1", FRONTIER_TWIN="1", FRONTIER_GSLICE_SOLO="1",
                                 FRONTIER_INTERLEAVE="4", FRONTIER_WINDOW_S="40", FRONTIER_TIMESLICE="0")
        run = frontier.plan()[0]
        self.assertEqual(run.configs["solo-twin"], {"kind": "twin"})
        self.assertIn(("solo-twin", {"g": "g2"}), run.phases)
        self.assertEqual(run.proc_specs["g2"], run.proc_specs["g"])  # the same job, another process
        configs = []
        for name, attrs in run.configs.items():
            c = dict({"pair": "train", "config": name, "status": "ok", "lane": 0}, **attrs)
            g = {"solo": 1, "solo-twin": 0.97, "gslice-solo-0.97": 0.95}.get(name, 0.9)
            if name != "gslice-solo-opp":
                c["g"] = {"steps_per_s": 40 * g, "finite": True, "rounds": [40 * g] * 4}
            if name not in ("solo-twin", "gslice-solo-0.97"):
                c["o"] = {"steps_per_s": 30, "finite": True, "rounds": [30] * 4}
            configs.append(c)
        d = doc(configs)
        d["settings"].update(interleave=4, protect=[0.97])
        side = {c: (a, g) for c, a, g, _ in report.side_by_side(d, "train")}
        self.assertEqual(side["solo-twin"][0], "solo")
        self.assertAlmostEqual(side["solo-twin"][1][0], -0.03)
        self.assertAlmostEqual(side["gslice-solo-0.97"][1][0], -0.05)

    def test_pinned_processes_get_cores_of_their_own_within_their_lane(self):
        env = dict(FRONTIER_PAIRS="train", FRONTIER_PROTECT="0.90", FRONTIER_MPS_PCT="100", FRONTIER_MPS_PRIO="1",
                   FRONTIER_INTERLEAVE="4", FRONTIER_WINDOW_S="40", FRONTIER_TIMESLICE="0", FRONTIER_PIN="2")
        frontier = load_frontier(FRONTIER_LANES="2", FRONTIER_LANE="1", **env)
        frontier.os.sched_getaffinity = lambda pid: set(range(32))
        run = frontier.plan()[0]
        procs = run.procs(None, {})
        cores = [argv[2] for _, argv, _ in procs]
        self.assertTrue(all(argv[:2] == ["taskset", "-c"] for _, argv, _ in procs))
        used = [int(c) for cs in cores for c in cs.split(",")]
        self.assertEqual(len(used), 2 * len(procs))
        self.assertEqual(len(set(used)), len(used))  # no core shared
        self.assertTrue(all(16 <= c < 32 for c in used))  # lane 1's half
        gslice = next(argv for ident, argv, _ in procs if ident == "G0.90")
        self.assertEqual(gslice[3:5], [os.path.join(frontier.suite.build_dir(), "bin", "gslice"), "run"])
        frontier.os.sched_getaffinity = lambda pid: set(range(6))
        with self.assertRaises(SystemExit) as e:
            run.procs(None, {})
        self.assertIn("need", str(e.exception))
        # The dry run shows the plan on any machine, with the cores it needs.
        planned = [argv[2] for _, argv, _ in run.procs(None, {}, plan=True)]
        self.assertEqual(planned[0], "10,11")  # lane 1 of two, after lane 0's 5 x 2 cores
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            frontier.print_plan(frontier.plan())
        self.assertIn(f"pinned: {len(procs)} processes x 2 cores = {2 * len(procs)} cores of its lane", out.getvalue())
        unpinned = load_frontier(**dict(env, FRONTIER_PIN="0")).plan()[0]
        self.assertFalse(any(argv[0] == "taskset" for _, argv, _ in unpinned.procs(None, {})))

    def test_busy_host_threads_beside_the_guaranteed_job_are_shown_against_its_solo(self):
        frontier = load_frontier(FRONTIER_PAIRS="train", FRONTIER_PROTECT="", FRONTIER_MPS_PCT="100",
                                 FRONTIER_MPS_PRIO="1", FRONTIER_HOST_SPIN="2", FRONTIER_INTERLEAVE="4",
                                 FRONTIER_WINDOW_S="40", FRONTIER_TIMESLICE="0")
        run = frontier.plan()[0]
        self.assertEqual(run.configs["host-spin"], {"kind": "host", "host_spin": 2})
        self.assertIn(("host-spin", {"g": "g", "h0": "h0", "h1": "h1"}), run.phases)
        # The spinners run job.py's host-spin workload, whatever the pair's jobs are.
        argv = {ident: argv for ident, argv, _ in run.procs(None, {})}
        self.assertEqual(argv["h1"][argv["h1"].index("--workload") + 1], "host-spin")
        self.assertEqual(argv["g"][argv["g"].index("--workload") + 1], "resnet50")
        configs = []
        for name, attrs in run.configs.items():
            c = dict({"pair": "train", "config": name, "status": "ok", "lane": 0}, **attrs)
            g = 1 if name == "solo" else 0.93
            c["g"] = {"steps_per_s": 40 * g, "finite": True, "rounds": [40 * g] * 4}
            if name != "host-spin":
                c["o"] = {"steps_per_s": 30, "finite": True, "rounds": [30] * 4}
            configs.append(c)
        d = doc(configs)
        d["settings"].update(interleave=4, protect=[])
        side = {c: (a, g, o) for c, a, g, o in report.side_by_side(d, "train")}
        self.assertEqual(side["host-spin"][0], "solo")
        self.assertAlmostEqual(side["host-spin"][1][0], -0.07)
        self.assertEqual(report.frontier(d, "train"), [])  # shown, not judged

    def test_calls_of_one_run_too_long_for_one_call_pool_their_rounds(self):
        # Two calls of the same one-GPU run, two rounds each: the host is 10% faster in the
        # second call; gslice 0.02 over plain MPS's guaranteed job in every round.
        def call(k, speed, gslice_status="ok"):
            def c(name, kind, g, o, **attrs):
                return dict({"pair": "train", "config": name, "kind": kind, "status": "ok", "lane": 0,
                             "g": {"steps_per_s": 40 * speed * g, "finite": True, "rounds": [40 * speed * g] * 2},
                             "o": {"steps_per_s": 30 * speed * o, "finite": True, "rounds": [30 * speed * o] * 2},
                             "gpu": {"sm_mhz": 1980.0, "busy_pct": 50.0 + 10 * k, "power_w": 400.0}}, **attrs)
            gs = c("gslice-mps-0.90", "gslice-mps", 0.92, 0.8, protect=0.90)
            gs["status"] = gslice_status
            d = doc([c("solo", "solo", 1, 1), c("mps-100-p1", "mps", 0.90, 0.9, mps_pct=100, mps_prio=1), gs])
            d.update(lane=0, started=f"2026-12-0{k}T10:00:00+00:00", wall_s=300, service_ms={"latency": 5.0 + k})
            d["settings"].update(interleave=2, window_s=30, protect=[0.90])
            return d

        d = report.merge([call(1, 1.0), call(2, 1.1)])
        self.assertEqual(d["settings"]["interleave"], 4)
        self.assertEqual(d["settings"]["window_s"], 60)
        self.assertEqual(len(d["calls"]), 2)
        self.assertEqual(d["wall_s"], 600)
        rows = {r["config"]: r for r in report.rows(d, "train")}
        self.assertEqual(len(rows["gslice-mps-0.90"]["g_rounds"]), 4)
        for x in rows["gslice-mps-0.90"]["g_rounds"]:
            self.assertAlmostEqual(x, 0.92)  # each round against its own call's solo
        self.assertAlmostEqual(rows["gslice-mps-0.90"]["g"], 0.92)
        gslice = next(c for c in d["configs"] if c["config"] == "gslice-mps-0.90")
        self.assertAlmostEqual(gslice["gpu"]["busy_pct"], 65.0)
        side = {c: (g, o) for c, _, g, o in report.side_by_side(d, "train")}
        self.assertAlmostEqual(side["gslice-mps-0.90"][0][0], 0.02)
        self.assertEqual(side["gslice-mps-0.90"][0][2], 4)
        v = by(report.frontier(d, "train"), 0.90, "gslice-mps")
        # Kept at 0.92, but plain MPS kept it too and harvested 0.9 against 0.8: judged over all 4 rounds.
        self.assertFalse(v["met"])
        self.assertIn("round by round -0.100 ± 0.000 against mps-100-p1 over 4 rounds", v["misses"][0])
        md = report.markdown(d)
        self.assertIn("**Calls:** 2 of the same run", md)
        self.assertIn("in each of 4 rounds", md)
        self.assertEqual(report.service_text(d), "6.000 (call 1); 7.000 (call 2)")
        # A configuration that failed in either call stays failed.
        failed = report.merge([call(1, 1.0), call(2, 1.1, gslice_status="failed")])
        self.assertEqual(next(c for c in failed["configs"] if c["config"] == "gslice-mps-0.90")["status"], "failed")
        # Lanes of one call (different lanes) and documents without a lane stay apart.
        other = call(2, 1.1)
        other["lane"] = 1
        self.assertEqual(len(report.merge([call(1, 1.0), other])["lanes"]), 2)
        bare = [call(1, 1.0), call(2, 1.1)]
        for x in bare:
            del x["lane"]
        self.assertEqual(len(report.merge(bare)["lanes"]), 2)

    def test_gslice_is_set_beside_plain_mps_round_by_round_over_all_lanes(self):
        # Two lanes, 3 rounds each; the solo phases move with the host (40, 44, 36) while the
        # configurations of a round move together: gslice's guaranteed job 0.02 under plain
        # MPS's in every round, its opportunistic job 0.05 under.
        solo_g, solo_o = [40, 44, 36], [30, 33, 27]
        configs = []
        for lane in (0, 1):
            configs += [rounds_cfg("solo", "solo", lane, solo_g, solo_o),
                        rounds_cfg("mps-100-p1", "mps", lane, [x * 0.90 for x in solo_g], [x * 0.90 for x in solo_o],
                            mps_pct=100, mps_prio=1),
                        rounds_cfg("gslice-mps-0.97", "gslice-mps", lane, [x * 0.88 for x in solo_g],
                            [x * 0.85 for x in solo_o], protect=0.97),
                        rounds_cfg("gslice-solo-0.97", "gslice-solo", lane, [x * (0.99 + 0.01 * k) for k, x in enumerate(solo_g)],
                            protect=0.97)]
        d = doc(configs)
        d["settings"].update(interleave=3, protect=[0.97], pairs=["train"])
        side = {c: (a, g, o) for c, a, g, o in report.side_by_side(d, "train")}
        against, g, o = side["gslice-mps-0.97"]
        self.assertEqual(against, "mps-100-p1")
        self.assertAlmostEqual(g[0], -0.02)
        self.assertAlmostEqual(g[1], 0.0)
        self.assertEqual(g[2], 6)
        self.assertAlmostEqual(o[0], -0.05)
        against, g, o = side["gslice-solo-0.97"]
        self.assertEqual(against, "solo")
        self.assertAlmostEqual(g[0], 0.0)  # rounds at 0.99, 1.00, 1.01 of solo, both lanes
        self.assertAlmostEqual(g[1], (0.0004 / 5) ** 0.5 / 6 ** 0.5)  # differences ±0.01, 0 twice: s² = 0.0004 / 5
        self.assertIsNone(o)
        md = report.markdown(d)
        self.assertIn("| gslice-mps-0.97 | mps-100-p1 | 6 | -0.020 ± 0.000 | -0.050 ± 0.000 |", md)
        self.assertIn("gslice-mps-0.97 − mps-100-p1, same round: guaranteed -0.020 ± 0.000", report.text_table(d))
        # Not interleaved: no rounds to set side by side.
        d["settings"]["interleave"] = 0
        self.assertEqual(report.side_by_side(d, "train"), [])

    def test_any_two_configurations_are_set_side_by_side_on_request(self):
        # A change beside the build before it: the new build's guaranteed job 0.03 over the base's
        # in every round of both lanes, its opportunistic job 0.10 under; the host moves both.
        solo_g, solo_o = [40, 44, 36], [30, 33, 27]
        configs = []
        for lane in (0, 1):
            configs += [rounds_cfg("solo", "solo", lane, solo_g, solo_o),
                        rounds_cfg("gslice-mps-0.97", "gslice-mps", lane, [x * 0.95 for x in solo_g], [x * 0.60 for x in solo_o]),
                        rounds_cfg("gslice-mps-0.97-base", "gslice-mps-base", lane, [x * 0.92 for x in solo_g],
                            [x * 0.70 for x in solo_o]),
                        rounds_cfg("gslice-solo-0.97", "gslice-solo", lane, [x * 1.01 for x in solo_g])]
        d = doc(configs)
        d["settings"].update(interleave=3, protect=[0.97], pairs=["train"])
        g, o = report.compare(d, "train", "gslice-mps-0.97", "gslice-mps-0.97-base")
        self.assertAlmostEqual(g[0], 0.03)
        self.assertEqual(g[2], 6)
        self.assertAlmostEqual(o[0], -0.10)
        g, o = report.compare(d, "train", "gslice-solo-0.97", "solo")
        self.assertAlmostEqual(g[0], 0.01)
        self.assertIsNone(o)
        self.assertIsNone(report.compare(d, "train", "gslice-mps-0.97", "mps-100-p1"))  # not in the run
        out = io.StringIO()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "f.json")
            with open(path, "w") as f:
                json.dump(d, f)
            argv = sys.argv
            try:
                sys.argv = ["frontier_report.py", "--compare", "gslice-mps-0.97:gslice-mps-0.97-base", path]
                with contextlib.redirect_stdout(out):
                    report.main()
                sys.argv = ["frontier_report.py", "--compare", "gslice-mps-0.97", path]
                with self.assertRaises(SystemExit) as e:
                    report.main()
                self.assertIn("A:B", str(e.exception.code))
            finally:
                sys.argv = argv
        self.assertIn("train: gslice-mps-0.97 − gslice-mps-0.97-base, same round: guaranteed +0.030 ± 0.000, "
                      "opportunistic -0.100 ± 0.000 (6 rounds)", out.getvalue())
        # Not interleaved: no rounds to compare.
        d["settings"]["interleave"] = 0
        self.assertIsNone(report.compare(d, "train", "gslice-mps-0.97", "gslice-mps-0.97-base"))

    def test_gslice_guaranteed_at_the_programs_stream_priorities(self):
        frontier = load_frontier(FRONTIER_PAIRS="train", FRONTIER_PROTECT="0.97,0.90", FRONTIER_MPS_PCT="100",
                                 FRONTIER_MPS_PRIO="1", FRONTIER_GSLICE_SOLO="1", FRONTIER_GSLICE_PROGPRIO="1",
                                 FRONTIER_INTERLEAVE="4", FRONTIER_WINDOW_S="40", FRONTIER_TIMESLICE="0")
        run = frontier.plan()[0]
        self.assertEqual(run.configs["gslice-mps-0.97-progprio"]["kind"], "gslice-mps-progprio")
        for r in [run.phases[1 + 10 * k:1 + 10 * (k + 1)] for k in range(4)]:
            self.assertIn(("gslice-mps-0.97-progprio", {"g": "G0.97p", "o": "O"}), r)
            self.assertIn(("gslice-solo-0.97-progprio", {"g": "G0.97p"}), r)
            self.assertIn(("gslice-solo-0.90", {"g": "G0.90"}), r)
        argv = {i: a for i, a, _ in run.procs(None, {"CUDA_MPS_PIPE_DIRECTORY": "/p"})}
        a = argv["G0.97p"]
        self.assertEqual(a[a.index("--") + 1:a.index("--") + 3], ["env", "GSLICE_STREAM_PRIORITY=program"])
        self.assertNotIn("env", argv["G0.97"])
        with self.assertRaises(SystemExit):
            load_frontier(FRONTIER_PAIRS="train", FRONTIER_GSLICE_PROGPRIO="1").check_env()  # not interleaved

    def test_a_base_build_runs_the_first_levels_pair_again_round_by_round(self):
        with tempfile.TemporaryDirectory() as base:
            os.makedirs(os.path.join(base, "bin"))
            gslice = os.path.join(base, "bin", "gslice")
            with open(gslice, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(gslice, 0o755)
            frontier = load_frontier(FRONTIER_PAIRS="train", FRONTIER_PROTECT="0.97,0.90", FRONTIER_MPS_PCT="100",
                                     FRONTIER_MPS_PRIO="1", FRONTIER_GSLICE_BASE=base, FRONTIER_INTERLEAVE="4",
                                     FRONTIER_WINDOW_S="40", FRONTIER_TIMESLICE="0")
            frontier.check_env()
            run = frontier.plan()[0]
            self.assertEqual(run.configs["gslice-mps-0.97-base"]["kind"], "gslice-mps-base")
            for r in [run.phases[1 + 6 * k:1 + 6 * (k + 1)] for k in range(4)]:
                self.assertIn(("gslice-mps-0.97-base", {"g": "Gb0.97", "o": "Ob"}), r)
            argv = {i: a for i, a, _ in run.procs(None, {"CUDA_MPS_PIPE_DIRECTORY": "/p"})}
            for ident in ("Gb0.97", "Ob"):
                self.assertEqual(argv[ident][0], gslice)
            for ident in ("G0.97", "G0.90", "O"):
                self.assertNotEqual(argv[ident][0], gslice)
        with self.assertRaises(SystemExit):  # no build there
            load_frontier(FRONTIER_PAIRS="train", FRONTIER_INTERLEAVE="4", FRONTIER_WINDOW_S="40",
                          FRONTIER_GSLICE_BASE="/nonexistent").check_env()

    def test_lanes_share_the_servers_service_time(self):
        # Two lanes of the latency pair each measure the server alone; both take the larger.
        with tempfile.TemporaryDirectory() as shared:
            env = dict(FRONTIER_PAIRS="latency", FRONTIER_PROTECT="0.97,0.90", FRONTIER_MPS_PCT="100",
                       FRONTIER_MPS_PRIO="1", FRONTIER_INTERLEAVE="4", FRONTIER_WINDOW_S="40", FRONTIER_SPLIT="2",
                       FRONTIER_LANES="2", FRONTIER_SHARED=shared)
            lane0 = load_frontier(FRONTIER_LANE="0", **env)
            lane1 = load_frontier(FRONTIER_LANE="1", **env)
            lane1.SHARED_WAIT_S = 0.5
            said = io.StringIO()
            with contextlib.redirect_stdout(said):
                self.assertEqual(lane1.shared_service_ms(8.25), (8.25, {1: 8.25}))  # lane 0 has not given yet
            self.assertIn("lanes [0] gave no service time", said.getvalue())
            self.assertEqual(lane0.shared_service_ms(5.5), (8.25, {0: 5.5, 1: 8.25}))
            self.assertEqual(lane1.shared_service_ms(8.25), (8.25, {0: 5.5, 1: 8.25}))
            # A lane whose measurement failed gives none: the others go on with theirs.
            os.remove(os.path.join(shared, "service-latency-lane0"))
            with contextlib.redirect_stdout(io.StringIO()):
                lane0.shared_service_ms(None)
                self.assertEqual(lane1.shared_service_ms(8.25), (8.25, {1: 8.25}))
        # Without the shared folder (one lane, or lanes run apart) a lane keeps its own.
        alone = load_frontier(FRONTIER_PAIRS="latency", FRONTIER_INTERLEAVE="4")
        self.assertEqual(alone.shared_service_ms(5.5), (5.5, {0: 5.5}))

    def test_gslice_opportunistic_priorities_side_by_side(self):
        frontier = load_frontier(FRONTIER_PAIRS="train", FRONTIER_PROTECT="0.90", FRONTIER_MPS_PCT="100",
                                 FRONTIER_MPS_PRIO="1,0", FRONTIER_GSLICE_PRIO="1,0", FRONTIER_INTERLEAVE="4",
                                 FRONTIER_WINDOW_S="40", FRONTIER_TIMESLICE="0")
        run = frontier.plan()[0]
        self.assertEqual(set(run.configs), {"solo", "mps-100-p1", "mps-100-p0", "gslice-mps-0.90-p1",
                                            "gslice-mps-0.90-p0"})
        self.assertEqual(run.configs["gslice-mps-0.90-p0"]["gslice_prio"], 0)
        self.assertNotIn("O", run.proc_specs)
        rounds = [run.phases[1 + 6 * k:1 + 6 * (k + 1)] for k in range(4)]
        for r in rounds:
            self.assertIn(("gslice-mps-0.90-p0", {"g": "G0.90", "o": "Op0"}), r)
            self.assertIn(("gslice-mps-0.90-p1", {"g": "G0.90", "o": "Op1"}), r)
        argv = {i: (a, e) for i, a, e in run.procs(None, {"CUDA_MPS_PIPE_DIRECTORY": "/p"})}
        # The priority is set in the program's environment, after `gslice run` set its own.
        a, e = argv["Op0"]
        self.assertEqual(a[a.index("--") + 1:a.index("--") + 3], ["env", "CUDA_MPS_CLIENT_PRIORITY=0"])
        self.assertEqual(a[0], os.path.join(frontier.suite.build_dir(), "bin", "gslice"))
        self.assertEqual(e, {"CUDA_MPS_PIPE_DIRECTORY": "/p"})
        a, _ = argv["G0.90"]
        self.assertNotIn("env", a)
        # Each variant is judged on its own against the same plain configurations.
        rows = [train("solo", "solo", 40, 30, lane=0), train("mps-100-p0", "mps", 38, 27, mps_pct=100, mps_prio=0),
                train("gslice-mps-0.90-p1", "gslice-mps", 38, 24, protect=0.90, gslice_prio=1),
                train("gslice-mps-0.90-p0", "gslice-mps", 37, 27.3, protect=0.90, gslice_prio=0)]
        vs = report.frontier(doc(rows), "train")
        self.assertEqual([(v["mode"], v["met"]) for v in vs if v["level"] == 0.90],
                         [("gslice-mps-p0", True), ("gslice-mps-p1", False)])
        with self.assertRaises(SystemExit):
            load_frontier(FRONTIER_GSLICE_PRIO="0").check_env()  # not interleaved
        with self.assertRaises(SystemExit):
            load_frontier(FRONTIER_GSLICE_PRIO="2", FRONTIER_INTERLEAVE="2", FRONTIER_WINDOW_S="20").check_env()

    def test_the_gpu_bound_pair_runs_matrix_products_on_both_sides(self):
        frontier = load_frontier(FRONTIER_PAIRS="gpu", FRONTIER_PROTECT="0.90", FRONTIER_MPS_PCT="100",
                                 FRONTIER_MPS_PRIO="1", FRONTIER_INTERLEAVE="2", FRONTIER_WINDOW_S="20")
        frontier.check_env()
        run = frontier.plan()[0]
        self.assertEqual(run.key, "gpu/interleaved")
        for ident, argv, _ in run.procs(None, {}):
            self.assertEqual(argv[argv.index("--workload") + 1], "matmul", ident)
            # Warm processes wait for the start idle: an opportunistic one held back beside
            # GPU-bound guaranteed ones would not warm up while they worked.
            self.assertIn("--rest", argv, ident)
        rows = [dict(train(c, k, g, o, **a), pair="gpu") for c, k, g, o, a in [
            ("solo", "solo", 40, 30, {}), ("mps-100-p1", "mps", 20, 15, {"mps_pct": 100}),
            ("gslice-mps-0.90", "gslice-mps", 37, 3, {"protect": 0.90})]]
        d = doc(rows)
        d["settings"] = dict(d["settings"], pairs=["gpu"], protect=[0.90])
        v = by(report.frontier(d, "gpu"), 0.90, "gslice-mps")
        self.assertTrue(v["met"])  # plain MPS keeps no level; gslice keeps 0.925
        self.assertIn("GPU-bound pair", report.text_table(d))

    def test_the_gpus_state_is_averaged_over_each_configurations_phases(self):
        frontier = load_frontier(FRONTIER_PAIRS="train", FRONTIER_PROTECT="0.90", FRONTIER_MPS_PCT="100",
                                 FRONTIER_MPS_PRIO="1", FRONTIER_INTERLEAVE="2", FRONTIER_WINDOW_S="20",
                                 FRONTIER_SETTLE_S="0.5", FRONTIER_TIMESLICE="0")
        phases_run = []

        def fake_run_config(name, procs, seconds=None, phases=None, phase_s=None):
            out, ends = {"phases": []}, {}
            for i, ids in enumerate(phases):
                a, b = 100 + i * phase_s, 100 + (i + 1) * phase_s
                out["phases"].append([a, b, ids])
                for ident in ids:
                    ends.setdefault(ident, []).extend(a + 0.6 + k / 20 for k in range(int((b - a - 0.7) * 20)))
            for ident, _, _ in procs:
                out[ident] = {"step_ends": ends.get(ident, []), "finite": True}
            phases_run[:] = out["phases"]
            return out

        class FakeSampler:
            # Two processes at work keep the GPU 90% busy, one 60%; samples in a phase's
            # unmeasured first half second are off the chart and must not count.
            def __init__(self, path):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def samples(self):
                out = []
                for a, b, ids in phases_run:
                    out.append((a + 0.2, {"sm_mhz": 1.0, "busy_pct": 0.0, "power_w": 9999.0}))
                    t = a + 1
                    while t < b:
                        out.append((t, {"sm_mhz": 1980.0, "busy_pct": 90.0 if len(ids) == 2 else 60.0,
                                        "power_w": 500.0 if len(ids) == 2 else 350.0}))
                        t += 0.5
                return out

        frontier.GpuSampler = FakeSampler
        d = run_all(frontier, fake_run_config)
        cfg = {c["config"]: c for c in d["configs"]}
        self.assertEqual(cfg["solo"]["gpu"], {"sm_mhz": 1980.0, "busy_pct": 60.0, "power_w": 350.0})
        self.assertEqual(cfg["mps-100-p1"]["gpu"], {"sm_mhz": 1980.0, "busy_pct": 90.0, "power_w": 500.0})
        self.assertEqual(cfg["gslice-mps-0.90"]["gpu"]["busy_pct"], 90.0)
        md = report.markdown(d)
        self.assertIn("| configuration | SM clock MHz | GPU busy % | power W |", md)
        self.assertIn("| mps-100-p1 | 1980 | 90 | 500 |", md)
        # nvidia-smi's lines: local-time stamps; a field it could not read leaves the line out.
        text = ("2026/11/30 11:21:37.185, 1980, 73, 406.12\n"
                "2026/11/30 11:21:37.685, [N/A], 70, 400.00\n"
                "garbage\n")
        samples = frontier.parse_gpu_samples(text)
        self.assertEqual(len(samples), 1)
        import datetime
        self.assertAlmostEqual(samples[0][0], datetime.datetime(2026, 11, 30, 11, 21, 37, 185000).timestamp())
        self.assertEqual(samples[0][1], {"sm_mhz": 1980.0, "busy_pct": 73.0, "power_w": 406.12})

    def test_rounds_are_judged_against_the_solo_phases_of_the_same_run(self):
        frontier = load_frontier(FRONTIER_PAIRS="train,latency", FRONTIER_PROTECT="0.90", FRONTIER_MPS_PCT="100",
                                 FRONTIER_MPS_PRIO="1", FRONTIER_INTERLEAVE="2", FRONTIER_WINDOW_S="20",
                                 FRONTIER_SETTLE_S="0.5")
        calls = []

        def fake_run_config(name, procs, seconds=None, phases=None, phase_s=None):
            # The host runs everything 20% slower in the second round; the guaranteed job
            # loses a tenth beside plain MPS and a twentieth beside gslice's opportunistic job.
            calls.append((name, procs, phases))
            out, ends, reqs = {"phases": []}, {}, {}
            per_round = (len(phases) - 1) // 2 if name.endswith("interleaved") else len(phases)
            for i, ids in enumerate(phases):
                a, b = 100 + i * phase_s, 100 + (i + 1) * phase_s
                out["phases"].append([a, b, ids])
                slow = 0.8 if name.endswith("interleaved") and i > per_round else 1.0
                for ident in ids:
                    if ident in ("g", "G0.90"):
                        rate = 40 * slow * (1.0 if len(ids) == 1 else 0.9 if ident == "g" else 0.95)
                    else:
                        rate = 30 * slow * (1.0 if len(ids) == 1 else 0.5)
                    ends.setdefault(ident, []).extend(a + 0.6 + k / rate for k in range(int((b - a - 0.7) * rate)))
                    reqs.setdefault(ident, []).extend(
                        [t, (0.010 if len(ids) == 1 else 0.011) / slow, 0.005]
                        for t in [a + 0.6 + k * 0.01 for k in range(int((b - a - 0.7) / 0.01))])
            for ident, argv, _ in procs:
                if "server" in argv:
                    out[ident] = {"service_ms": 5.0, "rate_per_s": 100, "requests_at": reqs.get(ident, []), "finite": True}
                else:
                    out[ident] = {"step_ends": ends.get(ident, []), "finite": True}
            return out

        d = run_all(frontier, fake_run_config)
        self.assertEqual([r["name"] for r in d["runs"]], ["train/interleaved", "latency/calibrate", "latency/interleaved"])
        self.assertTrue(all(r["status"] == "ok" for r in d["runs"]))
        # The server's service time comes from the calibration run, alone.
        self.assertEqual(d["service_ms"]["latency"], 5.0)
        argv = {name: {i: a for i, a, _ in procs} for name, procs, _ in calls}
        self.assertNotIn("--service-ms", argv["latency/calibrate"]["g"])
        self.assertIn("--service-ms", argv["latency/interleaved"]["G0.90"])
        cfg = {(c["pair"], c["config"]): c for c in d["configs"]}
        rounds = cfg[("train", "solo")]["g"]["rounds"]
        self.assertEqual(len(rounds), 2)
        self.assertAlmostEqual(rounds[1] / rounds[0], 0.8, delta=0.02)
        rows = {r["config"]: r for r in report.rows(d, "train")}
        # Round by round against the same round's solo: the host's 20% drops out.
        self.assertEqual([len(rows[c][k]) for c in ("mps-100-p1", "gslice-mps-0.90") for k in ("g_rounds", "o_rounds")],
                         [2, 2, 2, 2])
        for x in rows["mps-100-p1"]["g_rounds"]:
            self.assertAlmostEqual(x, 0.9, delta=0.02)
        for x in rows["gslice-mps-0.90"]["g_rounds"]:
            self.assertAlmostEqual(x, 0.95, delta=0.02)
        self.assertAlmostEqual(rows["gslice-mps-0.90"]["g"], 0.95, delta=0.02)
        lat = {r["config"]: r for r in report.rows(d, "latency")}
        for x in lat["mps-100-p1"]["g_rounds"]:
            self.assertAlmostEqual(x, 10 / 11, delta=0.02)
        s = report.solo(d, "train")[("g", "steps_per_s")]
        self.assertAlmostEqual(s["drift"], 0.8, delta=0.02)
        # A miss against plain MPS names the round-by-round difference and its standard error.
        v = by(report.frontier(d, "train"), 0.90, "gslice-mps")
        self.assertTrue(v["met"])  # 0.95 of solo kept; the same harvest as plain MPS
        mean_d, se, n = report.paired([0.50, 0.40, 0.45], [0.52, 0.46, 0.47])
        self.assertAlmostEqual(mean_d, -0.10 / 3)
        self.assertAlmostEqual(se, 0.04 / 3)  # differences -0.02, -0.06, -0.02: s = 0.0231
        self.assertEqual(n, 3)
        self.assertIsNone(report.paired([0.5], [0.4]))
        self.assertIn("(within two standard errors)", report.paired_text((-0.02, 0.015, 6), "mps-100-p1"))
        # An interleaved run's misses are judged by the rounds, not by the solo drift.
        short = dict(d, configs=[dict(c, **({"g": {"steps_per_s": 30.6, "finite": True, "rounds": [34.0, 27.2]}}
                                             if c["pair"] == "train" and c["config"] == "gslice-mps-0.90" else {}))
                                 for c in d["configs"]])
        miss = by(report.frontier(short, "train"), 0.90, "gslice-mps")["misses"][0]
        self.assertIn("round by round", miss)
        self.assertNotIn("drift", miss)
        self.assertNotIn("within", report.paired_text((-0.12, 0.02, 3), "mps-100-p0"))
        md = report.markdown(d)
        self.assertIn("against the same run's solo phases", md)
        self.assertIn("| gslice-mps-0.90 | 0.9", md)
        self.assertRegex(md, r"\| mps-100-p1 \| 0\.90\d \| 0\.50\d \| 0\.9\d, 0\.9\d \|")


if __name__ == "__main__":
    unittest.main()
