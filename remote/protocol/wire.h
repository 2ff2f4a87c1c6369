// The remote GPU protocol: length-prefixed frames over a stream socket, and the bounded
// encoder/decoder both sides use for what is inside them.
//
// Frame:   u32 length | u32 seq | u32 op | length bytes of payload       (little endian)
//   A request's op is an Op of calls.h (or kOpHello, kOpProbe, kOpToken); its reply carries
//   op | kReplyBit and the same seq. The requests of one client thread (a lane) are answered
//   in order; those of different lanes may be answered in any order (each lane has its own
//   serving thread).
// Hello:   the client's first frame (op kOpHello): u32 kMagic, u16 kVersion, u16 0,
//          u64 kCallsHash, then the slice it asks for as strings (memory, compute, share,
//          class, idle timeout: what `gslice run` takes), the client's host name and u8 trace
//          (1: the client records a timeline, docs/trace.md: the worker records too). Its
//          reply: u32 kMagic, u16 kVersion, u16 0, i32 status (0: accepted), u32 worker pid
//          (0 for a probe), string message.
// Probe:   the same frame with op kOpProbe: the server answers device queries (the calls
//          AnswersWithoutSlice allows) from a process that loads the driver but starts no
//          worker and holds no slice; the client attaches (kOpHello, a second connection)
//          at its first call that needs a GPU. Over TLS the token frame comes first, as for
//          a Hello.
// Rings:   over a unix socket only, the client's first frame after an accepted Hello may be
//          op kOpRings with a shared-memory file attached: every later frame then travels on
//          shared-memory rings instead of the socket (shm_ring.h).
// Token:   over TLS only, the client's first frame (op kOpToken): the token's bytes, at most
//          kMaxToken. No reply: a wrong token gets a refused Hello (or Probe) reply.
// Trace:   with trace set in the Hello, two more requests (each with the Request prefix below,
//          answered in order like a call): kOpTraceClock, answered at once by the worker's
//          reader with i32 0 and i64 the worker's timeline clock (ns), for the client's clock
//          alignment; kOpTraceFetch, answered on its lane after every async request before it
//          has run, with EncodeTraceFetchReply: the worker's record of the requests it served
//          (bounded by kMaxServeRecords) and its timeline part (gslice/trace_format.h, at most
//          kMaxTracePart bytes). A worker that does not record answers either with
//          CUDA_ERROR_NOT_SUPPORTED alone.
// Request: u64 the client thread's current context, u32 its lane (a number per client thread,
//          reused after the thread exits), then the call's arguments; a buffer the worker
//          passes to the driver in place starts at a multiple of 16 bytes (zero padding).
// Reply:   i32 CUresult, then (on CUDA_SUCCESS only) what the driver wrote.
//
// Contract: every length and count read from the peer is checked against what is left in the
// frame and against the bounds below before it is used; a Reader never reads past its span
// and, once a read failed, fails every later one. Bad bytes therefore give a refused frame,
// never an out-of-bounds access. Both ends are x86-64 Linux: values travel as their bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace gslice::remote {

inline constexpr uint32_t kMagic = 0x524c5347;  // "GSLR"
inline constexpr uint16_t kVersion = 4;
inline constexpr uint32_t kHeaderSize = 12;
// The largest host buffer one call carries (a module image, a piece of a copy); larger ones
// are refused on the client with CUDA_ERROR_INVALID_VALUE and a log line.
inline constexpr uint64_t kMaxBuffer = 256ull << 20;
// Copies larger than this go in pieces of it (calls.def: split), so that a large copy
// streams instead of holding a whole buffer in a message on each side.
inline constexpr uint64_t kSplitBytes = 32ull << 20;
// The largest frame: one buffer plus the call's other arguments.
inline constexpr uint32_t kMaxFrame = static_cast<uint32_t>(kMaxBuffer) + 64 * 1024;
inline constexpr uint32_t kMaxString = 4096;
inline constexpr uint32_t kMaxHelloString = 128;
inline constexpr uint32_t kReplyBit = 0x80000000u;
// On a request of an async call (calls.def: async): the client waits for this one
// (GSLICE_REMOTE_WAIT), so the worker answers it with its own result, as any other call.
inline constexpr uint32_t kWaitBit = 0x40000000u;
inline constexpr uint32_t kOpHello = 0x7fff0001u;
inline constexpr uint32_t kOpToken = 0x7fff0002u;
inline constexpr uint32_t kOpProbe = 0x7fff0003u;
// 0x7fff0004 is kOpRings (shm_ring.h), 0x7fff0005 unused.
inline constexpr uint32_t kOpTraceClock = 0x7fff0006u;
inline constexpr uint32_t kOpTraceFetch = 0x7fff0007u;
// Page-locked host memory shared with a worker on the same host (remote/client/host_memory.cc,
// remote/server/shared_host.h), only once the connection is on shared-memory rings:
//   kOpHostShare   request: prefix | u64 client address | u64 bytes (a multiple of the page
//                  size). Right before it, a frame of the same op and seq, payload empty, went
//                  on the socket with the memfd of the memory attached (SCM_RIGHTS).
//                  Answer: i32 result | u64 the worker's address of it | u64 its device
//                  pointer (0: not mapped into the GPU's address space).
//   kOpHostUnshare request: prefix | u64 the worker's address. Answer: i32 result.
inline constexpr uint32_t kOpHostShare = 0x7fff0008u;
inline constexpr uint32_t kOpHostUnshare = 0x7fff0009u;
// Worker -> client, seq 0, payload u64 token | the bytes: a device-to-host copy on a stream into
// the client's page-locked memory (calls.def: hostout, presence 3 with the client's token),
// sent once the copy completed and before the answer of any request served after that, so the
// bytes are in the program's memory by the time a synchronisation says the copy is done.
inline constexpr uint32_t kOpDeferredData = 0x7fff000au;
inline constexpr uint32_t kMaxToken = 1024;
// Bounds of a kOpTraceFetch answer: together (64 MiB of records, 192 MiB of part) within
// kMaxFrame.
inline constexpr uint32_t kMaxServeRecords = 1u << 21;
inline constexpr uint64_t kMaxTracePart = kMaxBuffer - (64ull << 20);
// Lanes a worker serves at once: a client thread beyond them shares a lane (its calls then
// wait behind that lane's).
inline constexpr uint32_t kMaxLanes = 256;

// What starts every request's payload (see Request above).
struct RequestPrefix {
  uint64_t context = 0;
  uint32_t lane = 0;
};
inline constexpr size_t kRequestPrefixSize = sizeof(uint64_t) + sizeof(uint32_t);

struct FrameHeader {
  uint32_t length = 0;
  uint32_t seq = 0;
  uint32_t op = 0;
};

void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderSize]);
// False when the declared length exceeds max_length (the peer is refused, nothing allocated).
bool DecodeHeader(const uint8_t in[kHeaderSize], uint32_t max_length, FrameHeader* h);

// Appends values to a growing buffer.
class Writer {
 public:
  template <typename T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    PutBytes(&v, sizeof v);
  }
  void PutBytes(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = buf_.size();
    buf_.resize(at + n);
    std::memcpy(buf_.data() + at, p, n);
  }
  // Zero bytes up to a multiple of n from the payload's start: a buffer the worker hands the
  // driver in place starts aligned (the payload itself is allocated aligned).
  void PadTo(size_t n) {
    while (buf_.size() % n != 0) buf_.push_back(0);
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    PutBytes(s.data(), s.size());
  }
  std::vector<uint8_t>& buffer() { return buf_; }
  const std::vector<uint8_t>& buffer() const { return buf_; }
  size_t size() const { return buf_.size(); }

 private:
  std::vector<uint8_t> buf_;
};

// Reads values from a span, bounds-checked (see the contract above).
class Reader {
 public:
  Reader() = default;
  Reader(const uint8_t* p, size_t n) : begin_(p), p_(p), n_(n) {}

  template <typename T>
  bool Get(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    return GetInto(v, sizeof *v);
  }
  // A presence flag: exactly 0 or 1.
  bool GetFlag(uint8_t* v) { return Get(v) && (*v <= 1 || Fail()); }
  bool GetInto(void* dst, size_t n) {
    const uint8_t* src = nullptr;
    if (!GetBytes(n, &src)) return false;
    if (n != 0) std::memcpy(dst, src, n);
    return true;
  }
  // Points *out at the next n bytes (valid as long as the span).
  bool GetBytes(uint64_t n, const uint8_t** out) {
    if (!ok_ || n > n_) return Fail();
    *out = p_;
    p_ += n;
    n_ -= n;
    return true;
  }
  bool GetString(uint32_t max, std::string* s) {
    uint32_t len = 0;
    const uint8_t* data = nullptr;
    if (!Get(&len) || len > max || !GetBytes(len, &data)) return Fail();
    s->assign(reinterpret_cast<const char*>(data), len);
    return true;
  }
  // Skips the Writer's PadTo(n).
  bool SkipTo(size_t n) {
    const size_t pad = (n - static_cast<size_t>(p_ - begin_) % n) % n;
    const uint8_t* ignored = nullptr;
    return GetBytes(pad, &ignored);
  }
  bool AtEnd() const { return ok_ && n_ == 0; }
  bool ok() const { return ok_; }
  size_t left() const { return n_; }

 private:
  bool Fail() {
    ok_ = false;
    return false;
  }
  const uint8_t* begin_ = nullptr;
  const uint8_t* p_ = nullptr;
  size_t n_ = 0;
  bool ok_ = true;
};

// What a client asks for: the slice its worker runs in, as `gslice run` takes it.
struct Hello {
  uint64_t calls_hash = 0;
  std::string memory;   // --memory: "2GiB" or "2GiB,1GiB"
  std::string compute;  // the hard cap, gslice run --cap: "30%" or ""
  std::string share;    // --share
  std::string slice_class;  // --class: guaranteed, opportunistic or ""
  std::string idle_timeout;  // --idle-timeout: "30m", "600s" or "" (never)
  std::string host;          // the client's host name, shown with its slice ("" unknown)
  bool trace = false;        // the client records a timeline: the worker records too
};

struct HelloReply {
  int32_t status = 0;  // 0: accepted; else message says why not
  uint32_t worker_pid = 0;
  std::string message;
};

void EncodeRequestPrefix(const RequestPrefix& p, Writer* w);
// False when the payload is too short or the lane is kMaxLanes or more.
bool DecodeRequestPrefix(Reader* r, RequestPrefix* p);

// One request a worker served, for the client's timeline: the frame's seq and op, the lane,
// the serving thread's OS id and when it ran (the worker's timeline clock, ns). A request
// not waited for (async) ran after the client returned from it.
struct ServeRecord {
  uint32_t seq = 0;
  uint32_t op = 0;
  uint32_t lane = 0;
  uint32_t tid = 0;
  int64_t start = 0;
  int64_t end = 0;
};
static_assert(sizeof(ServeRecord) == 32);
static_assert(uint64_t{kMaxServeRecords} * sizeof(ServeRecord) + kMaxTracePart + 64 <= kMaxFrame,
              "a kOpTraceFetch answer fits one frame");

// kOpTraceFetch's answer after its i32 0: u64 dropped serve records, u32 count, the records,
// then the part as a u64 length and its bytes.
void EncodeTraceFetchReply(uint64_t dropped, const std::vector<ServeRecord>& served, const std::string& part,
                           Writer* w);
// False for a count or length past the bounds above or past the frame, or trailing bytes.
bool DecodeTraceFetchReply(Reader* r, uint64_t* dropped, std::vector<ServeRecord>* served, std::string* part);

void EncodeHello(const Hello& h, Writer* w);
// False, with the reason, for a wrong magic or version, trailing bytes, or a string that is
// too long or holds anything but printable ASCII.
bool DecodeHello(Reader* r, Hello* h, std::string* error);
void EncodeHelloReply(const HelloReply& h, Writer* w);
bool DecodeHelloReply(Reader* r, HelloReply* h, std::string* error);

}  // namespace gslice::remote
