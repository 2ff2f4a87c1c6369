// The forwarding client's timeline (docs/trace.md, "Remote programs"): with GSLICE_TRACE set
// (gslice run --remote ADDR --trace FILE), the client records every forwarded call of every
// thread (its name, lane, frame seq, host begin and end, and how it went: a round trip, sent
// without waiting, answered from the client's cache or by the probe) into a bounded ring, and
// asks its worker to record too (wire.h: Hello.trace); the program's NVTX ranges come through
// NVTX's injection (interpose/src/trace_nvtx.cc over this ring). Right after the attach and at
// the process's exit it measures the worker's clock against its own over the connection (eight
// kOpTraceClock exchanges; the one with the shortest round trip wins, NTP-style: offset = the
// midpoint of the exchange minus the worker's time, uncertainty = half that round trip). At
// exit it fetches the worker's part and served requests (kOpTraceFetch) and writes two parts
// into GSLICE_TRACE's folder: its own, and the worker's with a clock line
// (gslice/trace_format.h: C, the line through both measurements: offset and drift) that puts
// it on the client's clock, with each call's span linked to the worker's execution of it by a
// flow and the time outside that execution shown as "request: network + queue" and
// "reply: network".
//
// The client's clock is MonotonicNs (gslice/clock.h).
//
// Cost when off: one relaxed load per forwarded call (ClientTracing()). When on: two clock
// reads (vDSO) and a 40-byte record claimed with one fetch_add. Nothing here fails a call.
#pragma once

#include <atomic>
#include <cstdint>

namespace gslice::remote {

namespace client_trace_detail {
extern std::atomic<bool> g_on;
}  // namespace client_trace_detail

// True while the process records: the one check on a call's path.
inline bool ClientTracing() { return client_trace_detail::g_on.load(std::memory_order_relaxed); }

// How a forwarded call went.
enum class CallMode : uint8_t {
  kRoundTrip,  // sent, and the thread waited for the worker's answer
  kAsync,      // queued, sent later with the next call that waits: not waited for
  kCached,     // answered from the client's cache (device properties)
  kProbe,      // answered by the probe (before the process holds a worker)
  kFailed,     // no answer (no server, a lost connection)
};

// Called once the process holds its worker (worker_attach.cc, after the attach, no lock held):
// the first clock measurement; the one at exit is the second, and the worker's times are put
// on the client's clock along the line through both (a drift between two machines' clocks is
// taken out; on one host it comes to nothing).
void ClientTraceAttached();

// One forwarded call of the calling thread. REQUIRES: ClientTracing() was true at its start.
void RecordCall(uint32_t op, CallMode mode, uint32_t seq, uint32_t lane, int64_t start_ns, int64_t end_ns);

}  // namespace gslice::remote
