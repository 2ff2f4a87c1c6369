#include "wire.h"

namespace gslice::remote {

namespace {

void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

bool Printable(const std::string& s) {
  for (char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

bool ReadPreamble(Reader* r, std::string* error) {
  uint32_t magic = 0;
  uint16_t version = 0, zero = 0;
  if (!r->Get(&magic) || !r->Get(&version) || !r->Get(&zero)) {
    *error = "handshake too short";
    return false;
  }
  if (magic != kMagic) {
    *error = "not a gslice remote peer (wrong magic)";
    return false;
  }
  if (version != kVersion) {
    *error = "protocol version " + std::to_string(version) + ", this side speaks " + std::to_string(kVersion);
    return false;
  }
  return true;
}

}  // namespace

void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderSize]) {
  Put32(out, h.length);
  Put32(out + 4, h.seq);
  Put32(out + 8, h.op);
}

bool DecodeHeader(const uint8_t in[kHeaderSize], uint32_t max_length, FrameHeader* h) {
  h->length = Get32(in);
  h->seq = Get32(in + 4);
  h->op = Get32(in + 8);
  return h->length <= max_length;
}

void EncodeRequestPrefix(const RequestPrefix& p, Writer* w) {
  w->Put(p.context);
  w->Put(p.lane);
}

bool DecodeRequestPrefix(Reader* r, RequestPrefix* p) {
  return r->Get(&p->context) && r->Get(&p->lane) && p->lane < kMaxLanes;
}

void EncodeHello(const Hello& h, Writer* w) {
  w->Put(kMagic);
  w->Put(kVersion);
  w->Put<uint16_t>(0);
  w->Put(h.calls_hash);
  w->PutString(h.memory);
  w->PutString(h.compute);
  w->PutString(h.share);
  w->PutString(h.slice_class);
  w->PutString(h.idle_timeout);
  w->PutString(h.host);
  w->Put<uint8_t>(h.trace ? 1 : 0);
}

bool DecodeHello(Reader* r, Hello* h, std::string* error) {
  if (!ReadPreamble(r, error)) return false;
  uint8_t trace = 0;
  if (!r->Get(&h->calls_hash) || !r->GetString(kMaxHelloString, &h->memory) ||
      !r->GetString(kMaxHelloString, &h->compute) || !r->GetString(kMaxHelloString, &h->share) ||
      !r->GetString(kMaxHelloString, &h->slice_class) || !r->GetString(kMaxHelloString, &h->idle_timeout) ||
      !r->GetString(kMaxHelloString, &h->host) || !r->GetFlag(&trace) || !r->AtEnd()) {
    *error = "malformed handshake";
    return false;
  }
  h->trace = trace != 0;
  for (const std::string* s : {&h->memory, &h->compute, &h->share, &h->slice_class, &h->idle_timeout, &h->host}) {
    if (!Printable(*s)) {
      *error = "handshake strings must be printable ASCII";
      return false;
    }
  }
  return true;
}

void EncodeTraceFetchReply(uint64_t dropped, const std::vector<ServeRecord>& served, const std::string& part,
                           Writer* w) {
  w->Put(dropped);
  w->Put(static_cast<uint32_t>(served.size()));
  w->PutBytes(served.data(), served.size() * sizeof(ServeRecord));
  w->Put(static_cast<uint64_t>(part.size()));
  w->PutBytes(part.data(), part.size());
}

bool DecodeTraceFetchReply(Reader* r, uint64_t* dropped, std::vector<ServeRecord>* served, std::string* part) {
  uint32_t count = 0;
  uint64_t length = 0;
  const uint8_t* records = nullptr;
  const uint8_t* text = nullptr;
  if (!r->Get(dropped) || !r->Get(&count) || count > kMaxServeRecords ||
      !r->GetBytes(uint64_t{count} * sizeof(ServeRecord), &records) || !r->Get(&length) || length > kMaxTracePart ||
      !r->GetBytes(length, &text) || !r->AtEnd()) {
    return false;
  }
  served->resize(count);
  if (count != 0) std::memcpy(served->data(), records, uint64_t{count} * sizeof(ServeRecord));
  part->assign(reinterpret_cast<const char*>(text), length);
  return true;
}

void EncodeHelloReply(const HelloReply& h, Writer* w) {
  w->Put(kMagic);
  w->Put(kVersion);
  w->Put<uint16_t>(0);
  w->Put(h.status);
  w->Put(h.worker_pid);
  w->PutString(h.message);
}

bool DecodeHelloReply(Reader* r, HelloReply* h, std::string* error) {
  if (!ReadPreamble(r, error)) return false;
  if (!r->Get(&h->status) || !r->Get(&h->worker_pid) || !r->GetString(kMaxString, &h->message) || !r->AtEnd()) {
    *error = "malformed handshake reply";
    return false;
  }
  return true;
}

}  // namespace gslice::remote
