"""The compute suite's arithmetic for processes taking turns (case 5), on made-up step times:
the rotated order, each configuration's per-round ratio to native, the ratio of mean step
times, and the RESULT line's verdict. No GPU and no torch: suite.py imports neither.

  python3 suite_report_test.py PATH/TO/bench/gpu/compute/suite.py
"""

import contextlib
import importlib.util
import io
import os
import sys
import unittest

SUITE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..", "bench", "gpu", "compute", "suite.py")


def load_suite(cases="5", layers=False):
    os.environ["COMPUTE_CASES"] = cases
    os.environ["COMPUTE_OVERHEAD_LAYERS"] = "1" if layers else "0"
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


if __name__ == "__main__":
    unittest.main()
