"""The report scripts of bench/gpu/compute as modules, for their tests. The folder is the test's
first argument (ctest passes it; taken off sys.argv on import, before unittest reads it), or is
found from this file's place."""

import contextlib
import importlib.util
import io
import os
import sys

HERE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..", "bench", "gpu", "compute")


def load(name):
    """bench/gpu/compute/NAME.py, loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_main(mod, argv):
    """mod.main(argv) as its command line runs it: (its status, what it printed, what it wrote to
    standard error)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = mod.main(argv)
    return status, out.getvalue(), err.getvalue()
