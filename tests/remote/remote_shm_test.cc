// The same-host fast path on the simulated driver: a client on a unix socket moves its calls
// to shared-memory rings (remote/protocol/shm_ring.h) unless GSLICE_REMOTE_SHM is off; the
// same programs give the same output both ways; a client or worker that dies is noticed as
// on the socket; and a client that scribbles over the rings ends only its own worker.
// Every test uses its own simulated node, ledger and socket (pid-based names) and removes them.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "calls.h"
#include "node.h"
#include "remote_test_support.h"
#include "shm_ring.h"
#include "socket_io.h"
#include "test_support.h"
#include "wire.h"

namespace gslice::remote {
namespace {

using gslice::test::Child;

const std::string kBin = GSLICE_TEST_BIN;
const std::string kProbe = GSLICE_TEST_PROBE;
const std::string kOn = "calls go through shared memory";

std::string Prefix() { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-shm"; }
std::string SocketPath() { return "/tmp/gslice-test-" + std::to_string(getpid()) + "-shm.sock"; }

using shared::Direct;
using shared::Gone;
using shared::GoneWithin;
using shared::Remote;
using shared::Result;
using shared::WorkerPid;

Result RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  return shared::RunProgram(argv, env, 90000);
}

class RemoteShm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared::SetUpSimWorld(Prefix(), {"GSLICE_REMOTE_SHM", "GSLICE_REMOTE_SHM_SPIN"});
    if (const std::string asan = GSLICE_TEST_ASAN_RUNTIME; !asan.empty()) setenv("LD_PRELOAD", asan.c_str(), 1);
    unlink(SocketPath().c_str());
    server_ = new Child({kBin + "/gslice-remoted", "--listen", "unix:" + SocketPath(), "--listen",
                         "tcp://127.0.0.1:0", "--sim", "--allow-root-tenant"});
    for (int i = 0; i < 2; ++i) {
      const std::string line = server_->ReadUntil("gslice-remoted: listening on", 20000);
      ASSERT_NE(line, "");
      if (const size_t at = line.find("tcp://"); at != std::string::npos) {
        tcp_ = line.substr(at, line.find(' ', at) - at);
      }
    }
    ASSERT_NE(tcp_, "");
  }

  static void TearDownTestSuite() {
    shared::StopServer(&server_, SocketPath());
    shared::RemoveSimWorld(Prefix());
  }

  static std::string Address() { return "unix:" + SocketPath(); }

  static uint64_t SimUsed() { return shared::SimUsed(); }

  static Child* server_;
  static std::string tcp_;
};

Child* RemoteShm::server_ = nullptr;
std::string RemoteShm::tcp_;

TEST_F(RemoteShm, UnixUsesTheRingsUnlessTurnedOffAndTcpNever) {
  const std::vector<std::string> alloc = {kProbe, "alloc", "4096"};
  Result on = RunProgram(Remote(Address(), "1GiB", alloc), {"GSLICE_LOG=info"});
  EXPECT_NE(on.out.find(kOn), std::string::npos) << on.out;
  EXPECT_NE(on.out.find("CUDA_SUCCESS\n"), std::string::npos) << on.out;
  for (const char* off : {"off", "0"}) {
    Result r = RunProgram(Remote(Address(), "1GiB", alloc), {"GSLICE_LOG=info", std::string("GSLICE_REMOTE_SHM=") + off});
    EXPECT_EQ(r.out.find(kOn), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("no shared-memory rings"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("CUDA_SUCCESS\n"), std::string::npos) << r.out;
  }
  Result tcp = RunProgram(Remote(tcp_, "1GiB", alloc), {"GSLICE_LOG=info"});
  EXPECT_EQ(tcp.out.find(kOn), std::string::npos) << tcp.out;
  EXPECT_EQ(tcp.out.find("no shared-memory rings"), std::string::npos) << tcp.out;
  EXPECT_NE(tcp.out.find("CUDA_SUCCESS\n"), std::string::npos) << tcp.out;
}

TEST_F(RemoteShm, AClientThatCannotMakeTheRingsStaysOnTheSocketWithOneLogLine) {
  // memfd_create refused (a seccomp filter, an old kernel): one warning, then the calls work
  // on the socket.
  std::string preload = GSLICE_TEST_NO_MEMFD;
  if (const char* asan = getenv("LD_PRELOAD"); asan != nullptr && asan[0] != '\0') {
    preload = std::string(asan) + ":" + preload;
  }
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "bigcopy", "1048588"}), {"LD_PRELOAD=" + preload});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("bigcopy ok\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(kOn), std::string::npos) << r.out;
  const std::string warning = "no shared-memory rings with the worker (memfd_create: Function not implemented)";
  const size_t at = r.out.find(warning);
  EXPECT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(warning, at + 1), std::string::npos) << "more than one line: " << r.out;
}

// The representative programs of remote_sim_test, with the rings and without: the driver
// program, the example (256 MiB copies), copies in pieces, a deferred async error, threads.
TEST_F(RemoteShm, ProgramsGiveTheSameOutputWithTheRingsAndOnTheSocket) {
  const std::vector<std::vector<std::string>> programs = {
      {kProbe, "check"},
      {kBin + "/gslice-example"},
      {kProbe, "bigcopy", std::to_string(kSplitBytes + 12)},
      {kProbe, "deferred"},
      {kProbe, "threads", "2000"},
      {kProbe, "handoff"},
      {kProbe, "callbacks"},
  };
  for (const auto& program : programs) {
    SCOPED_TRACE(program[program.size() > 1 ? 1 : 0]);
    Result direct = RunProgram(Direct("512MiB", program));
    EXPECT_EQ(direct.code, 0) << direct.out;
    Result on = RunProgram(Remote(Address(), "512MiB", program), {"GSLICE_REMOTE_SHM=on"});
    Result off = RunProgram(Remote(Address(), "512MiB", program), {"GSLICE_REMOTE_SHM=off"});
    EXPECT_EQ(on.code, 0) << on.out;
    EXPECT_EQ(off.code, 0) << off.out;
    EXPECT_EQ(on.out, off.out);
    // A launch's error comes at the next synchronisation remotely (queued), at once directly.
    if (program.size() < 2 || program[1] != "deferred") {
      EXPECT_EQ(on.out, direct.out);
    }
  }
}

TEST_F(RemoteShm, AForkedChildGetsRingsOfItsOwnAndLeavesTheParentsAlone) {
  // The parent's rings are not inherited (MADV_DONTFORK): the child attaches anew, with rings
  // of its own, while the parent's stay its own.
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "fork"}), {"GSLICE_LOG=info"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("child ok\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parent ok\n"), std::string::npos) << r.out;
  size_t rings = 0;
  for (size_t at = 0; (at = r.out.find(kOn, at)) != std::string::npos; ++at) ++rings;
  EXPECT_EQ(rings, 2u) << r.out;
}

TEST_F(RemoteShm, AKilledClientsWorkerIsGoneWithinOneSecond) {
  for (const char* mode : {"hold", "busy"}) {
    SCOPED_TRACE(mode);
    std::vector<std::string> cmd = std::string(mode) == "hold"
                                       ? std::vector<std::string>{kProbe, "hold", std::to_string(256ull << 20)}
                                       : std::vector<std::string>{kProbe, "busy", "30000"};
    Child client(Remote(Address(), "1GiB", cmd), {"GSLICE_LOG=info"});
    const pid_t worker = WorkerPid(client.ReadUntil("gslice[", 20000));
    ASSERT_GT(worker, 0);
    ASSERT_NE(client.ReadUntil("gslice[", 20000).find(kOn), std::string::npos);
    ASSERT_NE(client.ReadUntil(std::string(mode) == "hold" ? "held" : "busy", 20000), "");
    ASSERT_GT(SimUsed(), 0u);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // busy: in cuCtxSynchronize
    client.Kill(SIGKILL);
    client.Wait(nullptr, 5000);
    const auto start = std::chrono::steady_clock::now();
    while (!(Gone(worker) && SimUsed() == 0) && std::chrono::steady_clock::now() - start < std::chrono::seconds(3)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    EXPECT_TRUE(Gone(worker)) << "worker " << worker << " still runs after " << took.count() << " ms";
    EXPECT_EQ(SimUsed(), 0u);
    EXPECT_LT(took.count(), 1000);
  }
}

TEST_F(RemoteShm, AWorkerKilledMidCallIsADeviceErrorWithinFiveSeconds) {
  // Killed while the client waits in the ring for cuCtxSynchronize's answer: asleep in its
  // futex (spin 0) or after the default spin.
  for (const char* spin : {"0", "20"}) {
    SCOPED_TRACE(spin);
    Child client(Remote(Address(), "1GiB", {kProbe, "busy", "30000"}),
                 {"GSLICE_LOG=info", std::string("GSLICE_REMOTE_SHM_SPIN=") + spin});
    const pid_t worker = WorkerPid(client.ReadUntil("gslice[", 20000));
    ASSERT_GT(worker, 0);
    ASSERT_NE(client.ReadUntil("gslice[", 20000).find(kOn), std::string::npos);
    ASSERT_NE(client.ReadUntil("busy", 20000), "");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(worker, SIGKILL);
    const auto start = std::chrono::steady_clock::now();
    std::string rest;
    EXPECT_EQ(client.Wait(&rest, 5000), 0) << rest;
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    EXPECT_LT(took.count(), 5000) << rest;
    EXPECT_NE(rest.find("CUDA_ERROR_DEVICE_UNAVAILABLE"), std::string::npos) << rest;
    EXPECT_NE(rest.find("lost the server"), std::string::npos) << rest;
    EXPECT_NE(rest.find("cuCtxSynchronize"), std::string::npos) << rest;
  }
}

// A raw client that sets up the rings itself and then writes into them what it likes.
class RawRings {
 public:
  RawRings() {
    std::string error;
    Address a;
    ParseAddress("unix:" + SocketPath(), &a, &error);
    channel_.fd = Connect(a, &error);
    timeval t = {.tv_sec = 20, .tv_usec = 0};
    setsockopt(channel_.fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  }
  ~RawRings() {
    if (channel_.fd >= 0) close(channel_.fd);
    // The worker's mapping is its own; this process's goes (no thread of the test uses it).
    if (channel_.rings != nullptr) {
      CloseRings(channel_.rings);
      FreeRings(channel_.rings);
    }
  }
  // Hello, then the rings; the worker's pid.
  pid_t Start() {
    Writer w;
    EncodeHello(gslice::remote::Hello{.calls_hash = kCallsHash, .memory = "256MiB", .compute = "", .share = "",
                                      .slice_class = "", .idle_timeout = "", .host = ""},
                &w);
    if (!WriteFrame(channel_.fd, FrameHeader{.seq = 0, .op = kOpHello}, w.buffer().data(), w.size())) return -1;
    FrameHeader h;
    std::vector<uint8_t> p;
    if (ReadFrame(channel_.fd, kMaxFrame, &h, &p) != FrameRead::kOk) return -1;
    Reader r(p.data(), p.size());
    HelloReply reply;
    std::string error;
    if (!DecodeHelloReply(&r, &reply, &error) || reply.status != 0) return -1;
    if (OfferRings(&channel_, RingsOptions{.ring_bytes = kMinRingBytes, .spin_us = 0}, 20000, &error) !=
        RingsOffer::kOn) {
      ADD_FAILURE() << error;
      return -1;
    }
    return static_cast<pid_t>(reply.worker_pid);
  }
  // cuDriverGetVersion through the rings: its result, or -1 when the worker is gone.
  int Version() {
    Writer w;
    EncodeRequestPrefix(RequestPrefix{}, &w);
    w.Put<uint8_t>(1);
    if (!WriteFrame(channel_, FrameHeader{.seq = ++seq_, .op = kOp_cuDriverGetVersion}, w.buffer().data(), w.size())) {
      return -1;
    }
    FrameHeader h;
    std::vector<uint8_t> p;
    if (ReadFrame(channel_, kMaxFrame, &h, &p) != FrameRead::kOk) return -1;
    int32_t result = -2;
    Reader reader(p.data(), p.size());
    reader.Get(&result);
    return result;
  }
  // One request on the rings and its answer: the result, and *reply what followed it; -1 when
  // the worker is gone. pass_fd >= 0: first a frame of the same op and seq on the socket, with
  // the descriptor (wire.h: kOpHostShare).
  int Call(uint32_t op, const Writer& payload, std::vector<uint8_t>* reply = nullptr, int pass_fd = -1) {
    const uint32_t seq = ++seq_;
    if (pass_fd >= 0 && !SendFrameWithFd(channel_.fd, FrameHeader{.seq = seq, .op = op}, nullptr, 0, pass_fd)) {
      return -1;
    }
    if (!WriteFrame(channel_, FrameHeader{.seq = seq, .op = op}, payload.buffer().data(), payload.size())) return -1;
    FrameHeader h;
    std::vector<uint8_t> p;
    if (ReadFrame(channel_, kMaxFrame, &h, &p) != FrameRead::kOk || h.seq != seq) return -1;
    int32_t result = -2;
    Reader reader(p.data(), p.size());
    reader.Get(&result);
    if (reply != nullptr) reply->assign(p.begin() + std::min<size_t>(p.size(), sizeof result), p.end());
    return result;
  }
  // cuInit and the primary context, made current for later requests (context()).
  bool MakeContext() {
    Writer init;
    EncodeRequestPrefix(RequestPrefix{}, &init);
    init.Put<uint32_t>(0);
    if (Call(kOp_cuInit, init) != CUDA_SUCCESS) return false;
    Writer retain;
    EncodeRequestPrefix(RequestPrefix{}, &retain);
    retain.Put<uint8_t>(1);
    retain.Put<CUdevice>(0);
    std::vector<uint8_t> reply;
    if (Call(kOp_cuDevicePrimaryCtxRetain, retain, &reply) != CUDA_SUCCESS) return false;
    Reader r(reply.data(), reply.size());
    return r.Get(&context_);
  }
  Writer Request() const {
    Writer w;
    EncodeRequestPrefix(RequestPrefix{.context = context_, .lane = 0}, &w);
    return w;
  }
  RingView Requests() { return ViewRing(channel_.rings, RingSide::kClient); }
  RingView Replies() { return ViewRing(channel_.rings, RingSide::kWorker); }
  const Channel& channel() const { return channel_; }
  // Writes raw bytes into the request ring and publishes them.
  void Scribble(const std::vector<uint8_t>& bytes) {
    RingView v = Requests();
    uint64_t head = __atomic_load_n(v.head, __ATOMIC_ACQUIRE);
    for (uint8_t b : bytes) v.data[(head++) & (v.bytes - 1)] = b;
    __atomic_store_n(v.head, head, __ATOMIC_RELEASE);
    __atomic_add_fetch(v.data_seq, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, v.data_seq, 1 /* FUTEX_WAKE */, 1, nullptr, nullptr, 0);
  }

 private:
  Channel channel_;
  uint32_t seq_ = 0;
  uint64_t context_ = 0;
};

// A page-sized memfd for kOpHostShare, sealed as the client seals it unless told otherwise.
int PageFile(uint64_t bytes, bool sealed) {
  const int fd = memfd_create("gslice-test-page-locked", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) return -1;
  if (sealed && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) return -1;
  return fd;
}

TEST_F(RemoteShm, SharedPageLockedMemoryIsTheOnlyHostMemoryAClientCanNameToItsWorker) {
  // A worker maps only a sealed memfd of the announced size, and serves a copy that names
  // shared memory only within a range it mapped: no other memory of its own is reachable.
  RawRings raw;
  const pid_t worker = raw.Start();
  ASSERT_GT(worker, 0);
  ASSERT_TRUE(raw.MakeContext());
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  auto share = [&](uint64_t announced, uint64_t file, bool sealed, uint64_t* worker_addr) {
    const int fd = PageFile(file, sealed);
    EXPECT_GE(fd, 0);
    Writer w = raw.Request();
    w.Put<uint64_t>(0);  // no address wished for
    w.Put<uint64_t>(announced);
    std::vector<uint8_t> reply;
    const int result = raw.Call(kOpHostShare, w, &reply, fd);
    close(fd);
    Reader r(reply.data(), reply.size());
    uint64_t device = 0;
    if (result == CUDA_SUCCESS) {
      EXPECT_TRUE(r.Get(worker_addr) && r.Get(&device) && r.AtEnd());
    }
    return result;
  };
  uint64_t at = 0;
  EXPECT_EQ(share(page, page, false, &at), CUDA_ERROR_INVALID_VALUE) << "an unsealed file";
  EXPECT_EQ(share(2 * page, page, true, &at), CUDA_ERROR_INVALID_VALUE) << "a file smaller than announced";
  EXPECT_EQ(share(page + 1, page + 1, true, &at), CUDA_ERROR_INVALID_VALUE) << "no whole number of pages";
  ASSERT_EQ(share(page, page, true, &at), CUDA_SUCCESS);
  ASSERT_NE(at, 0u);
  Writer alloc = raw.Request();
  alloc.Put<uint8_t>(1);
  alloc.Put<uint64_t>(page);
  std::vector<uint8_t> reply;
  ASSERT_EQ(raw.Call(kOp_cuMemAlloc_v2, alloc, &reply), CUDA_SUCCESS);
  CUdeviceptr device = 0;
  ASSERT_TRUE(Reader(reply.data(), reply.size()).Get(&device));
  // cuMemcpyHtoD_v2 naming shared memory at `from` for `bytes`.
  auto copy = [&](uint64_t from, uint64_t bytes) {
    Writer w = raw.Request();
    w.Put<CUdeviceptr>(device);
    w.Put<uint8_t>(2);
    w.Put<uint64_t>(bytes);
    w.Put<uint64_t>(from);
    w.Put<size_t>(bytes);
    return raw.Call(kOp_cuMemcpyHtoD_v2, w);
  };
  EXPECT_EQ(copy(at, page), CUDA_SUCCESS) << "the shared page";
  EXPECT_EQ(copy(at + 16, page - 16), CUDA_SUCCESS) << "within it";
  EXPECT_EQ(copy(at + 16, page), CUDA_ERROR_INVALID_VALUE) << "past its end";
  EXPECT_EQ(copy(at - page, page), CUDA_ERROR_INVALID_VALUE) << "before it";
  const uint64_t own = reinterpret_cast<uintptr_t>(&raw) & ~(page - 1);  // some address of no range
  EXPECT_EQ(copy(own, 64), CUDA_ERROR_INVALID_VALUE) << "memory it never shared";
  Writer unshare = raw.Request();
  unshare.Put<uint64_t>(at);
  EXPECT_EQ(raw.Call(kOpHostUnshare, unshare), CUDA_SUCCESS);
  EXPECT_EQ(raw.Call(kOpHostUnshare, unshare), CUDA_ERROR_INVALID_VALUE) << "twice";
  EXPECT_EQ(copy(at, page), CUDA_ERROR_INVALID_VALUE) << "after it was unshared";
  // The worker goes on.
  EXPECT_EQ(raw.Version(), CUDA_SUCCESS);
  EXPECT_FALSE(Gone(worker));
}

TEST_F(RemoteShm, ScribbledRingsEndOnlyTheirOwnWorker) {
  std::mt19937 rng(27);
  // Each case: the worker answers through the rings first, then the client breaks them; the
  // worker must end (its client's rings are its only input) and never touch memory outside them.
  const std::vector<std::string> cases = {"head past the ring", "head behind the tail", "tail past the head",
                                          "a frame longer than any", "an unknown opcode", "random bytes",
                                          "random bytes", "random bytes", "garbage futex words"};
  for (const std::string& name : cases) {
    SCOPED_TRACE(name);
    RawRings raw;
    const pid_t worker = raw.Start();
    ASSERT_GT(worker, 0);
    ASSERT_EQ(raw.Version(), CUDA_SUCCESS);
    RingView req = raw.Requests();
    if (name == "head past the ring") {
      __atomic_store_n(req.head, *req.head + req.bytes + 1, __ATOMIC_RELEASE);
      raw.Scribble({});
    } else if (name == "head behind the tail") {
      __atomic_store_n(req.head, *req.head - 8, __ATOMIC_RELEASE);
      raw.Scribble({});
    } else if (name == "tail past the head") {
      // Read more than was ever written.
      __atomic_store_n(raw.Replies().tail, *raw.Replies().tail + 4096, __ATOMIC_RELEASE);
      raw.Version();  // its answer cannot be written: the worker ends
    } else if (name == "a frame longer than any") {
      uint8_t head[kHeaderSize];
      EncodeHeader(FrameHeader{.length = kMaxFrame + 1, .seq = 9, .op = kOp_cuInit}, head);
      raw.Scribble(std::vector<uint8_t>(head, head + kHeaderSize));
    } else if (name == "an unknown opcode") {
      Writer prefix;  // a well-formed request of an opcode no client sends
      EncodeRequestPrefix(RequestPrefix{}, &prefix);
      uint8_t head[kHeaderSize];
      EncodeHeader(FrameHeader{.length = static_cast<uint32_t>(prefix.size()), .seq = 9, .op = kOpCount + 77}, head);
      std::vector<uint8_t> frame(head, head + kHeaderSize);
      frame.insert(frame.end(), prefix.buffer().begin(), prefix.buffer().end());
      raw.Scribble(frame);
    } else if (name == "random bytes") {
      std::vector<uint8_t> junk(12 + rng() % 4000);
      for (auto& b : junk) b = static_cast<uint8_t>(rng());
      raw.Scribble(junk);
    } else if (name == "garbage futex words") {
      *req.data_seq = 0xffffffffu;
      *req.consumer_waiting = 12345;
      EXPECT_EQ(raw.Version(), CUDA_SUCCESS);  // hints only: still served
      // Then a header whose length exceeds what ever arrives: the worker waits for the rest
      // (its client's problem) until the client goes.
      uint8_t head[kHeaderSize];
      EncodeHeader(FrameHeader{.length = 64, .seq = 9, .op = kOp_cuDriverGetVersion}, head);
      raw.Scribble(std::vector<uint8_t>(head, head + kHeaderSize));
      shutdown(raw.channel().fd, SHUT_RDWR);
    }
    // Random bytes may decode as a frame that waits for more bytes: closing the socket ends
    // the worker in any case; before that, the broken-ring cases must end it by themselves.
    const bool ends_by_itself = name != "random bytes" && name != "garbage futex words";
    if (ends_by_itself) {
      EXPECT_TRUE(GoneWithin(worker, 5000)) << "worker " << worker << " still runs";
    }
    shutdown(raw.channel().fd, SHUT_RDWR);
    EXPECT_TRUE(GoneWithin(worker, 2000)) << "worker " << worker << " still runs after its client went";
  }
  // Other clients are served as before.
  Result after = RunProgram(Remote(Address(), "1GiB", {kProbe, "alloc", "4096"}), {"GSLICE_LOG=info"});
  EXPECT_NE(after.out.find("CUDA_SUCCESS\n"), std::string::npos) << after.out;
  EXPECT_NE(after.out.find(kOn), std::string::npos) << after.out;
  // Nothing left behind once that client's worker has gone too.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (SimUsed() != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(SimUsed(), 0u);
}

TEST_F(RemoteShm, ASetUpTheWorkerCannotTrustIsRefusedAndTheSocketCarriesOn) {
  // No memfd with the offer, an unsealed one, one of the wrong size, and an offer after a
  // request: each refused with a reason, the connection served on the socket afterwards.
  for (const char* kind : {"no file", "unsealed", "wrong size", "late"}) {
    SCOPED_TRACE(kind);
    std::string error;
    gslice::remote::Address a;
    ParseAddress("unix:" + SocketPath(), &a, &error);
    const int fd = Connect(a, &error);
    ASSERT_GE(fd, 0) << error;
    Writer hello;
    EncodeHello(gslice::remote::Hello{.calls_hash = kCallsHash, .memory = "256MiB", .compute = "", .share = "",
                                      .slice_class = "", .idle_timeout = "", .host = ""},
                &hello);
    ASSERT_TRUE(WriteFrame(fd, FrameHeader{.seq = 0, .op = kOpHello}, hello.buffer().data(), hello.size()));
    FrameHeader h;
    std::vector<uint8_t> p;
    ASSERT_EQ(ReadFrame(fd, kMaxFrame, &h, &p), FrameRead::kOk);
    Writer version;
    EncodeRequestPrefix(RequestPrefix{}, &version);
    version.Put<uint8_t>(1);
    uint32_t seq = 0;
    if (std::string(kind) == "late") {
      ASSERT_TRUE(WriteFrame(fd, FrameHeader{.seq = ++seq, .op = kOp_cuDriverGetVersion}, version.buffer().data(),
                             version.size()));
      ASSERT_EQ(ReadFrame(fd, kMaxFrame, &h, &p), FrameRead::kOk);
    }
    Writer offer;
    EncodeRingsRequest(RingsRequest{.ring_bytes = kMinRingBytes, .spin_us = 0}, &offer);
    const int memfd = memfd_create("gslice-test-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(memfd, 0);
    const uint64_t size = std::string(kind) == "wrong size" ? kRingsHeader + kMinRingBytes : kRingsHeader + 2 * kMinRingBytes;
    ASSERT_EQ(ftruncate(memfd, static_cast<off_t>(size)), 0);
    if (std::string(kind) != "unsealed") {
      ASSERT_EQ(fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    }
    if (std::string(kind) == "no file") {
      ASSERT_TRUE(WriteFrame(fd, FrameHeader{.seq = 0, .op = kOpRings}, offer.buffer().data(), offer.size()));
    } else {
      ASSERT_TRUE(SendFrameWithFd(fd, FrameHeader{.seq = 0, .op = kOpRings}, offer.buffer().data(), offer.size(), memfd));
    }
    close(memfd);
    ASSERT_EQ(ReadFrame(fd, kMaxFrame, &h, &p), FrameRead::kOk);
    EXPECT_EQ(h.op, kOpRings | kReplyBit);
    Reader r(p.data(), p.size());
    int32_t status = 0;
    std::string message;
    ASSERT_TRUE(r.Get(&status) && r.GetString(kMaxString, &message));
    EXPECT_NE(status, 0);
    EXPECT_FALSE(message.empty());
    // Still served, on the socket.
    ASSERT_TRUE(WriteFrame(fd, FrameHeader{.seq = ++seq, .op = kOp_cuDriverGetVersion}, version.buffer().data(),
                           version.size()));
    ASSERT_EQ(ReadFrame(fd, kMaxFrame, &h, &p), FrameRead::kOk);
    Reader answer(p.data(), p.size());
    int32_t result = -1;
    ASSERT_TRUE(answer.Get(&result));
    EXPECT_EQ(result, CUDA_SUCCESS);
    close(fd);
  }
}

}  // namespace
}  // namespace gslice::remote
