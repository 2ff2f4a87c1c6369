// The worker connection's transport: the process's one connection to its worker, shared by its
// threads; the queue of async calls and the flusher that sends a queue no further call comes
// to; the lanes (a number per client thread, its serving thread in the worker); and the
// reader that hands each answer to the thread waiting for it. What goes on the connection is
// decided elsewhere: attaching (worker_attach.h) sets it up, Call (call.h) sends on it.
//
// Concurrency contract. Requests of all threads go out in the order the calls were made
// (g_send_mu), so the worker sees every async call a thread has already returned from before
// any later call of another thread. Answers come back in any order across threads: one waiting
// thread at a time reads them (the reader) and hands each to the thread whose seq it carries,
// so a thread waiting for a long synchronisation holds up no other.
// Lock order: the probe's (worker_attach.cc), g_send_mu, g_mu, then the deferred copies'
// (deferred_copies.cc, taken by the reader with neither of these held). Writes on the
// connection: g_send_mu, then g_write_mu (the flusher takes g_write_mu before it lets go of
// g_send_mu, and writes the queue it took without it), then, with an added delay
// (added_delay.h), g_wire_mu; the wire thread that then writes the connection takes g_wire_mu
// alone. g_mu is never taken with g_write_mu or g_wire_mu held.
//
// Failures are sticky (connection.h): once the connection failed, every request of every
// thread returns the same result, never retried silently.
#pragma once

#include <cuda.h>
#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "added_delay.h"
#include "connection.h"
#include "socket_io.h"
#include "wire.h"

namespace gslice::remote {

// A thread waiting for the answer to its request (on its own stack until answered).
struct Waiter {
  uint32_t seq = 0;
  bool done = false;
  FrameHeader header;
  std::vector<uint8_t>* reply = nullptr;
  Waiter* next = nullptr;
};

namespace transport_detail {
// This process's id, kept: getpid is a system call (glibc has not cached it since 2.25), which
// costs microseconds under a sandboxing kernel (gVisor), and the client asks on every call.
// Set at the library's load and, in a forked child, by a fork handler registered then (the
// first to run in the child).
extern std::atomic<pid_t> g_pid;
// The pid of the process whose worker the connection is (0: none yet): the fast path's
// "attached". Written under g_send_mu and g_mu, read without a lock.
extern std::atomic<pid_t> g_attached;
// The calling thread's lane + 1 (0: none yet). __thread: read on every call, with no
// initialisation wrapper.
extern __thread uint32_t t_lane;
uint32_t AssignLane();
}  // namespace transport_detail

// This process's id (getpid without the system call).
inline pid_t ThisProcess() {
  const pid_t pid = transport_detail::g_pid.load(std::memory_order_relaxed);
  return pid != 0 ? pid : getpid();
}

// Whether this process holds its worker (the fast path: no lock).
inline bool HoldsWorker() {
  return transport_detail::g_attached.load(std::memory_order_acquire) == ThisProcess();
}

// The calling thread's lane, given on its first request and reused after the thread exits.
// More threads than kMaxLanes share lanes (their calls wait behind each other's).
inline uint32_t Lane() {
  const uint32_t lane = transport_detail::t_lane;
  return lane != 0 ? lane - 1 : transport_detail::AssignLane();
}

// The connection's failure so far (CUDA_SUCCESS: none).
CUresult ConnectionFailure();
// Fails the connection for good, with one log line (the first failure's); returns the first
// failure. The socket is shut down, not closed: another thread may be reading it.
CUresult Fail(CUresult result, const std::string& why);
// The same, REQUIRES g_mu (LockTransport).
CUresult FailLocked(CUresult result, const std::string& why);

// Setting the connection up (worker_attach.cc). LockTransport takes g_send_mu then g_mu:
// nothing is sent, read or failed while it is held.
void LockTransport();
void UnlockTransport();
// REQUIRES LockTransport for each of these.
// Whether this process has its connection (a forked child has its parent's, not its own).
bool ConnectedLocked();
// Drops a connection inherited across fork (the parent's, with its worker) and its failure.
void ForgetInheritedLocked();
// Takes channel as the process's connection (nothing sent on it yet).
void AdoptLocked(const Channel& channel);
// The connection (to move it to shared memory before anything is sent).
Channel* ChannelLocked();
// The next request's seq.
uint32_t NextSeqLocked();
// The process holds its worker from now on (HoldsWorker).
void MarkAttachedLocked();

// Sends one request (queued when async: waiter null). On success, a synchronous request's
// waiter is registered before its frame leaves, so that no answer finds nobody. *sent_seq
// (when not null) gets the request's seq; flags: kWaitBit for an async call the client waits
// for (GSLICE_REMOTE_WAIT). pass_fd >= 0 (a synchronous request on the rings only): the
// descriptor goes first, on the socket, in a frame of the same op and seq (wire.h:
// kOpHostShare).
CUresult Send(uint32_t op, const Writer& request, Waiter* waiter, uint32_t* sent_seq = nullptr, uint32_t flags = 0,
              int pass_fd = -1);
// Waits for waiter's answer, reading answers for every waiting thread while no other thread
// does. Returns CUDA_SUCCESS once waiter->done, or the connection's failure.
CUresult Receive(uint32_t op, Waiter* waiter);

// A synchronous request of wire.h's (not a call of calls.def) on the calling thread's lane;
// *reply is its whole answer. pass_fd >= 0: see Send.
CUresult Exchange(uint32_t op, const Writer& request, std::vector<uint8_t>* reply, int pass_fd = -1);
// One request of the timeline's (wire.h: Trace; op kOpTraceClock or kOpTraceFetch) on the
// worker's connection, on the calling thread's lane; *reply is the answer's payload.
// CUDA_ERROR_NOT_INITIALIZED when this process holds no worker (nothing to ask).
CUresult TraceExchange(uint32_t op, std::vector<uint8_t>* reply);

// What the added delay did so far (added_delay.h; round_trip_ns 0: none added).
DelayLineStats AddedDelayStats();

// Whether this process's worker is on the same host, over shared-memory rings (page-locked
// memory can be shared with it then: host_memory.h).
bool WorkerSharesMemory();

// A request's name for log lines (the timeline's requests are not calls).
const char* OpName(uint32_t op);

}  // namespace gslice::remote
