#include "worker_attach.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "attach.h"
#include "calls.h"
#include "client_trace.h"
#include "gslice/options.h"
#include "handshake.h"
#include "log.h"
#include "shm_ring.h"

namespace gslice::remote {

using shim::Log;
using shim::LogLevel;

namespace {

// Until the process's first call that needs a GPU (attach.h), device queries go to a probe: a
// connection of its own (wire.h: kOpProbe) that holds no slice. Its round trips are one at a
// time under g_probe_mu, which comes before g_send_mu and g_mu; it is closed at attach (under
// all three), so the two are never both open once attached.
struct Probe {
  Channel channel;
  pid_t pid = 0;
  uint32_t seq = 0;
};
pthread_mutex_t g_probe_mu = PTHREAD_MUTEX_INITIALIZER;
Probe g_probe;  // REQUIRES g_probe_mu
// cuInit's flags once it succeeded on the probe: the worker's driver gets the same call at
// attach, before anything else, so that it is initialised as the program believes it is.
// REQUIRES g_probe_mu.
bool g_init_replay = false;
unsigned int g_init_flags = 0;

// The same-host fast path (shm_ring.h): over a unix socket, unless GSLICE_REMOTE_SHM is off,
// the worker connection's frames move to shared-memory rings right after the handshake. A
// refusal leaves them on the socket, with one log line. REQUIRES LockTransport, nothing sent on
// the connection yet.
CUresult MoveToSharedMemoryLocked() {
  Channel* const channel = ChannelLocked();
  const std::string wanted = OptionValue(Option::RemoteShm);
  if (wanted == "off" || wanted == "0" || wanted == "no" || wanted == "false") return CUDA_SUCCESS;
  int domain = 0;
  socklen_t len = sizeof domain;
  if (channel->tls != nullptr || getsockopt(channel->fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
      domain != AF_UNIX) {
    return CUDA_SUCCESS;  // tcp:// and tls:// stay as they are
  }
  const unsigned long spin = strtoul(OptionValue(Option::RemoteShmSpin), nullptr, 10);
  const RingsOptions options{.ring_bytes = kDefaultRingBytes,
                             .spin_us = static_cast<uint32_t>(std::min<unsigned long>(spin, kMaxSpinUs))};
  std::string why;
  switch (OfferRings(channel, options, kHelloTimeoutMs, &why)) {
    case RingsOffer::kOn:
      Log(LogLevel::kInfo, "remote: calls go through shared memory (%llu KiB rings, %u us spin)",
          static_cast<unsigned long long>(options.ring_bytes >> 10), options.spin_us);
      return CUDA_SUCCESS;
    case RingsOffer::kRefused:
      Log(LogLevel::kWarn, "remote: no shared-memory rings with the worker (%s): calls go on the socket", why.c_str());
      return CUDA_SUCCESS;
    case RingsOffer::kLost:
      break;
  }
  return FailLocked(kLostResult, "lost the server while setting up shared memory: " + why);
}

// Connects with kOpHello, replays the cuInit the probe accepted before any other request, and
// closes the probe. The replay goes on `lane` (the attaching thread's, taken before the locks:
// Lane() takes g_mu). REQUIRES g_probe_mu and LockTransport.
CUresult AttachLocked(uint32_t lane) {
  if (ConnectedLocked()) return CUDA_SUCCESS;
  ForgetInheritedLocked();  // a forked child's
  if (g_probe.channel.fd >= 0 && g_probe.pid != getpid()) {
    close(g_probe.channel.fd);
    g_probe = Probe{};
  }
  if (const CUresult failed = ConnectionFailure(); failed != CUDA_SUCCESS) return failed;
  Channel channel;
  uint32_t worker_pid = 0;
  std::string shown, why;
  if (!Handshake(kOpHello, &channel, &worker_pid, &shown, &why)) return FailLocked(kNoServerResult, why);
  AdoptLocked(channel);
  if (g_probe.channel.fd >= 0) CloseChannel(&g_probe.channel);  // the probe process ends with it
  Log(LogLevel::kInfo, "remote: connected to %s%s, worker pid %u", shown.c_str(),
      channel.tls != nullptr ? " (TLS)" : "", worker_pid);
  if (const CUresult moved = MoveToSharedMemoryLocked(); moved != CUDA_SUCCESS) return moved;
  channel = *ChannelLocked();  // the rings, when they were set up
  if (g_init_replay) {
    // Nothing else is in flight on the new connection: its answer is read here directly.
    Writer init;
    EncodeRequestPrefix(RequestPrefix{.context = 0, .lane = lane}, &init);
    init.Put(g_init_flags);
    const uint32_t seq = NextSeqLocked();
    FrameHeader h;
    std::vector<uint8_t> reply;
    if (!WriteFrame(channel, FrameHeader{.seq = seq, .op = kOp_cuInit}, init.buffer().data(), init.size()) ||
        ReadFrame(channel, kMaxFrame, &h, &reply) != FrameRead::kOk) {
      return FailLocked(kLostResult, "lost the server while replaying cuInit on the worker");
    }
    Reader in(reply.data(), reply.size());
    int32_t value = 0;
    if (h.seq != seq || h.op != (kOp_cuInit | kReplyBit) || !in.Get(&value) || value != CUDA_SUCCESS) {
      return FailLocked(kNoServerResult, "the worker's driver refused cuInit, which the probe accepted (" +
                                             std::to_string(value) + ")");
    }
  }
  MarkAttachedLocked();
  return CUDA_SUCCESS;
}

}  // namespace

CUresult Attach() {
  const uint32_t lane = Lane();
  pthread_mutex_lock(&g_probe_mu);
  LockTransport();
  const bool held = ConnectedLocked();
  const CUresult result = AttachLocked(lane);
  UnlockTransport();
  pthread_mutex_unlock(&g_probe_mu);
  if (result == CUDA_SUCCESS && !held && ClientTracing()) ClientTraceAttached();
  return result;
}

ProbeAsked AskProbe(uint32_t op, const Writer& request, std::vector<uint8_t>* reply, CUresult* result) {
  if (HoldsWorker()) return ProbeAsked::kAttached;
  pthread_mutex_lock(&g_probe_mu);
  ProbeAsked asked = ProbeAsked::kFailed;
  if (HoldsWorker()) {
    asked = ProbeAsked::kAttached;
  } else if (*result = ConnectionFailure(); *result == CUDA_SUCCESS) {
    if (g_probe.channel.fd >= 0 && g_probe.pid != getpid()) {
      close(g_probe.channel.fd);  // a forked child's: the parent's probe stays the parent's
      g_probe = Probe{};
    }
    if (g_probe.channel.fd < 0) {
      uint32_t ignored = 0;
      std::string shown, why;
      if (!Handshake(kOpProbe, &g_probe.channel, &ignored, &shown, &why)) {
        *result = Fail(kNoServerResult, why);
      } else {
        g_probe.pid = getpid();
        Log(LogLevel::kDebug,
            "remote: asking %s about its devices; no slice is held until the first call that needs a GPU",
            shown.c_str());
      }
    }
    if (*result == CUDA_SUCCESS) {
      const uint32_t seq = ++g_probe.seq;
      FrameHeader h;
      if (!WriteFrame(g_probe.channel, FrameHeader{.seq = seq, .op = op}, request.buffer().data(), request.size())) {
        *result = Fail(kLostResult, std::string("lost the server while sending ") + kOpNames[op]);
      } else if (ReadFrame(g_probe.channel, kMaxFrame, &h, reply) != FrameRead::kOk) {
        *result = Fail(kLostResult, std::string("lost the server during ") + kOpNames[op]);
      } else if (h.seq != seq || h.op != (op | kReplyBit)) {
        *result = Fail(kLostResult, std::string("the server's answer to ") + kOpNames[op] + " is not for it");
      } else {
        asked = ProbeAsked::kAnswered;
        int32_t value = 0;
        if (op == kOp_cuInit && reply->size() >= sizeof value) std::memcpy(&value, reply->data(), sizeof value);
        if (op == kOp_cuInit && value == CUDA_SUCCESS && reply->size() >= sizeof value && !g_init_replay) {
          // The request: the prefix, then u32 Flags.
          uint32_t flags = 0;
          if (request.size() >= kRequestPrefixSize + sizeof flags) {
            std::memcpy(&flags, request.buffer().data() + kRequestPrefixSize, sizeof flags);
          }
          g_init_replay = true;
          g_init_flags = flags;
        }
      }
    }
  }
  pthread_mutex_unlock(&g_probe_mu);
  return asked;
}

}  // namespace gslice::remote
