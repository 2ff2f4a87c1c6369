#!/usr/bin/env python3
"""Generates the forwarding code of gslice's remote GPUs from remote/calls.def.

One list, both sides: for every `forward` call the client's function (encode the arguments,
one round trip, decode what the driver wrote) and the worker's handler (decode, check every
length against its expression, call the driver, encode what it wrote); for every call an
opcode, and the hash of the list that the handshake compares. `local` and `custom` calls get
declarations only (hand-written in remote/client and remote/server); the client's functions of
every call are declared in one generated header that the hand-written ones include.

Each argument semantic of calls.def (value, out, in[EXPR], hostout[EXPR] ...) is one Codec
class: what the client writes and reads for such a parameter and what the worker reads, passes
to the driver and writes back. The generators run the codecs' phases over the parameters.

With --nvml-calls, a second list in the same syntax for the forwarding libnvidia-ml.so.1: its
calls return nvmlReturn_t, share the opcode space and the hash, and are looked up in the
worker's NVML rather than its driver.

Outputs (--out DIR):
  calls.h                 opcodes, names, kinds, libraries, the lists' hash (both sides)
  hooks.def               GSLICE_HOOK(symbol) for every driver call (interpose/gen_exports.py's input)
  nvml_hooks.def          the same for every NVML call
  client_calls.h          the declarations of the client's functions gslice_remote_call_<symbol>
  nvml_client_calls.h     the same for the NVML client
  client_calls.inc        the client's functions of forward calls, and kClientCalls
  nvml_client_calls.inc   the same for the NVML client (kNvmlClientCalls)
  server_calls.inc        the worker's handlers Serve_<symbol> and kHandlers (both lists)
"""
import argparse
import hashlib
import os
import re
import sys

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A cache group, optionally with the parameter that holds the handle its answers are indexed by
# (cached=GROUP(PARAM)) or whose answers are dropped (drops=GROUP(PARAM)).
GROUP = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\(([A-Za-z_][A-Za-z0-9_]*)\))?$")
LINE = re.compile(r"^(forward|local|custom)\s+(?:(const char\*|\w+)\s+)?(\w+)\(")


def match_line(line):
    """KIND, RET, SYMBOL, PARAMS, FLAGS of a line, or None. PARAMS end at the parenthesis that
    closes SYMBOL's (flags such as cached=GROUP(PARAM) hold parentheses too)."""
    m = LINE.match(line)
    if not m:
        return None
    depth = 1
    for i in range(m.end(), len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            return m.groups() + (line[m.end():i], line[i + 1:].strip())
    return None


class Library:
    """What the generated functions of one list return and how they talk to the connection."""

    def __init__(self, name, ret, ok, call, refuse):
        self.name, self.ret, self.ok, self.call, self.refuse = name, ret, ok, call, refuse


CUDA = Library("cuda", "CUresult", "CUDA_SUCCESS", "Call", "Refuse")
NVML = Library("nvml", "nvmlReturn_t", "NVML_SUCCESS", "NvmlCall", "NvmlRefuse")


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
        m = re.match(r"^(in|out|hostin|hostout)\[(.+)\]$", sem)
        if m:
            self.sem = m.group(1) + ("buf" if m.group(1) in ("in", "out") else "")
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
    def __init__(self, kind, name, params, flags, lib, ret):
        self.kind, self.name, self.params, self.lib = kind, name, params, lib
        self.ret = ret or lib.ret
        self.after = flags.get("after")
        self.before = flags.get("before")
        self.answered = flags.get("answered")
        self.sync = flags.get("sync")
        self.is_async = "async" in flags
        self.split = None
        if flags.get("split"):
            host, dev = flags["split"].split(":")
            names = {p.name: p for p in params}
            hp = names.get(host)
            if hp is None or dev not in names or hp.sem not in ("inbuf", "outbuf", "hostin", "hostout") or hp.expr not in names:
                raise ValueError("split=HOST:DEVICE names a buffer sized by a parameter, and a device pointer")
            self.split = (hp, names[dev], names[hp.expr])
        self.collect = "collect" in flags
        self.cached = "cached" in flags
        self.cache_group = flags.get("cachedby")
        self.cache_handle = flags.get("cachehandle")
        # drops=G1,G2(PARAM): whole groups, and the groups dropped for one handle only.
        self.drops, self.drops_by_handle, self.drop_handle = [], [], None
        for item in flags.get("drops", "").split(",") if flags.get("drops") else []:
            group, param = GROUP.match(item).groups()
            if group in self.drops or group in self.drops_by_handle:
                raise ValueError(f"drops= names {group} twice")
            if param is None:
                self.drops.append(group)
                continue
            if self.drop_handle not in (None, param):
                raise ValueError(f"drops= names two handles ({self.drop_handle}, {param}): "
                                 "one call drops one handle's answers")
            self.drops_by_handle.append(group)
            self.drop_handle = param
        values = [p.name for p in params if p.sem == "value"]
        for what, param in (("cached", self.cache_handle), ("drops", self.drop_handle)):
            if param is not None and param not in values:
                raise ValueError(f"{what}=GROUP({param}): {name} has no value parameter {param} (the handle's)")
        if self.cache_handle and self.drop_handle and self.cache_handle != self.drop_handle:
            raise ValueError("cached=GROUP(PARAM) and drops=GROUP(PARAM) name different parameters")
        self.handle = self.cache_handle or self.drop_handle
        self.sizing = "sizing" in flags
        self.noslice = "noslice" in flags


def parse(path, lib, calls, canonical):
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.split("#")[0].strip()
            if not line:
                continue
            m = match_line(line)
            if not m:
                sys.exit(f"{path}:{lineno}: expected KIND SYMBOL(PARAMS) [flags]")
            kind, ret, name, plist, rest = m
            if ret is not None and (kind != "local" or lib is not NVML):
                sys.exit(f"{path}:{lineno}: only the NVML list's local calls name a return type")
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
                if tok in ("async", "collect", "cached", "sizing", "noslice"):
                    flags[tok] = True
                elif k == "split" and re.match(r"^\w+:\w+$", v):
                    flags[k] = v
                elif k == "cached" and GROUP.match(v):
                    flags["cachedby"], flags["cachehandle"] = GROUP.match(v).groups()
                elif k == "drops" and all(GROUP.match(g) for g in v.split(",")):
                    flags[k] = v
                elif k in ("cached", "drops"):
                    sys.exit(f"{path}:{lineno}: bad flag {tok!r}: cached=GROUP or cached=GROUP(PARAM); "
                             "drops=G1,G2 where each is GROUP or GROUP(PARAM)")
                elif k not in ("after", "before", "answered", "sync") or not eq or not IDENT.match(v):
                    sys.exit(f"{path}:{lineno}: unknown flag {tok!r}")
                else:
                    flags[k] = v
            if flags.get("cached") and (kind != "forward" or any(p.sem not in ("value", "out", "outbuf") for p in params)):
                sys.exit(f"{path}:{lineno}: a cached call is forwarded and takes values only")
            if flags.get("cachedby") and (kind != "forward" or lib is NVML or
                                          any(p.sem not in ("value", "out", "outbuf", "cstr") for p in params)):
                sys.exit(f"{path}:{lineno}: a call cached=GROUP is a forwarded driver call taking values and strings")
            if flags.get("drops") and lib is NVML:
                sys.exit(f"{path}:{lineno}: NVML calls drop no cached answers")
            if flags.get("async") and (kind == "local" or any(p.sem in ("out", "inout", "outbuf") for p in params)):
                sys.exit(f"{path}:{lineno}: an async call has no outputs but its result (and hostout) and is not local")
            if sum(p.sem in ("hostin", "hostout") for p in params) > 1 or (
                    lib is NVML and any(p.sem in ("hostin", "hostout") for p in params)):
                sys.exit(f"{path}:{lineno}: hostin/hostout: one per call, driver calls only")
            if flags.get("sync") and flags["sync"] not in [p.name for p in params]:
                sys.exit(f"{path}:{lineno}: sync= names no parameter")
            if lib is NVML and any(k in flags for k in ("async", "collect", "sync", "split", "after", "before", "answered")):
                sys.exit(f"{path}:{lineno}: NVML calls take no async, collect, sync, split, after, before or answered")
            if flags.get("before") and kind != "forward":
                sys.exit(f"{path}:{lineno}: before= is for forwarded calls")
            if flags.get("answered") and (kind != "forward" or "async" in flags):
                sys.exit(f"{path}:{lineno}: answered= is for forwarded calls that are waited for (not async)")
            if flags.get("sizing") and (lib is not NVML or kind != "forward"):
                sys.exit(f"{path}:{lineno}: sizing is for forwarded NVML calls")
            if flags.get("noslice") and (lib is not NVML or kind != "forward"):
                sys.exit(f"{path}:{lineno}: noslice is for forwarded NVML calls")
            if lib is NVML and kind == "custom":
                sys.exit(f"{path}:{lineno}: NVML calls are forward or local")
            if any(c.name == name for c in calls):
                sys.exit(f"{path}:{lineno}: {name} listed twice")
            try:
                calls.append(CallSpec(kind, name, params, flags, lib, ret))
            except ValueError as e:
                sys.exit(f"{path}:{lineno}: {e}")
            canonical.append(" ".join(line.split()))


NS = "::gslice::remote::"


class Codec:
    """How one argument semantic of calls.def crosses the wire. Each method appends the lines of
    one phase of a generated function for one parameter; the generators run each phase over
    the parameters in order. A new semantic is one new class here and its entry in CODECS."""

    # The client's function, in this order.
    def client_refuse(self, c, p, out):
        """Refusals before anything is sent."""

    def client_locate(self, c, p, out):
        """Where host memory lies (before a call is split in pieces)."""

    def client_encode(self, c, p, out):
        """The request's bytes for p (w: the Writer, call: the Call)."""

    def client_read(self, c, p, out):
        """Outputs read from the reply (r), before a sizing call's early return."""

    def client_read_buffer(self, c, p, out):
        """Buffers read from the reply, after it."""

    # The worker's handler, in this order.
    def server_decode(self, c, p, out, decode):
        """Declarations (out) and the conditions that decode p (decode, all and-ed)."""

    def server_bind(self, c, p, out):
        """Names the decoded value as size expressions see it on the client."""

    def server_check(self, c, p, out):
        """Checks of the decoded values against each other."""

    def server_arg(self, c, p, out):
        """Returns the driver's argument for p (lines it needs go to out)."""
        raise NotImplementedError

    def server_before_call(self, c, p, out):
        """Lines right before the driver's call."""

    def server_reply(self, c, p, out):
        """Outputs written to the reply (w), before a sizing call's early return."""

    def server_reply_buffer(self, c, p, out):
        """Buffers written to the reply, after it."""


class Value(Codec):
    """A scalar, enum or handle, sent as it is."""

    def client_encode(self, c, p, out):
        out.append(f"  w.Put({p.name});")

    def server_decode(self, c, p, out, decode):
        out.append(f"  {p.type} {p.name}{{}};")
        decode.append(f"r.Get(&{p.name})")

    def server_arg(self, c, p, out):
        return p.name

    def server_before_call(self, c, p, out):
        # NVML device handles travel as the device's index + 1 (NvmlDeviceFromWire), so that a
        # handle a probe gave out names the same device in the worker.
        if p.type == "nvmlDevice_t":
            out.append(f"  if (!NvmlDeviceFromWire(&{p.name})) return static_cast<CUresult>(NVML_ERROR_INVALID_ARGUMENT);")


class Out(Codec):
    """T* p: whether it is NULL goes; the worker's T comes back when the call succeeds."""

    def client_encode(self, c, p, out):
        out.append(f"  w.Put<uint8_t>({p.name} != nullptr);")

    def client_read(self, c, p, out):
        out.append(f"  if ({p.name} != nullptr && !r.Get({p.name})) return call.Malformed();")

    def server_decode(self, c, p, out, decode):
        out.append(f"  uint8_t {p.name}_present = 0;")
        out.append(f"  {p.pointee} {p.name}_value{{}};")
        decode.append(f"r.GetFlag(&{p.name}_present)")

    def server_bind(self, c, p, out):
        out.append(f"  {p.pointee}* const {p.name} = {p.name}_present ? &{p.name}_value : nullptr;")
        out.append(f"  (void){p.name};")

    def server_arg(self, c, p, out):
        return p.name

    def server_reply(self, c, p, out):
        n = p.name
        if p.pointee == "nvmlDevice_t":
            out.append(f"  if ({n}_present && !NvmlDeviceToWire(&{n}_value)) return static_cast<CUresult>(NVML_ERROR_UNKNOWN);")
        out.append(f"  if ({n}_present) w.Put({n}_value);")


class InOut(Out):
    """As Out, and the client's T is sent first."""

    def client_encode(self, c, p, out):
        super().client_encode(c, p, out)
        out.append(f"  if ({p.name} != nullptr) w.Put(*{p.name});")

    def server_decode(self, c, p, out, decode):
        super().server_decode(c, p, out, decode)
        decode.append(f"(!{p.name}_present || r.Get(&{p.name}_value))")


class Sized(Codec):
    """Bytes with a length: a present flag, u64 length, then (when sent) the bytes."""
    limit = "kMaxBuffer"  # the worker's bound on the length
    sends_bytes = True    # the bytes travel in the request
    aligned = True        # at a 16-byte boundary of the request

    def server_decode(self, c, p, out, decode):
        n = p.name
        out.append(f"  uint8_t {n}_present = 0;")
        out.append(f"  uint64_t {n}_len = 0;")
        decode.append(f"r.GetFlag(&{n}_present)")
        decode.append(f"r.Get(&{n}_len)")
        decode.append(f"{n}_len <= {self.limit}")
        decode.append(f"({n}_present || {n}_len == 0)")
        if self.sends_bytes:
            out.append(f"  const uint8_t* {n}_data = nullptr;")
            if self.aligned:
                decode.append("r.SkipTo(16)")
            decode.append(f"r.GetBytes({n}_len, &{n}_data)")


class Buffer(Sized):
    """in[EXPR]: EXPR bytes sent."""
    sized_by_expr = True

    def client_bytes(self, c, p, out):
        """Declares {n}_bytes, what is shipped; returns its length's expression."""
        out.append(f"  const void* {p.name}_bytes = {p.name};")
        return f"(uint64_t)({p.expr})"

    def client_encode(self, c, p, out):
        n, lib = p.name, c.lib
        size = self.client_bytes(c, p, out)
        out.append(f"  const uint64_t {n}_len = {n}_bytes != nullptr ? {size} : 0;")
        self.client_refuse_length(c, p, out)
        out.append(f'  if ({n}_len > {NS}kMaxBuffer) return {NS}{lib.refuse}Size("{c.name}", "{n}", {n}_len);')
        out.append(f"  w.Put<uint8_t>({n} != nullptr);")
        out.append(f"  w.Put<uint64_t>({n}_len);")
        if self.sends_bytes:
            out.append("  w.PadTo(16);")
            out.append(f"  w.PutBytes({n}_bytes, {n}_len);")

    def client_refuse_length(self, c, p, out):
        """Refusals of the length found."""

    def server_check(self, c, p, out):
        if self.sized_by_expr:
            out.append(f"  if ({p.name}_present && {p.name}_len != (uint64_t)({p.expr})) return kMalformed;")

    def server_arg(self, c, p, out):
        return f"{p.name}_present ? static_cast<{p.type}>(const_cast<void*>(NonNull({p.name}_data))) : nullptr"


class OutBuffer(Buffer):
    """out[EXPR]: EXPR bytes received when the call succeeds."""
    sends_bytes = False

    def client_read_buffer(self, c, p, out):
        out.append(f"  if ({p.name} != nullptr && !r.GetInto({p.name}, {p.name}_len)) return call.Malformed();")

    def server_arg(self, c, p, out):
        n = p.name
        out.append(f"  HostBuffer {n}_buf;")
        oom = "static_cast<CUresult>(NVML_ERROR_MEMORY)" if c.lib is NVML else "CUDA_ERROR_OUT_OF_MEMORY"
        out.append(f"  if ({n}_present && !{n}_buf.Allocate({n}_len)) return {oom};")
        return f"{n}_present ? static_cast<{p.type}>(NonNullOut({n}_buf.data())) : nullptr"

    def server_reply_buffer(self, c, p, out):
        out.append(f"  if ({p.name}_present) w.PutBytes({p.name}_buf.data(), {p.name}_len);")


class Image(Buffer):
    """A module image, its size found on the client; a fatbin wrapper goes as its fatbin."""
    sized_by_expr = False

    def client_bytes(self, c, p, out):
        n = p.name
        # A fatbin wrapper is shipped as the fatbin it points at.
        out.append(f"  const void* {n}_bytes = {n} != nullptr ? {NS}ImageBytes({n}) : nullptr;")
        return f"{NS}ImageSize({n}_bytes)"

    def client_refuse_length(self, c, p, out):
        out.append(f'  if ({p.name} != nullptr && {p.name}_len == 0) return {NS}{c.lib.refuse}Image("{c.name}");')


class CString(Sized):
    """A NUL-terminated string, sent without its NUL."""
    limit = "kMaxString"
    aligned = False

    def client_encode(self, c, p, out):
        n = p.name
        out.append(f"  const uint64_t {n}_len = {n} != nullptr ? strnlen({n}, {NS}kMaxString + 1) : 0;")
        out.append(f'  if ({n}_len > {NS}kMaxString) return {NS}{c.lib.refuse}Size("{c.name}", "{n}", {n}_len);')
        out.append(f"  w.Put<uint8_t>({n} != nullptr);")
        out.append(f"  w.Put<uint64_t>({n}_len);")
        out.append(f"  w.PutBytes({n}, {n}_len);")

    def server_arg(self, c, p, out):
        n = p.name
        out.append(f"  std::string {n}_text({n}_present ? reinterpret_cast<const char*>({n}_data) : \"\", {n}_len);")
        return f"{n}_present ? {n}_text.c_str() : nullptr"


class Host(Codec):
    """hostin/hostout[EXPR]: host memory a copy reads or writes. Memory shared with the worker
    (same host) goes as the worker's address of it (present 2); else as its bytes (present 1)."""

    def deferred(self, c):
        """Whether the client's other page-locked memory goes by token (present 3)."""
        return False

    def client_locate(self, c, p, out):
        n = p.name
        # Host memory shared with the worker (same host): only its address travels.
        out.append(f"  uint64_t {n}_shared = 0;")
        out.append(f"  const {NS}HostMemory {n}_kind = {NS}LookUpHostMemory({n}, (uint64_t)({p.expr}), &{n}_shared);")
        out.append(f"  const bool {n}_is_shared = {n}_kind == {NS}HostMemory::kShared;")

    def client_encode(self, c, p, out):
        n = p.name
        out.append(f"  const uint64_t {n}_len = {n} != nullptr ? (uint64_t)({p.expr}) : 0;")
        out.append(f'  if (!{n}_is_shared && {n}_len > {NS}kMaxBuffer) return {NS}{c.lib.refuse}Size("{c.name}", "{n}", {n}_len);')
        flag = f"{n}_is_shared ? 2 : {n}_deferred ? 3 : {n} != nullptr" if self.deferred(c) else f"{n}_is_shared ? 2 : {n} != nullptr"
        out.append(f"  w.Put<uint8_t>({flag});")
        out.append(f"  w.Put<uint64_t>({n}_len);")
        if self.deferred(c):
            out.append(f"  if ({n}_deferred) w.Put<uint64_t>({NS}ExpectDeferred({n}, {n}_len));")
        out.append(f"  if ({n}_is_shared) {{")
        out.append(f"    w.Put<uint64_t>({n}_shared);")
        self.client_encode_unshared(c, p, out)
        out.append("  }")
        self.client_encode_after(c, p, out)

    def client_encode_unshared(self, c, p, out):
        """The branch for memory not shared, inside the block for shared memory."""

    def client_encode_after(self, c, p, out):
        """Lines after the encoding."""

    def server_decode(self, c, p, out, decode):
        n = p.name
        # 0: NULL, 1: the bytes (hostin) or a buffer here (hostout), 2: shared memory
        # at the worker's address {n}_shared (shared_host.h).
        out.append(f"  uint8_t {n}_present = 0;")
        out.append(f"  uint64_t {n}_len = 0;")
        out.append(f"  uint64_t {n}_shared = 0;")
        decode.append(f"r.Get(&{n}_present)")
        decode.append(f"{n}_present <= {3 if self.deferred(c) else 2}")
        decode.append(f"r.Get(&{n}_len)")
        decode.append(f"({n}_present == 2 || {n}_len <= kMaxBuffer)")
        decode.append(f"({n}_present || {n}_len == 0)")
        self.server_decode_rest(c, p, out, decode)

    def server_check(self, c, p, out):
        n = p.name
        out.append(f"  if ({n}_present && {n}_len != (uint64_t)({p.expr})) return kMalformed;")
        out.append(f"  void* {n}_host = nullptr;")
        out.append(f"  if ({n}_present == 2 && ({n}_host = SharedHostPointer({n}_shared, {n}_len)) == nullptr) {{")
        out.append("    return kMalformed;  // no memory this worker shares with its client")
        out.append("  }")


class HostIn(Host):
    def client_encode_unshared(self, c, p, out):
        out.append("  } else {")
        out.append("    w.PadTo(16);")
        out.append(f"    w.PutBytes({p.name}, {p.name}_len);")

    def server_decode_rest(self, c, p, out, decode):
        n = p.name
        out.append(f"  const uint8_t* {n}_data = nullptr;")
        decode.append(f"({n}_present == 2 ? r.Get(&{n}_shared) : (r.SkipTo(16) && r.GetBytes({n}_len, &{n}_data)))")

    def server_arg(self, c, p, out):
        n = p.name
        staging = f"{n}_staging ? static_cast<{p.type}>({n}_staged.data()) : " if c.sync else ""
        return (f"{n}_present == 2 ? static_cast<{p.type}>({n}_host) : {staging}"
                f"{n}_present ? static_cast<{p.type}>(const_cast<void*>(NonNull({n}_data))) : nullptr")


class HostOut(Host):
    def deferred(self, c):
        return c.is_async

    def client_locate(self, c, p, out):
        super().client_locate(c, p, out)
        if self.deferred(c):
            # The client's own page-locked memory: its bytes come when the copy is done.
            out.append(f"  const bool {p.name}_deferred = {p.name}_kind == {NS}HostMemory::kPageLocked;")

    def client_encode_after(self, c, p, out):
        if c.is_async:
            out.append(f"  // Memory of this host only: the bytes come back in the answer, which is waited for.")
            out.append(f"  if (!{p.name}_is_shared && !{p.name}_deferred) call.WaitForAnswer();")

    def client_read_buffer(self, c, p, out):
        n = p.name
        unsent = f" && !{n}_deferred" if c.is_async else ""
        out.append(f"  if ({n} != nullptr && !{n}_is_shared{unsent} && !r.GetInto({n}, {n}_len)) return call.Malformed();")

    def server_decode_rest(self, c, p, out, decode):
        n = p.name
        if self.deferred(c):
            # 3: the client's page-locked memory, by token (staging.h: DeferredOut).
            out.append(f"  uint64_t {n}_token = 0;")
            decode.append(f"({n}_present == 2 ? r.Get(&{n}_shared) : {n}_present != 3 || r.Get(&{n}_token))")
        else:
            decode.append(f"({n}_present != 2 || r.Get(&{n}_shared))")

    def server_arg(self, c, p, out):
        n = p.name
        out.append(f"  HostBuffer {n}_buf;")
        out.append(f"  if ({n}_present == 1 && !{n}_buf.Allocate({n}_len)) return CUDA_ERROR_OUT_OF_MEMORY;")
        deferred_arg = ""
        if self.deferred(c):
            out.append(f"  DeferredOut {n}_later;")
            out.append(f"  void* const {n}_later_at = {n}_present == 3 ? {n}_later.Prepare({n}_len) : nullptr;")
            out.append(f"  if ({n}_present == 3 && {n}_later_at == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;")
            deferred_arg = f"{n}_present == 3 ? static_cast<{p.type}>({n}_later_at) : "
        return (f"{n}_present == 2 ? static_cast<{p.type}>({n}_host) : {deferred_arg}"
                f"{n}_present ? static_cast<{p.type}>(NonNullOut({n}_buf.data())) : nullptr")

    def server_reply_buffer(self, c, p, out):
        out.append(f"  if ({p.name}_present == 1) w.PutBytes({p.name}_buf.data(), {p.name}_len);")


class NullOnly(Codec):
    """A pointer forwarded only when NULL."""

    def client_refuse(self, c, p, out):
        out.append(f'  if ({p.name} != nullptr) return {NS}{c.lib.refuse}Argument("{c.name}", "{p.name}");')

    def server_arg(self, c, p, out):
        return "nullptr"


class Const(Codec):
    """Not sent: the worker passes the list's value."""

    def server_arg(self, c, p, out):
        return p.expr


CODECS = {
    "value": Value(),
    "out": Out(),
    "inout": InOut(),
    "inbuf": Buffer(),
    "outbuf": OutBuffer(),
    "image": Image(),
    "cstr": CString(),
    "hostin": HostIn(),
    "hostout": HostOut(),
    "nullonly": NullOnly(),
    "const": Const(),
}


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
            "// One exported symbol a client answers and its function (client_calls.inc's table).",
            "struct ClientCall {", "  const char* name;", "  void* fn;", "};", "",
            f"// The hash of calls.def (and nvml_calls.def) that both sides compare in the handshake.",
            f"inline constexpr uint64_t kCallsHash = 0x{h:016x}ull;", "",
            "inline constexpr const char* kOpNames[kOpCount] = {"]
    out += [f'    "{c.name}",' for c in calls]
    out += ["};", "", "inline constexpr CallKind kOpKinds[kOpCount] = {"]
    kinds = {"forward": "kForward", "local": "kLocal", "custom": "kCustom"}
    out += [f"    CallKind::{kinds[c.kind]},  // {c.name}" for c in calls]
    out += ["};", "", "enum class Library : uint8_t { kCuda, kNvml };", "",
            "// Which of the worker's libraries answers each call (calls.def or nvml_calls.def).",
            "inline constexpr Library kOpLibrary[kOpCount] = {"]
    out += [f"    Library::{'kNvml' if c.lib is NVML else 'kCuda'},  // {c.name}" for c in calls]
    out += ["};", "", "// Calls the client sends without waiting (calls.def: async).",
            "inline constexpr bool kOpAsync[kOpCount] = {"]
    out += [f"    {'true' if c.is_async else 'false'},  // {c.name}" for c in calls]
    out += ["};", "", "// Calls whose successful answer the client keeps per argument values (calls.def: cached).",
            "inline constexpr bool kOpCached[kOpCount] = {"]
    out += [f"    {'true' if c.cached else 'false'},  // {c.name}" for c in calls]
    groups = []
    for c in calls:
        for g in ([c.cache_group] if c.cache_group else []) + c.drops + c.drops_by_handle:
            if g not in groups:
                groups.append(g)
    if len(groups) > 32:
        sys.exit("calls.def: more than 32 cache groups")
    for c in calls:
        for g in c.drops + c.drops_by_handle:
            if not any(o.cache_group == g for o in calls):
                sys.exit(f"calls.def: {c.name} drops={g}, which no call is cached by")
    # A group whose answers are indexed by handle: every call cached by it names its handle, or
    # a per-handle drop would miss the answers of the calls that name none.
    for g in groups:
        cached_by = [c for c in calls if c.cache_group == g]
        by_handle = [c for c in cached_by if c.cache_handle]
        dropper = next((c for c in calls if g in c.drops_by_handle), None)
        if (by_handle or dropper) and len(by_handle) != len(cached_by):
            missing = next(c for c in cached_by if not c.cache_handle)
            first = dropper or by_handle[0]
            why = (f"{first.name} drops={g}({first.drop_handle})" if dropper
                   else f"{first.name} is cached={g}({first.cache_handle})")
            sys.exit(f"calls.def: {why}, but {missing.name} is cached={g} without naming its handle: "
                     f"write cached={g}(PARAM) with the parameter that names the function or kernel")
    out += ["};", "", "// Cache groups (calls.def: cached=GROUP): a call's answer is kept per current context and",
            "// argument values until a call that drops its group is made.",
            "inline constexpr uint32_t kCacheGroupCount = %d;" % len(groups),
            "inline constexpr const char* kCacheGroupNames[kCacheGroupCount > 0 ? kCacheGroupCount : 1] = {"]
    out += [f'    "{g}",' for g in groups] or ['    "",']
    out += ["};", "", "// The group (bit) each call is cached by; 0: none.",
            "inline constexpr uint32_t kOpCacheGroup[kOpCount] = {"]
    out += [f"    {hex(1 << groups.index(c.cache_group)) if c.cache_group else '0'},  // {c.name}" for c in calls]
    out += ["};", "", "// The groups (bits) whose kept answers each call drops (calls.def: drops=G1,G2).",
            "inline constexpr uint32_t kOpDrops[kOpCount] = {"]
    out += [f"    {hex(sum(1 << groups.index(g) for g in c.drops))},  // {c.name}" for c in calls]
    out += ["};", "", "// The groups (bits) in which each call drops only the answers of its handle's family",
            "// (calls.def: drops=GROUP(PARAM); remote/client/kept_answers.h).",
            "inline constexpr uint32_t kOpDropsByHandle[kOpCount] = {"]
    out += [f"    {hex(sum(1 << groups.index(g) for g in c.drops_by_handle))},  // {c.name}" for c in calls]
    out += ["};", "", "// NVML calls a probe answers before the client holds a slice (nvml_calls.def: noslice).",
            "inline constexpr bool kOpNoSlice[kOpCount] = {"]
    out += [f"    {'true' if c.noslice else 'false'},  // {c.name}" for c in calls]
    out += ["};", "", "// Synchronisations that report the errors of earlier async calls (calls.def: collect).",
            "inline constexpr bool kOpCollects[kOpCount] = {"]
    out += [f"    {'true' if c.collect else 'false'},  // {c.name}" for c in calls]
    out += ["};", "", "}  // namespace gslice::remote", ""]
    return "\n".join(out)


def gen_declarations(calls, lib):
    """The client's function of every call of one list, declared once: the generated ones
    (forward) and the hand-written ones (local, custom) alike, so that a definition or a caller
    whose signature drifts from the list does not compile."""
    calls = [c for c in calls if c.lib is lib]
    listing = "nvml_calls.def" if lib is NVML else "calls.def"
    types = '"gslice/nvml_subset.h"' if lib is NVML else "<cuda.h>"
    out = [f"// Generated by remote/gen_calls.py from remote/{listing}. Do not edit.",
           f"// The client's function gslice_remote_call_<symbol> of every call of {listing}: generated",
           "// for forward calls, hand-written in remote/client for local and custom ones. Define or call",
           "// one only with this header included: a signature that differs from the list's does not compile.",
           "#pragma once", "", "#include <cstddef>", "#include <cstdint>", "", f"#include {types}", "",
           'extern "C" {']
    out += [f"{c.ret} gslice_remote_call_{c.name}({sig(c)});" for c in calls]
    out += ['}  // extern "C"', ""]
    return "\n".join(out)


def gen_client_split(c, out):
    """calls.def: split=HOST:DEVICE. A copy larger than kSplitBytes calls the client's own
    function again for each piece, in order."""
    ns, lib = NS, c.lib
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
    unshared = f" && !{host.name}_is_shared" if host.sem in ("hostin", "hostout") else ""
    out.append(f"  if ((uint64_t)({size.name}) > {ns}kSplitBytes && {host.name} != nullptr{unshared}) {{")
    out.append("    // A large copy: in pieces, in order.")
    out.append(f"    for (uint64_t done = 0; done < (uint64_t)({size.name});) {{")
    out.append(f"      const {size.type} piece = static_cast<{size.type}>(std::min<uint64_t>({ns}kSplitBytes, {size.name} - done));")
    out.append(f"      const {lib.ret} piece_result = gslice_remote_call_{c.name}({', '.join(args)});")
    out.append(f"      if (piece_result != {lib.ok}) return piece_result;")
    out.append("      done += piece;")
    out.append("    }")
    out.append(f"    return {lib.ok};")
    out.append("  }")


def gen_client(calls, lib, table, includer, declarations):
    calls = [c for c in calls if c.lib is lib]
    ns = NS
    out = [f"// Generated by remote/gen_calls.py from remote/{'nvml_' if lib is NVML else ''}calls.def. Do not edit.",
           f"// Included by remote/client/{includer}, inside no namespace.", "",
           f'#include "{declarations}"', ""]
    for c in calls:
        if c.kind != "forward":
            continue
        out.append(f'extern "C" {c.ret} gslice_remote_call_{c.name}({sig(c)}) {{')
        if c.before:
            args = ", ".join(["&answered_here"] + [p.name for p in c.params])
            out.append(f"  {c.ret} answered_here;")
            out.append(f"  if ({ns}{c.before}({args})) return answered_here;")
        for p in c.params:
            CODECS[p.sem].client_refuse(c, p, out)
        for p in c.params:
            CODECS[p.sem].client_locate(c, p, out)
        if c.split:
            gen_client_split(c, out)
        out.append(f"  {ns}{lib.call} call({ns}kOp_{c.name});")
        if c.handle:
            out.append(f"  call.set_cache_handle({ns}HandleBits({c.handle}));")
        out.append(f"  {ns}Writer& w = call.request();")
        out.append("  (void)w;")
        for p in c.params:
            CODECS[p.sem].client_encode(c, p, out)
        out.append(f"  const {lib.ret} res = call.Run();")
        if c.answered:
            out.append(f"  {ns}{c.answered}({', '.join(['call', 'res'] + [p.name for p in c.params])});")
        if c.sizing:
            out.append(f"  const bool sized = res == NVML_ERROR_INSUFFICIENT_SIZE && call.answered();")
            out.append(f"  if (res != {lib.ok} && !sized) return res;")
        else:
            out.append(f"  if (res != {lib.ok}) return res;")
        out.append(f"  {ns}Reader& r = call.reply();")
        for p in c.params:
            CODECS[p.sem].client_read(c, p, out)
        if c.sizing:
            out.append("  if (sized) return r.AtEnd() ? res : call.Malformed();")
        for p in c.params:
            CODECS[p.sem].client_read_buffer(c, p, out)
        out.append("  if (!r.AtEnd()) return call.Malformed();")
        if c.after:
            out.append(f"  {ns}{c.after}({', '.join(p.name for p in c.params)});")
        out.append("  return res;")
        out.append("}")
        out.append("")
    out.append("namespace gslice::remote {")
    out.append(f"// Every call of the list: its exported symbol and the client's function for it.")
    out.append(f"inline const ClientCall {table}[] = {{")
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
        out.append(f"  using Fn = {c.ret} (*)({types});")
        out.append(f"  auto fn = reinterpret_cast<Fn>(g_driver[kOp_{c.name}]);")
        decode = []
        for p in c.params:
            CODECS[p.sem].server_decode(c, p, out, decode)
        decode.append("r.AtEnd()")
        out.append("  if (!(" + " &&\n        ".join(decode) + ")) {")
        out.append("    return kMalformed;")
        out.append("  }")
        # Outputs by their parameter's name, as size expressions see them on the client.
        for p in c.params:
            CODECS[p.sem].server_bind(c, p, out)
        # Lengths agree with their expressions over the decoded values.
        for p in c.params:
            CODECS[p.sem].server_check(c, p, out)
        args = [CODECS[p.sem].server_arg(c, p, out) for p in c.params]
        out.append("  if (fn == nullptr) return NotInDriver(kOp_" + c.name + ");")
        for p in c.params:
            CODECS[p.sem].server_before_call(c, p, out)
        hosts = [p for p in c.params if p.sem in ("hostin", "hostout")]
        # Shared host memory outlives the message: its copies are the driver's own, asynchronous
        # ones, and may be captured.
        by_value = "".join(f"{p.name}_present != 2 && " + (f"{p.name}_present != 3 && " if p.sem == "hostout" and c.is_async else "")
                           for p in hosts)
        later = next((p for p in hosts if p.sem == "hostout"), None) if c.is_async and c.sync else None
        # An asynchronous copy of the message's bytes goes from page-locked staging (staging.h)
        # instead of waiting for its stream.
        staged = next((p for p in hosts if p.sem == "hostin"), None) if c.sync else None

        if c.sync:
            # The host buffer lives in this message: a captured copy would read it at replay.
            op = "kOp_cuStreamIsCapturing_ptsz" if c.name.endswith("_ptsz") else "kOp_cuStreamIsCapturing"
            # A deferred copy's bytes are sent once: a replay's would not be.
            shared_only = "".join(f"{p.name}_present != 2 && " for p in hosts)
            out.append(f"  if ({shared_only}StreamCapturing({op}, {c.sync})) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;")
        if staged is not None:
            n = staged.name
            out.append(f"  Staged {n}_staged;")
            out.append(f"  const bool {n}_staging = {n}_present == 1 && {n}_staged.Stage({n}_data, {n}_len);")
        out.append(f"  CUresult res = static_cast<CUresult>(fn({', '.join(args)}));")
        if c.sync:
            op = "kOp_cuStreamSynchronize_ptsz" if c.name.endswith("_ptsz") else "kOp_cuStreamSynchronize"
            if later is not None:
                pt = "true" if c.name.endswith("_ptsz") else "false"
                out.append(f"  if ({later.name}_present == 3 && res == CUDA_SUCCESS) {{")
                out.append(f"    res = {later.name}_later.HandTo({later.name}_token, {c.sync}, {pt}, {op});")
                out.append("  }")
            if staged is not None:
                pt = "true" if c.name.endswith("_ptsz") else "false"
                out.append(f"  if ({staged.name}_staging && res == CUDA_SUCCESS) {{")
                out.append(f"    res = {staged.name}_staged.HandTo({c.sync}, {pt}, {op});")
                out.append(f"  }} else if ({by_value}res == CUDA_SUCCESS) {{")
                out.append(f"    res = SynchronizeStream({op}, {c.sync});")
                out.append("  }")
            else:
                out.append(f"  if ({by_value}res == CUDA_SUCCESS) res = SynchronizeStream({op}, {c.sync});")
        if c.sizing:
            # Too small a buffer: the count the caller needs comes back (not the buffers).
            out.append("  if (res != CUDA_SUCCESS && res != static_cast<CUresult>(NVML_ERROR_INSUFFICIENT_SIZE)) return res;")
        else:
            out.append("  if (res != CUDA_SUCCESS) return res;")
        for p in c.params:
            CODECS[p.sem].server_reply(c, p, out)
        if c.sizing:
            out.append("  if (res != CUDA_SUCCESS) return res;")
        for p in c.params:
            CODECS[p.sem].server_reply_buffer(c, p, out)
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
    ap.add_argument("--nvml-calls")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    calls, canonical = [], []
    parse(a.calls, CUDA, calls, canonical)
    if a.nvml_calls:
        canonical.append("# nvml")
        parse(a.nvml_calls, NVML, calls, canonical)
    digest = hashlib.sha256("\n".join(canonical).encode()).digest()
    h = int.from_bytes(digest[:8], "little")
    names = {c.name for c in calls}
    for c in calls:
        pt = "_ptsz" if c.name.endswith("_ptsz") else ""
        if c.sync and ("cuStreamSynchronize" + pt not in names or "cuStreamIsCapturing" + pt not in names):
            sys.exit(f"gen_calls: {c.name}: sync= needs cuStreamSynchronize{pt} and cuStreamIsCapturing{pt} in the list")
    os.makedirs(a.out, exist_ok=True)
    files = {
        "calls.h": gen_header(calls, h),
        "hooks.def": "// Generated by remote/gen_calls.py. Do not edit.\n" +
                     "".join(f"GSLICE_HOOK({c.name})\n" for c in calls if c.lib is CUDA),
        "nvml_hooks.def": "// Generated by remote/gen_calls.py. Do not edit.\n" +
                          "".join(f"GSLICE_HOOK({c.name})\n" for c in calls if c.lib is NVML),
        "client_calls.h": gen_declarations(calls, CUDA),
        "nvml_client_calls.h": gen_declarations(calls, NVML),
        "client_calls.inc": gen_client(calls, CUDA, "kClientCalls", "forwarding.cc", "client_calls.h"),
        "nvml_client_calls.inc": gen_client(calls, NVML, "kNvmlClientCalls", "nvml_forwarding.cc",
                                            "nvml_client_calls.h"),
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
