#!/usr/bin/env python3
"""Generates the forwarding code of gslice's remote GPUs from remote/calls.def.

One list, both sides: for every `forward` call the client's function (encode the arguments,
one round trip, decode what the driver wrote) and the worker's handler (decode, check every
length against its expression, call the driver, encode what it wrote); for every call an
opcode, and the hash of the list that the handshake compares. `local` and `custom` calls get
declarations only (hand-written in remote/client and remote/server).

Outputs (--out DIR):
  calls.h             opcodes, names, kinds, the list's hash (both sides)
  hooks.def           GSLICE_HOOK(symbol) for every call (interpose/gen_exports.py's input)
  client_calls.inc    the client's functions gslice_remote_call_<symbol> and kClientCalls
  server_calls.inc    the worker's handlers Serve_<symbol> and kHandlers
"""
import argparse
import hashlib
import os
import re
import sys

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LINE = re.compile(r"^(forward|local|custom)\s+(\w+)\((.*)\)\s*(.*)$")


class Param:
    def __init__(self, decl, sem):
        decl = decl.strip()
        m = re.match(r"^(.*?)(\w+)$", decl)
        if not m or not m.group(1).strip():
            raise ValueError(f"not a declaration: {decl!r}")
        self.type = m.group(1).strip()
        self.name = m.group(2)
        self.sem = "value"
        self.expr = None
        sem = (sem or "").strip()
        if not sem:
            return
        m = re.match(r"^(in|out)\[(.+)\]$", sem)
        if m:
            self.sem = m.group(1) + "buf"
            self.expr = m.group(2)
        elif sem in ("out", "inout", "cstr", "image", "nullonly"):
            self.sem = sem
        elif re.match(r"^const\((.+)\)$", sem):
            self.sem = "const"
            self.expr = re.match(r"^const\((.+)\)$", sem).group(1)
        else:
            raise ValueError(f"unknown semantic {sem!r} for {self.name}")
        if self.sem in ("out", "inout"):
            if not self.type.endswith("*"):
                raise ValueError(f"{self.name}: out/inout needs a pointer type")
            self.pointee = self.type[:-1].strip()
            if self.pointee.startswith("const "):
                raise ValueError(f"{self.name}: out of a const pointer")


def split_top(s, sep):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


class CallSpec:
    def __init__(self, kind, name, params, flags):
        self.kind, self.name, self.params = kind, name, params
        self.after = flags.get("after")
        self.sync = flags.get("sync")
        self.is_async = "async" in flags
        self.split = None
        if flags.get("split"):
            host, dev = flags["split"].split(":")
            names = {p.name: p for p in params}
            hp = names.get(host)
            if hp is None or dev not in names or hp.sem not in ("inbuf", "outbuf") or hp.expr not in names:
                raise ValueError("split=HOST:DEVICE names a buffer sized by a parameter, and a device pointer")
            self.split = (hp, names[dev], names[hp.expr])
        self.collect = "collect" in flags
        self.cached = "cached" in flags


def parse(path):
    calls = []
    canonical = []
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.split("#")[0].strip()
            if not line:
                continue
            m = LINE.match(line)
            if not m:
                sys.exit(f"{path}:{lineno}: expected KIND SYMBOL(PARAMS) [flags]")
            kind, name, plist, rest = m.groups()
            params = []
            try:
                for p in split_top(plist, ","):
                    decl_sem = split_top(p, ":")
                    if len(decl_sem) > 2:
                        raise ValueError(f"too many ':' in {p!r}")
                    params.append(Param(decl_sem[0], decl_sem[1] if len(decl_sem) == 2 else None))
            except ValueError as e:
                sys.exit(f"{path}:{lineno}: {e}")
            flags = {}
            for tok in rest.split():
                k, eq, v = tok.partition("=")
                if tok in ("async", "collect", "cached"):
                    flags[tok] = True
                elif k == "split" and re.match(r"^\w+:\w+$", v):
                    flags[k] = v
                elif k not in ("after", "sync") or not eq or not IDENT.match(v):
                    sys.exit(f"{path}:{lineno}: unknown flag {tok!r}")
                else:
                    flags[k] = v
            if flags.get("cached") and (kind != "forward" or any(p.sem not in ("value", "out", "outbuf") for p in params)):
                sys.exit(f"{path}:{lineno}: a cached call is forwarded and takes values only")
            if flags.get("async") and (kind == "local" or any(p.sem in ("out", "inout", "outbuf") for p in params)):
                sys.exit(f"{path}:{lineno}: an async call has no outputs but its result and is not local")
            if flags.get("sync") and flags["sync"] not in [p.name for p in params]:
                sys.exit(f"{path}:{lineno}: sync= names no parameter")
            if any(c.name == name for c in calls):
                sys.exit(f"{path}:{lineno}: {name} listed twice")
            try:
                calls.append(CallSpec(kind, name, params, flags))
            except ValueError as e:
                sys.exit(f"{path}:{lineno}: {e}")
            canonical.append(" ".join(line.split()))
    digest = hashlib.sha256("\n".join(canonical).encode()).digest()
    return calls, int.from_bytes(digest[:8], "little")


def sig(c):
    return ", ".join(f"{p.type} {p.name}" for p in c.params)


def gen_header(calls, h):
    out = [
        "// Generated by remote/gen_calls.py from remote/calls.def. Do not edit.",
        "#pragma once",
        "",
        "#include <cstdint>",
        "",
        "namespace gslice::remote {",
        "",
        "enum Op : uint32_t {",
    ]
    out += [f"  kOp_{c.name} = {i}," for i, c in enumerate(calls)]
    out += ["  kOpCount", "};", "",
            "enum class CallKind : uint8_t { kForward, kLocal, kCustom };", "",
            f"// The hash of calls.def that both sides compare in the handshake.",
            f"inline constexpr uint64_t kCallsHash = 0x{h:016x}ull;", "",
            "inline constexpr const char* kOpNames[kOpCount] = {"]
    out += [f'    "{c.name}",' for c in calls]
    out += ["};", "", "inline constexpr CallKind kOpKinds[kOpCount] = {"]
    kinds = {"forward": "kForward", "local": "kLocal", "custom": "kCustom"}
    out += [f"    CallKind::{kinds[c.kind]},  // {c.name}" for c in calls]
    out += ["};", "", "// Calls the client sends without waiting (calls.def: async).",
            "inline constexpr bool kOpAsync[kOpCount] = {"]
    out += [f"    {'true' if c.is_async else 'false'},  // {c.name}" for c in calls]
    out += ["};", "", "// Calls whose successful answer the client keeps per argument values (calls.def: cached).",
            "inline constexpr bool kOpCached[kOpCount] = {"]
    out += [f"    {'true' if c.cached else 'false'},  // {c.name}" for c in calls]
    out += ["};", "", "// Synchronisations that report the errors of earlier async calls (calls.def: collect).",
            "inline constexpr bool kOpCollects[kOpCount] = {"]
    out += [f"    {'true' if c.collect else 'false'},  // {c.name}" for c in calls]
    out += ["};", "", "}  // namespace gslice::remote", ""]
    return "\n".join(out)


def gen_client(calls):
    out = ["// Generated by remote/gen_calls.py from remote/calls.def. Do not edit.",
           "// Included by remote/client/forwarding.cc, inside no namespace.", ""]
    for c in calls:
        if c.kind != "forward":
            out.append(f'extern "C" CUresult gslice_remote_call_{c.name}({sig(c)});')
    out.append("")
    for c in calls:
        if c.kind != "forward":
            continue
        out.append(f'extern "C" CUresult gslice_remote_call_{c.name}({sig(c)}) {{')
        for p in c.params:
            if p.sem == "nullonly":
                out.append(f'  if ({p.name} != nullptr) return ::gslice::remote::RefuseArgument("{c.name}", "{p.name}");')
        if c.split:
            host, dev, size = c.split
            char = "const char*" if host.type.startswith("const") else "char*"
            args = []
            for p in c.params:
                if p is host:
                    args.append(f"static_cast<{char}>({p.name}) + done")
                elif p is dev:
                    args.append(f"{p.name} + done")
                elif p is size:
                    args.append("piece")
                else:
                    args.append(p.name)
            out.append(f"  if ((uint64_t)({size.name}) > ::gslice::remote::kSplitBytes && {host.name} != nullptr) {{")
            out.append("    // A large copy: in pieces, in order.")
            out.append(f"    for (uint64_t done = 0; done < (uint64_t)({size.name});) {{")
            out.append(f"      const {size.type} piece = static_cast<{size.type}>(std::min<uint64_t>(::gslice::remote::kSplitBytes, {size.name} - done));")
            out.append(f"      const CUresult piece_result = gslice_remote_call_{c.name}({', '.join(args)});")
            out.append("      if (piece_result != CUDA_SUCCESS) return piece_result;")
            out.append("      done += piece;")
            out.append("    }")
            out.append("    return CUDA_SUCCESS;")
            out.append("  }")
        out.append(f"  ::gslice::remote::Call call(::gslice::remote::kOp_{c.name});")
        out.append("  ::gslice::remote::Writer& w = call.request();")
        out.append("  (void)w;")
        for p in c.params:
            n = p.name
            if p.sem == "value":
                out.append(f"  w.Put({n});")
            elif p.sem == "out":
                out.append(f"  w.Put<uint8_t>({n} != nullptr);")
            elif p.sem == "inout":
                out.append(f"  w.Put<uint8_t>({n} != nullptr);")
                out.append(f"  if ({n} != nullptr) w.Put(*{n});")
            elif p.sem in ("inbuf", "outbuf", "image"):
                size = f"(uint64_t)({p.expr})" if p.sem != "image" else f"::gslice::remote::ImageSize({n}_bytes)"
                if p.sem == "image":
                    # A fatbin wrapper is shipped as the fatbin it points at.
                    out.append(f"  const void* {n}_bytes = {n} != nullptr ? ::gslice::remote::ImageBytes({n}) : nullptr;")
                else:
                    out.append(f"  const void* {n}_bytes = {n};")
                out.append(f"  const uint64_t {n}_len = {n}_bytes != nullptr ? {size} : 0;")
                if p.sem == "image":
                    out.append(f'  if ({n} != nullptr && {n}_len == 0) return ::gslice::remote::RefuseImage("{c.name}");')
                out.append(f'  if ({n}_len > ::gslice::remote::kMaxBuffer) return ::gslice::remote::RefuseSize("{c.name}", "{n}", {n}_len);')
                out.append(f"  w.Put<uint8_t>({n} != nullptr);")
                out.append(f"  w.Put<uint64_t>({n}_len);")
                if p.sem != "outbuf":
                    out.append("  w.PadTo(16);")
                    out.append(f"  w.PutBytes({n}_bytes, {n}_len);")
            elif p.sem == "cstr":
                out.append(f"  const uint64_t {n}_len = {n} != nullptr ? strnlen({n}, ::gslice::remote::kMaxString + 1) : 0;")
                out.append(f'  if ({n}_len > ::gslice::remote::kMaxString) return ::gslice::remote::RefuseSize("{c.name}", "{n}", {n}_len);')
                out.append(f"  w.Put<uint8_t>({n} != nullptr);")
                out.append(f"  w.Put<uint64_t>({n}_len);")
                out.append(f"  w.PutBytes({n}, {n}_len);")
            elif p.sem in ("nullonly", "const"):
                pass
        out.append("  const CUresult res = call.Run();")
        out.append("  if (res != CUDA_SUCCESS) return res;")
        out.append("  ::gslice::remote::Reader& r = call.reply();")
        for p in c.params:
            n = p.name
            if p.sem in ("out", "inout"):
                out.append(f"  if ({n} != nullptr && !r.Get({n})) return call.Malformed();")
            elif p.sem == "outbuf":
                out.append(f"  if ({n} != nullptr && !r.GetInto({n}, {n}_len)) return call.Malformed();")
        out.append("  if (!r.AtEnd()) return call.Malformed();")
        if c.after:
            out.append(f"  ::gslice::remote::{c.after}({', '.join(p.name for p in c.params)});")
        out.append("  return res;")
        out.append("}")
        out.append("")
    out.append("namespace gslice::remote {")
    out.append("// Every call of calls.def: its exported symbol and the client's function for it.")
    out.append("inline const ClientCall kClientCalls[kOpCount] = {")
    for c in calls:
        out.append(f'    {{"{c.name}", reinterpret_cast<void*>(&gslice_remote_call_{c.name})}},')
    out.append("};")
    out.append("}  // namespace gslice::remote")
    out.append("")
    return "\n".join(out)


def gen_server(calls):
    out = ["// Generated by remote/gen_calls.py from remote/calls.def. Do not edit.",
           "// Included by remote/server/dispatch.cc inside namespace gslice::remote.", ""]
    for c in calls:
        if c.kind == "custom":
            out.append(f"CUresult Serve_{c.name}(Reader& r, Writer& w);")
    out.append("")
    for c in calls:
        if c.kind != "forward":
            continue
        types = ", ".join(p.type for p in c.params)
        out.append(f"CUresult Serve_{c.name}(Reader& r, Writer& w) {{")
        out.append("  (void)w;")
        out.append(f"  using Fn = CUresult (*)({types});")
        out.append(f"  auto fn = reinterpret_cast<Fn>(g_driver[kOp_{c.name}]);")
        decode = []
        for p in c.params:
            n = p.name
            if p.sem == "value":
                out.append(f"  {p.type} {n}{{}};")
                decode.append(f"r.Get(&{n})")
            elif p.sem in ("out", "inout"):
                out.append(f"  uint8_t {n}_present = 0;")
                out.append(f"  {p.pointee} {n}_value{{}};")
                decode.append(f"r.GetFlag(&{n}_present)")
                if p.sem == "inout":
                    decode.append(f"(!{n}_present || r.Get(&{n}_value))")
            elif p.sem in ("inbuf", "outbuf", "image", "cstr"):
                out.append(f"  uint8_t {n}_present = 0;")
                out.append(f"  uint64_t {n}_len = 0;")
                decode.append(f"r.GetFlag(&{n}_present)")
                decode.append(f"r.Get(&{n}_len)")
                decode.append(f"{n}_len <= {'kMaxString' if p.sem == 'cstr' else 'kMaxBuffer'}")
                decode.append(f"({n}_present || {n}_len == 0)")
                if p.sem != "outbuf":
                    out.append(f"  const uint8_t* {n}_data = nullptr;")
                    if p.sem != "cstr":
                        decode.append("r.SkipTo(16)")
                    decode.append(f"r.GetBytes({n}_len, &{n}_data)")
        decode.append("r.AtEnd()")
        out.append("  if (!(" + " &&\n        ".join(decode) + ")) {")
        out.append("    return kMalformed;")
        out.append("  }")
        # Lengths agree with their expressions over the decoded values.
        for p in c.params:
            if p.sem in ("inbuf", "outbuf"):
                out.append(f"  if ({p.name}_present && {p.name}_len != (uint64_t)({p.expr})) return kMalformed;")
        args = []
        for p in c.params:
            n = p.name
            if p.sem == "value":
                args.append(n)
            elif p.sem in ("out", "inout"):
                args.append(f"{n}_present ? &{n}_value : nullptr")
            elif p.sem == "outbuf":
                out.append(f"  HostBuffer {n}_buf;")
                out.append(f"  if ({n}_present && !{n}_buf.Allocate({n}_len)) return CUDA_ERROR_OUT_OF_MEMORY;")
                args.append(f"{n}_present ? static_cast<{p.type}>(NonNullOut({n}_buf.data())) : nullptr")
            elif p.sem in ("inbuf", "image"):
                args.append(f"{n}_present ? static_cast<{p.type}>(const_cast<void*>(NonNull({n}_data))) : nullptr")
            elif p.sem == "cstr":
                out.append(f"  std::string {n}_text({n}_present ? reinterpret_cast<const char*>({n}_data) : \"\", {n}_len);")
                args.append(f"{n}_present ? {n}_text.c_str() : nullptr")
            elif p.sem == "nullonly":
                args.append("nullptr")
            elif p.sem == "const":
                args.append(p.expr)
        out.append("  if (fn == nullptr) return NotInDriver(kOp_" + c.name + ");")
        out.append(f"  CUresult res = fn({', '.join(args)});")
        if c.sync:
            op = "kOp_cuStreamSynchronize_ptsz" if c.name.endswith("_ptsz") else "kOp_cuStreamSynchronize"
            out.append(f"  if (res == CUDA_SUCCESS) res = SynchronizeStream({op}, {c.sync});")
        out.append("  if (res != CUDA_SUCCESS) return res;")
        for p in c.params:
            n = p.name
            if p.sem in ("out", "inout"):
                out.append(f"  if ({n}_present) w.Put({n}_value);")
            elif p.sem == "outbuf":
                out.append(f"  if ({n}_present) w.PutBytes({n}_buf.data(), {n}_len);")
        out.append("  return res;")
        out.append("}")
        out.append("")
    out.append("// The worker's handler for every opcode (local calls have none).")
    out.append("inline constexpr Handler kHandlers[kOpCount] = {")
    for c in calls:
        out.append(f"    {'nullptr' if c.kind == 'local' else '&Serve_' + c.name},")
    out.append("};")
    out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    calls, h = parse(a.calls)
    names = {c.name for c in calls}
    for c in calls:
        if c.sync and ("cuStreamSynchronize_ptsz" if c.name.endswith("_ptsz") else "cuStreamSynchronize") not in names:
            sys.exit(f"gen_calls: {c.name}: sync= needs cuStreamSynchronize in the list")
    os.makedirs(a.out, exist_ok=True)
    files = {
        "calls.h": gen_header(calls, h),
        "hooks.def": "// Generated by remote/gen_calls.py. Do not edit.\n" +
                     "".join(f"GSLICE_HOOK({c.name})\n" for c in calls),
        "client_calls.inc": gen_client(calls),
        "server_calls.inc": gen_server(calls),
    }
    for name, text in files.items():
        path = os.path.join(a.out, name)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            with open(path, "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
