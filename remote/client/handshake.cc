#include "handshake.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "calls.h"
#include "client_trace.h"
#include "gslice/options.h"
#include "log.h"
#include "tls.h"
#include "token.h"
#include "wire.h"

namespace gslice::remote {

namespace {

bool ReadWithin(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  int rc;
  do {
    rc = poll(&p, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  return rc > 0;
}

// The token for a tls:// server (GSLICE_REMOTE_TOKEN_FILE), read before connecting.
bool ReadToken(std::string* token, std::string* error) {
  const char* path = OptionValue(Option::RemoteTokenFile);
  if (path[0] == '\0') {
    *error = std::string(OptionEnv(Option::RemoteTokenFile)) + " is not set: a tls:// server wants its token";
    return false;
  }
  return ReadTokenFile(path, token, error);
}

}  // namespace

void CloseChannel(Channel* c) {
  if (c->tls != nullptr) TlsFree(c->tls);
  if (c->fd >= 0) close(c->fd);
  *c = Channel{};
}

bool Handshake(uint32_t op, Channel* out, uint32_t* worker_pid, std::string* shown, std::string* why) {
  shim::InitLog();
  const char* text = OptionValue(Option::Remote);
  if (text[0] == '\0') {
    *why = std::string(OptionEnv(Option::Remote)) +
           " is not set: this libcuda.so.1 forwards to a gslice-remoted "
           "(run the program with gslice run --remote ADDR)";
    return false;
  }
  Address address;
  std::string error;
  if (!ParseAddress(text, &address, why)) return false;
  *shown = address.text;
  std::string token;
  if (address.tls && !ReadToken(&token, &error)) {
    *why = address.text + ": " + error;
    return false;
  }
  const int fd = Connect(address, why);
  if (fd < 0) return false;
  Channel channel{.fd = fd};
  auto refuse = [&](const std::string& reason) {
    CloseChannel(&channel);
    *why = reason;
    return false;
  };
  if (address.tls) {
    // TLS, then the token as the first frame inside it.
    channel.tls = TlsConnect(fd, address.host, OptionValue(Option::RemoteCa), kHelloTimeoutMs, &error);
    const bool sent = channel.tls != nullptr &&
                      WriteFrame(channel, FrameHeader{.seq = 0, .op = kOpToken}, token.data(), token.size());
    std::fill(token.begin(), token.end(), '\0');
    if (!sent) {
      return refuse(address.text + ": " + (channel.tls != nullptr ? "the server closed the connection" : error));
    }
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  Hello hello{.calls_hash = kCallsHash,
              .memory = OptionValue(Option::Memory),
              .compute = OptionValue(Option::Compute),
              .share = OptionValue(Option::Share),
              .slice_class = OptionIsSet(Option::Class) ? OptionValue(Option::Class) : "",
              .idle_timeout = OptionValue(Option::IdleTimeout),
              .host = std::string(host).substr(0, kMaxHelloString),
              .trace = ClientTracing()};
  Writer w;
  EncodeHello(hello, &w);
  if (!WriteFrame(channel, FrameHeader{.seq = 0, .op = op}, w.buffer().data(), w.size())) {
    return refuse("handshake with " + address.text + ": the server closed the connection");
  }
  FrameHeader h;
  std::vector<uint8_t> payload;
  if (channel.tls == nullptr && !ReadWithin(fd, kHelloTimeoutMs)) {
    return refuse("handshake with " + address.text + ": no answer within 30 s");
  }
  if (channel.tls != nullptr) TlsSetReadTimeout(channel.tls, kHelloTimeoutMs);
  const FrameRead got = ReadFrame(channel, kMaxString + 64, &h, &payload);
  if (channel.tls != nullptr) TlsSetReadTimeout(channel.tls, 0);
  // A refusal before the server read which handshake this is (a wrong token) answers kOpHello.
  if (got != FrameRead::kOk || (h.op != (op | kReplyBit) && h.op != (kOpHello | kReplyBit))) {
    return refuse("handshake with " + address.text +
                  ": the server closed the connection or gave no answer within 30 s (see its log)");
  }
  Reader r(payload.data(), payload.size());
  HelloReply reply;
  if (!DecodeHelloReply(&r, &reply, &error)) return refuse(address.text + ": " + error);
  if (reply.status != 0) return refuse(address.text + " refused this client: " + reply.message);
  if (h.op != (op | kReplyBit)) return refuse("handshake with " + address.text + ": the answer is not for it");
  *worker_pid = reply.worker_pid;
  *out = channel;
  return true;
}

}  // namespace gslice::remote
