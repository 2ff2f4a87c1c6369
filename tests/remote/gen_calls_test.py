"""remote/gen_calls.py's cache flags on small lists: cached=GROUP(PARAM) and drops=GROUP(PARAM)
generate the per-handle tables and calls, and every bad use is refused with a message naming
the line and what to write; answered= hooks see every answer before its outputs are read.

  python3 gen_calls_test.py PATH/TO/remote/gen_calls.py
"""

import os
import subprocess
import sys
import tempfile
import unittest

GEN = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..", "remote", "gen_calls.py")

GET = "forward cuFuncGetAttribute(int* pi: out, CUfunction_attribute attrib, CUfunction hfunc) cached=attributes(hfunc)"
OCC = ("forward cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks: out, CUfunction func, int blockSize, "
       "size_t dynamicSMemSize) cached=attributes(func)")
SET = "forward cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) drops=attributes(hfunc)"
LIMIT = "forward cuCtxGetLimit(size_t* pvalue: out, CUlimit limit) cached=limits"
SET_LIMIT = "forward cuCtxSetLimit(CUlimit limit, size_t value) drops=limits,attributes"
UNLOAD = "forward cuModuleUnload(CUmodule hmod) drops=attributes"


def generate(lines):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "calls.def")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        p = subprocess.run([sys.executable, GEN, "--calls", path, "--out", os.path.join(d, "out")],
                           capture_output=True, text=True)
        files = {}
        if p.returncode == 0:
            for name in ("calls.h", "client_calls.h", "client_calls.inc"):
                with open(os.path.join(d, "out", name)) as f:
                    files[name] = f.read()
        return p.returncode, p.stderr, files


class CacheFlags(unittest.TestCase):
    def test_per_handle_tables_and_calls(self):
        code, err, files = generate([GET, OCC, SET, LIMIT, SET_LIMIT, UNLOAD])
        self.assertEqual(code, 0, err)
        h = files["calls.h"]
        # attributes is group 0 (bit 0x1), limits group 1 (0x2).
        drops = h[h.index("kOpDrops[kOpCount]"):h.index("kOpDropsByHandle")]
        by_handle = h[h.index("kOpDropsByHandle[kOpCount]"):]
        self.assertIn("0x1,  // cuFuncSetAttribute", by_handle)
        self.assertIn("0x0,  // cuCtxSetLimit", by_handle)
        self.assertIn("0x0,  // cuFuncSetAttribute", drops)
        self.assertIn("0x3,  // cuCtxSetLimit", drops)
        self.assertIn("0x1,  // cuModuleUnload", drops)
        c = files["client_calls.inc"]
        for fn, param in (("cuFuncGetAttribute", "hfunc"), ("cuOccupancyMaxActiveBlocksPerMultiprocessor", "func"),
                          ("cuFuncSetAttribute", "hfunc")):
            body = c[c.index(f"gslice_remote_call_{fn}("):]
            body = body[:body.index("\n}\n")]
            self.assertIn(f"call.set_cache_handle(::gslice::remote::HandleBits({param}));", body)
        body = c[c.index("gslice_remote_call_cuCtxGetLimit("):]
        self.assertNotIn("set_cache_handle", body[:body.index("\n}\n")])

    def test_bad_uses_are_refused_with_the_line_and_what_to_write(self):
        cases = [
            # A group dropped per handle whose cached calls do not all name their handle.
            ([GET, OCC.replace("cached=attributes(func)", "cached=attributes"), SET],
             "cuOccupancyMaxActiveBlocksPerMultiprocessor is cached=attributes without naming its handle: "
             "write cached=attributes(PARAM)"),
            # A group whose calls name a handle only in part.
            ([GET, OCC.replace("cached=attributes(func)", "cached=attributes")],
             "cuFuncGetAttribute is cached=attributes(hfunc), but cuOccupancyMaxActiveBlocksPerMultiprocessor is "
             "cached=attributes without naming its handle"),
            ([GET.replace("(hfunc)", "(pi)"), SET], "calls.def:1: cached=GROUP(pi): cuFuncGetAttribute has no value parameter pi"),
            ([GET, SET.replace("attributes(hfunc)", "attributes(nope)")],
             "calls.def:2: drops=GROUP(nope): cuFuncSetAttribute has no value parameter nope"),
            ([GET, SET.replace("attributes(hfunc)", "attributes(hfunc),attributes")], "calls.def:2: drops= names attributes twice"),
            ([GET, LIMIT, SET.replace("attributes(hfunc)", "attributes(hfunc),limits(attrib)")],
             "calls.def:3: drops= names two handles (hfunc, attrib)"),
            ([GET.replace("attributes(hfunc)", "attributes(hfunc"), SET], "calls.def:1: bad flag 'cached=attributes(hfunc'"),
            ([GET, SET.replace("attributes(hfunc)", "nothing(hfunc)")], "drops=nothing, which no call is cached by"),
        ]
        for lines, message in cases:
            with self.subTest(message=message):
                code, err, _ = generate(lines)
                self.assertNotEqual(code, 0)
                self.assertIn(message, err)


class AnsweredHooks(unittest.TestCase):
    QUERY = ("forward cuPointerGetAttribute(void* data: out[8], CUpointer_attribute attribute, CUdeviceptr ptr) "
             "answered=KeepAnswer")

    def test_the_hook_sees_every_answer_before_the_outputs_are_read(self):
        code, err, files = generate([self.QUERY])
        self.assertEqual(code, 0, err)
        c = files["client_calls.inc"]
        body = c[c.index("gslice_remote_call_cuPointerGetAttribute("):]
        body = body[:body.index("\n}\n")]
        hook = "::gslice::remote::KeepAnswer(call, res, data, attribute, ptr);"
        self.assertIn(hook, body)
        # Right after the call, before a failure returns and before the outputs are read.
        self.assertLess(body.index("call.Run();"), body.index(hook))
        self.assertLess(body.index(hook), body.index("if (res != CUDA_SUCCESS) return res;"))

    def test_bad_uses_are_refused(self):
        cases = [
            (["local cuCtxGetCurrent(CUcontext* pctx) answered=KeepAnswer"], "answered= is for forwarded calls"),
            (["forward cuEventRecord(CUevent hEvent, CUstream hStream) async answered=KeepAnswer"],
             "answered= is for forwarded calls that are waited for (not async)"),
            ([self.QUERY.replace("answered=KeepAnswer", "answered=")], "unknown flag 'answered='"),
        ]
        for lines, message in cases:
            with self.subTest(message=message):
                code, err, _ = generate(lines)
                self.assertNotEqual(code, 0)
                self.assertIn(message, err)


class Declarations(unittest.TestCase):
    def test_every_call_is_declared_once_in_the_generated_header(self):
        local = "local cuCtxGetCurrent(CUcontext* pctx)"
        code, err, files = generate([GET, local])
        self.assertEqual(code, 0, err)
        h = files["client_calls.h"]
        # Forwarded and hand-written alike, with the list's signature.
        self.assertIn("CUresult gslice_remote_call_cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, "
                      "CUfunction hfunc);", h)
        self.assertIn("CUresult gslice_remote_call_cuCtxGetCurrent(CUcontext* pctx);", h)
        # The generated code takes its declarations from the header, not copies of its own.
        c = files["client_calls.inc"]
        self.assertIn('#include "client_calls.h"', c)
        self.assertNotIn("gslice_remote_call_cuCtxGetCurrent(CUcontext* pctx);", c)


if __name__ == "__main__":
    unittest.main()
