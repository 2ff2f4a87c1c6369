"""A guaranteed process's per-period readings (bench/gpu/compute/readings_report.py) from
made-up log lines, in the trace's current form and in the forms before samples on a dry stream
and samples alone far over their baseline were counted. No GPU and no torch.

  python3 readings_report_test.py PATH/TO/bench/gpu/compute
"""

import os
import tempfile
import unittest

from report_scripts import load, run_main

R = load("readings_report")


def line(value, by="kernels' times", why=None, dry=None, beside_pct=90, bound=None, fresh=True, slow=None,
         waited="12.5", alone_ms=20, alone_pct=92, beside_ms=230, rate=None):
    wants = (f"; wants time alone: {why}" if why.startswith("to renew") else f"; wants a baseline: {why}") if why else ""
    left = f", {dry} samples on a dry stream left out" if dry is not None else ""
    left += f", {slow} alone over 3x their baseline" if slow is not None else ""
    tail = f", kernels' times at least {bound:.3f}" if bound is not None else ("" if fresh else ", no fresh rate alone")
    tail += f", launch rate {rate:.3f}" if rate is not None else ""
    return (f"gslice[7]: compute: beside opportunistic work at least {value:.3f} of its speed alone, by its {by}{wants} "
            f"(150 kernels timed alone{left}; " + (f"the host waited {waited} ms" if waited else "the host made no waiting call")
            + f"; launches: {alone_ms} ms alone in {alone_pct}% of passes, {beside_ms} ms beside in {beside_pct}%{tail})\n")


class ReadingsReport(unittest.TestCase):
    def test_every_field_is_read_in_both_forms_of_the_line(self):
        periods = R.parse([
            "gslice[7]: compute: launches are counted and some timed\n",
            line(0.950, by="launches", beside_pct=88, bound=0.97),
            line(1.2, why="kernels faster than alone", dry=4, beside_pct=70),
            line(0, why="too few samples alone", fresh=False),
        ])
        self.assertEqual(len(periods), 3)
        self.assertEqual(periods[0], {"value": 0.95, "by_launches": True, "by_waits": False, "why": None, "dry": None,
                                      "slow_alone": None, "beside_pct": 88, "bound": 0.97, "launch_rate": None,
                                      "waited_ms": 12.5,
                                      "alone_ms": 20, "alone_pct": 92, "beside_ms": 230})
        self.assertEqual(periods[1]["why"], "kernels faster than alone")
        self.assertEqual(periods[1]["dry"], 4)
        self.assertFalse(periods[1]["by_launches"])
        self.assertIsNone(periods[1]["bound"])
        self.assertEqual(periods[2]["value"], 0)
        # The newest form counts the samples alone far over their kernel's baseline.
        newest = R.parse([line(0.91, dry=3, slow=2), line(0.93, dry=1, slow=0)])
        self.assertEqual([p["slow_alone"] for p in newest], [2, 0])
        self.assertEqual(newest[0]["dry"], 3)
        self.assertEqual(R.summarize(newest)["slow_alone"], {"samples": 2, "periods": 1})
        self.assertIn("alone, over 3x their kernel's baseline: 2 samples in 1 periods",
                      R.report("g.log", R.summarize(newest)))
        # And the launch rate of a job busy alone and beside, after the bound or a stale rate.
        rated = R.parse([line(0.85, by="host's waits", bound=0.97, rate=0.842, why="to renew its references"),
                         line(0.9, fresh=False, rate=0.88), line(0.9)])
        self.assertEqual([p["launch_rate"] for p in rated], [0.842, 0.88, None])
        self.assertEqual(rated[0]["why"], "to renew its references")
        self.assertEqual(rated[0]["bound"], 0.97)
        self.assertIn("launch rate (traced where not the reading): 2 periods, mean 0.861",
                      R.report("g.log", R.summarize(rated)))

    def test_the_summary_splits_launch_readings_at_the_saturated_share(self):
        lines = [line(1.05, by="launches", beside_pct=70, bound=0.89),
                 line(1.03, by="launches", beside_pct=84, bound=0.91),
                 line(0.99, by="launches", beside_pct=R.SATURATED_PERCENT, bound=0.98),
                 line(0.90, why="few kernels have one", dry=2),
                 line(0, why="few kernels have one", dry=6)]
        s = R.summarize(R.parse(lines))
        self.assertEqual(s["periods"], 5)
        self.assertEqual(s["published"]["n"], 4, "a period with no reading is not a reading")
        self.assertAlmostEqual(s["published"]["mean"], (1.05 + 1.03 + 0.99 + 0.90) / 4)
        self.assertEqual(s["by_launches"]["n"], 3)
        self.assertEqual(s["by_launches_unsaturated"]["n"], 2)
        self.assertAlmostEqual(s["their_bound_unsaturated"]["mean"], 0.90)
        self.assertEqual(s["wanted_baseline"], {"few kernels have one": 2})
        self.assertAlmostEqual(s["dry_per_period"], 4.0)
        self.assertEqual(s["published"]["p50"], 1.03)

    def test_the_waits_give_the_speed_of_a_job_whose_host_keeps_busy(self):
        periods = R.parse([
            # alone (a pause): 10% of its time waiting; one starting up (40% of passes) left out
            line(0, why="stale", waited="20.0", alone_ms=200, alone_pct=90, beside_ms=0),
            line(0, waited="100.0", alone_ms=200, alone_pct=40, beside_ms=50),
            # wholly beside: 25% and 35% waiting; one with no waiting call left out
            line(0.95, waited="62.5", alone_ms=0, beside_ms=250),
            line(1.10, waited="87.5", alone_ms=0, beside_ms=250),
            line(1.00, waited=None, alone_ms=0, beside_ms=250),
            line(0.722, by="host's waits", waited="75.0", alone_ms=0, beside_ms=250, bound=1.1),
        ])
        self.assertTrue(periods[5]["by_waits"])
        self.assertFalse(periods[5]["by_launches"])
        self.assertIsNone(periods[4]["waited_ms"])
        w = R.by_waits(periods)
        self.assertEqual((w["beside_periods"], w["alone_periods"]), (3, 1))
        self.assertAlmostEqual(w["beside"], 0.30)
        self.assertAlmostEqual(w["alone"], 0.10)
        self.assertAlmostEqual(w["speed"], 0.70 / 0.90)
        text = R.report("g.log", R.summarize(periods))
        self.assertIn("by its waits 0.778", text)
        self.assertIn("by its host's waits: 1 periods, mean 0.722", text)
        self.assertIsNone(R.by_waits(periods[2:]), "no period alone: no speed by waits")

    def test_a_log_with_no_readings_says_so(self):
        s = R.summarize(R.parse(["gslice[7]: compute: launches pass untouched\n"]))
        text = R.report("g.log", s)
        self.assertIn("g.log: 0 periods traced", text)
        self.assertIn("published:          none", text)
        self.assertIn("wanted a baseline:  never", text)
        self.assertIn("left out on a dry stream: not traced", text)
        self.assertIn("alone, over 3x their kernel's baseline: not traced", text)

    def test_the_command_reads_files_and_reports_one_it_cannot_open(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "G0.97.log")
            with open(path, "w", encoding="utf-8") as f:
                f.write(line(0.97, dry=3) + line(1.01, dry=5))
            status, out, err = run_main(R, [path, os.path.join(d, "missing.log")])
            self.assertEqual(status, 1)
            self.assertIn("G0.97.log: 2 periods traced", out)
            self.assertIn("mean 0.990", out)
            self.assertIn("4.0 samples a period", out)
            self.assertIn("missing.log", err)
        self.assertEqual(run_main(R, [])[0], 2, "no log: usage, and a failing status")


if __name__ == "__main__":
    unittest.main()
