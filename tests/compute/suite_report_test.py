"""The compute suite's arithmetic for processes taking turns (case 5), on made-up step times:
the rotated order, each configuration's per-round ratio to native, the ratio of mean step
times, and the RESULT line's verdict. No GPU and no torch: suite.py imports neither.

  python3 suite_report_test.py PATH/TO/bench/gpu/compute/suite.py
"""

import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import textwrap
import unittest

SUITE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..", "bench", "gpu", "compute", "suite.py")


def load_suite(cases="5", layers=False, learn_s=0):
    os.environ["COMPUTE_CASES"] = cases
    os.environ["COMPUTE_OVERHEAD_LAYERS"] = "1" if layers else "0"
    os.environ["COMPUTE_LEARN_S"] = str(learn_s)
    spec = importlib.util.spec_from_file_location("suite", SUITE)
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    return suite


def turns_state(suite, step_s, rounds, phase_s=3.0, slow_rounds=()):
    """A case-5 state: each process steps at step_s[ident] seconds per step in its turns; in
    slow_rounds the whole host runs at half speed (every process alike)."""
    phases = suite.interleaved([[i] for i, _ in suite.OVERHEAD_CONFIGS], rounds=rounds, rotate=True)
    n = len(suite.OVERHEAD_CONFIGS)
    state = {"phases": [[100 + k * phase_s, 100 + (k + 1) * phase_s, ids] for k, ids in enumerate(phases)]}
    for ident, _ in suite.OVERHEAD_CONFIGS:
        ends = []
        for k, (a, b, who) in enumerate(state["phases"]):
            if who != [ident]:
                continue
            dt = step_s[ident] * (2 if k // n in slow_rounds else 1)
            t = a + 0.01
            while t < b:
                ends.append(t)
                t += dt
        state[ident] = {"step_ends": ends}
    return {"overhead": state}


class TurnsTest(unittest.TestCase):
    def test_rotation_gives_each_configuration_every_place(self):
        suite = load_suite(layers=True)
        ids = [i for i, _ in suite.OVERHEAD_CONFIGS]
        phases = suite.interleaved([[i] for i in ids], rounds=len(ids), rotate=True)
        rounds = [[p[0] for p in phases[r * len(ids):(r + 1) * len(ids)]] for r in range(len(ids))]
        for r in rounds:
            self.assertEqual(sorted(r), sorted(ids))  # every configuration once a round
        for place in range(len(ids)):
            self.assertEqual(sorted(r[place] for r in rounds), sorted(ids))  # and in every place once
        self.assertEqual(suite.interleaved([["a"], ["b"]], rounds=2), [["a"], ["b"], ["a"], ["b"]])

    def test_ratios_follow_the_step_times_and_ignore_the_hosts_drift(self):
        suite = load_suite()
        # gslice 2% slower per step than native; the host runs at half speed in rounds 3 and 7.
        state = turns_state(suite, {"n": 0.020, "g": 0.0204}, rounds=10, slow_rounds=(3, 7))
        ratios = suite.round_ratios(state, "overhead", "g", "n")
        self.assertEqual(len(ratios), 10)
        for r in ratios:
            self.assertAlmostEqual(r, 0.020 / 0.0204, delta=0.002)
        by_mean = suite.phase_steps(state, "overhead", "g", ["g"]) / suite.phase_steps(state, "overhead", "n", ["n"])
        self.assertAlmostEqual(by_mean, 0.020 / 0.0204, delta=0.002)
        q = suite.quartiles(ratios)
        self.assertLessEqual(q[0], q[1])
        self.assertLessEqual(q[1], q[2])

    def test_verdict_is_the_median_against_099(self):
        for step_g, verdict in ((0.0201, "PASS"), (0.0210, "FAIL")):
            suite = load_suite()
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                suite.report(turns_state(suite, {"n": 0.020, "g": step_g}, rounds=6), None)
            line = [l for l in out.getvalue().splitlines() if l.startswith("RESULT compute.overhead ")]
            self.assertEqual(len(line), 1, out.getvalue())
            self.assertIn(f" {verdict} ", line[0])

    def test_a_missing_run_reports_no_figure(self):
        suite = load_suite()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            suite.report({"overhead": {"error": "n exited 1"}}, None)
        self.assertIn("RESULT compute.overhead FAIL", out.getvalue())
        self.assertEqual(suite.round_ratios({}, "overhead", "g", "n"), [])


def together_state(suite, speeds, phase_s=4.0):
    """A case-3 configuration in TOGETHER phases: speeds[k] = (g's, o's steps per second) in
    phase k (0: no step)."""
    pattern = suite.interleaved(suite.TOGETHER, rounds=len(speeds) // len(suite.TOGETHER))
    state = {"phases": [[100 + k * phase_s, 100 + (k + 1) * phase_s, ids] for k, ids in enumerate(pattern)]}
    for j, ident in enumerate(("g", "o")):
        ends = []
        for (a, b, _), speed in zip(state["phases"], speeds):
            if speed[j]:
                ends += [a + suite.SETTLE_S + 0.01 + i / speed[j] for i in range(int((b - a - suite.SETTLE_S - 0.02) * speed[j]) + 1)]
        state[ident] = {"step_ends": ends}
    return state


class HeldBackTest(unittest.TestCase):
    def test_only_together_phases_with_the_partner_held_back_count_against_the_alone_phase_before(self):
        suite = load_suite(cases="3")
        # g alone, together, o alone, together; twice. o alone at 20/s. Held back (<= 15%: 3/s)
        # in phases 1 and 5 (g 34 after 40: 0.85, and 36 after 30: 1.2); at full speed beside
        # g in phases 3 and 7, which do not count.
        speeds = [(40, 0), (34, 2), (0, 20), (30, 18), (30, 0), (36, 0), (0, 20), (25, 19)]
        state = {"train/gslice-mps": together_state(suite, speeds)}
        ratios = suite.held_back_ratios(state, "train/gslice-mps")
        self.assertEqual(len(ratios), 2, ratios)
        self.assertAlmostEqual(ratios[0], 34 / 40, places=2)
        self.assertAlmostEqual(ratios[1], 36 / 30, places=2)
        # A partner just over the line (4/s of 20) does not count.
        speeds[1] = (34, 4)
        self.assertEqual(len(suite.held_back_ratios({"train/gslice-mps": together_state(suite, speeds)}, "train/gslice-mps")), 1)
        self.assertIsNone(suite.held_back_ratios({}, "train/gslice-mps"))

    def test_the_report_gives_the_median_as_an_info_line(self):
        suite = load_suite(cases="3")
        speeds = [(40, 0), (34, 2), (0, 20), (30, 18)] * 2
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            suite.report({"train/gslice-mps": together_state(suite, speeds)}, None)
        line = [l for l in out.getvalue().splitlines() if l.startswith("RESULT compute.train.held_back.gslice-mps ")]
        self.assertEqual(len(line), 1, out.getvalue())
        self.assertIn(" INFO ", line[0])
        self.assertIn("median 0.850 over 2 phases", line[0])


# A stand-in for job.py: says it is ready, waits for the go file, and reports the schedule it
# was given and the times it was told to work in.
FAKE_JOB = textwrap.dedent("""
    import json, os, sys, time
    ident, sync = sys.argv[1], sys.argv[sys.argv.index("--sync") + 1]
    # Written whole, then renamed, as job.py does: the suite may look at any moment.
    open(os.path.join(sync, "." + ident + ".ready"), "w").write(json.dumps({"pid": os.getpid()}))
    os.rename(os.path.join(sync, "." + ident + ".ready"), os.path.join(sync, ident + ".ready"))
    while not os.path.exists(os.path.join(sync, "go")):
        time.sleep(0.01)
    go = json.load(open(os.path.join(sync, "go")))
    mine = [[a, b] for a, b, ids in go["phases"] if ident in ids]
    json.dump({"go": go, "mine": mine}, open(os.path.join(sync, ident + ".json"), "w"))
""")


class LearnTest(unittest.TestCase):
    def run_fake(self, suite, name, phases):
        with tempfile.TemporaryDirectory() as d:
            job = os.path.join(d, "job.py")
            with open(job, "w") as f:
                f.write(FAKE_JOB)
            procs = [(i, [sys.executable, job, i], {}) for i in ("g", "o")]
            with contextlib.redirect_stdout(io.StringIO()):
                return suite.run_config(name, procs, phases=phases, phase_s=0.5)

    def test_both_work_together_unmeasured_before_the_phases_of_cases_3_and_4(self):
        suite = load_suite(cases="3", learn_s=2)
        phases = suite.interleaved(suite.TOGETHER, rounds=1)
        r = self.run_fake(suite, "train/gslice-mps", phases)
        self.assertNotIn("error", r, r)
        go = r["g"]["go"]["phases"]
        self.assertEqual(len(go), 1 + len(phases))
        start, end, ids = go[0]
        self.assertEqual(sorted(ids), ["g", "o"])  # both work in it
        self.assertAlmostEqual(end - start, 2.0, places=6)
        self.assertEqual(r["learn"], [start, end])
        # The measured phases are the ones asked for, after it, and nothing else.
        self.assertEqual(r["phases"], go[1:])
        self.assertEqual([p[2] for p in r["phases"]], phases)
        self.assertAlmostEqual(r["phases"][0][0], end, places=6)
        self.assertAlmostEqual(r["phases"][-1][1] - r["phases"][0][0], 0.5 * len(phases), places=6)
        # The partner works in it too: o's first stretch of work is the learning phase.
        self.assertEqual(r["o"]["mine"][0], [start, end])
        # So the report's phase arithmetic never sees it.
        self.assertEqual(len(suite.phase_counts(dict({"train/gslice-mps": dict(r, g=dict(r["g"], step_ends=[]))}),
                                                "train/gslice-mps", "g")), len(phases))

    def test_other_cases_and_no_setting_get_no_learning_phase(self):
        suite = load_suite(cases="5", learn_s=2)
        r = self.run_fake(suite, "overhead", [["g"], ["o"]])
        self.assertNotIn("learn", r)
        self.assertEqual([p[2] for p in r["phases"]], [["g"], ["o"]])
        self.assertEqual(r["g"]["go"]["phases"], r["phases"])
        suite = load_suite(cases="3")
        r = self.run_fake(suite, "train/gslice-mps", [["g"], ["g", "o"]])
        self.assertNotIn("learn", r)
        self.assertEqual(r["g"]["go"]["phases"], r["phases"])


if __name__ == "__main__":
    unittest.main()
