"""An opportunistic process's looks (bench/gpu/compute/looks_report.py) from made-up log lines.
No GPU and no torch.

  python3 looks_report_test.py PATH/TO/bench/gpu/compute
"""

import os
import tempfile
import unittest

from report_scripts import load, run_main

L = load("looks_report")


def look(beside, alone, floor, rate=1000, mean=None, error=0.05, n=1):
    level = beside / alone / floor
    return (f"gslice[9]: compute: mps: a look: guaranteed job launched {beside} a period beside work at {rate} permille, "
            f"{alone} alone: {level:.3f} of its floor ({mean if mean is not None else level:.3f} +- {error:.3f} "
            f"over {n} looks)\n")


class LooksReport(unittest.TestCase):
    LOG = [
        "gslice[9]: init: slice run-9 attached\n",
        look(8790, 9020, 0.90, rate=487),
        "gslice[9]: compute: mps: guaranteed job above its floor by its looks (1.083): rate 487 -> 608 permille\n",
        look(8000, 9000, 0.90, mean=0.990, n=2),
        look(8400, 9000, 0.90, mean=1.012, n=3),
        look(7600, 8000, 0.80),
        "gslice[9]: compute: mps: guaranteed job at 0.940 of its floor by its looks (at most 0.980): rate 1000 -> 700 permille\n",
        "gslice[9]: compute: mps: guaranteed kernels above their floor (1.05 over 4 periods): rate 700 -> 875 permille\n",
        "gslice[9]: compute: mps: guaranteed job above its floor by its looks (1.135, at least 1.038): rate 500 -> 1000 permille\n",
        "gslice[9]: compute: mps: holding back bought nothing by the looks (0.930 of the floor, 0.940 before the cut): "
        "rate 700 -> 1000 permille, no cut on looks for 8 s\n",
    ]

    def test_looks_are_told_apart_by_floor(self):
        p = L.parse(self.LOG)
        self.assertEqual(len(p["looks"]), 4)
        self.assertEqual(p["cuts"], [(1000, 700)])
        self.assertEqual(p["grows"], [(487, 608), (500, 1000)], "growth by a window's readings is not the looks'")
        self.assertEqual(p["undone"], [(700, 1000)])
        f = L.by_floor(p["looks"])
        self.assertEqual(sorted(f), [0.8, 0.9])
        nine = f[0.9]
        self.assertEqual(nine["looks"], 3)
        self.assertEqual(nine["full"]["n"], 2)
        self.assertAlmostEqual(nine["full"]["mean"], (8000 / 9000 + 8400 / 9000) / 2)
        self.assertEqual(nine["means"], (0.990, 1.012))
        self.assertEqual(len(nine["lower"]), 1)
        self.assertEqual(nine["lower"][0][0], 487)
        self.assertIsNone(f[0.8]["full"]["spread"], "one look has no spread")

    def test_report_states_the_pauses_and_cuts(self):
        text = L.report("O.log", self.LOG)
        self.assertIn("4 looks, 1 cuts (1 undone) and 2 growths by them, 3.00 s of pauses", text)
        self.assertIn("undone 700 -> 1000 permille", text)
        self.assertIn("floor 0.90: 3 looks; at no limit 2 looks", text)
        self.assertIn("lower rates: 487 permille 0.975", text)
        self.assertIn("cut 1000 -> 700 permille", text)

    def test_a_log_without_looks_says_so(self):
        self.assertIn("0 looks", L.report("Ob.log", ["gslice[3]: compute: mps: a guaranteed job wants its own time alone\n"]))

    def test_command_line(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.writelines(self.LOG)
        try:
            status, out, _ = run_main(L, [f.name])
            self.assertEqual(status, 0)
            self.assertIn("floor 0.80", out)
            status, _, err = run_main(L, [f.name + ".missing"])
            self.assertEqual(status, 1)
            self.assertEqual(run_main(L, [])[0], 2)
            self.assertIn("No such file", err)
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
