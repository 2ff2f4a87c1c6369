// Remote GPUs end to end on the simulated driver: gslice-remoted --sim serves a unix socket
// (and loopback TCP), programs run with `gslice run --remote` and the forwarding client, and
// their output is compared with the same programs run on the simulated driver directly.
// Every test uses its own simulated node, ledger and socket (pid-based names) and removes them.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "calls.h"
#include "node.h"
#include "remote_test_support.h"
#include "socket_io.h"
#include "test_support.h"
#include "tls.h"
#include "wire.h"

namespace gslice::remote {
namespace {

using gslice::test::Child;

const std::string kBin = GSLICE_TEST_BIN;
const std::string kProbe = GSLICE_TEST_PROBE;

std::string Prefix() { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-remote"; }
std::string SocketPath() { return "/tmp/gslice-test-" + std::to_string(getpid()) + "-remoted.sock"; }

using shared::Direct;
using shared::Gone;
using shared::Remote;
using shared::Result;
using shared::RunProgram;
using shared::WorkerPid;

class RemoteSim : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared::SetUpSimWorld(Prefix());
    server_ = shared::StartSimServer(SocketPath(), GSLICE_TEST_ASAN_RUNTIME);
    ASSERT_NE(server_->ReadUntil("gslice-remoted: listening on", 20000), "");
  }

  static void TearDownTestSuite() {
    shared::StopServer(&server_, SocketPath());
    shared::RemoveSimWorld(Prefix());
  }

  static std::string Address() { return "unix:" + SocketPath(); }

  static uint64_t SimUsed() { return shared::SimUsed(); }

  static Child* server_;
};

Child* RemoteSim::server_ = nullptr;

TEST_F(RemoteSim, DriverProgramGivesTheSameOutputAsOnTheSimDirectly) {
  Result direct = RunProgram(Direct("1GiB", {kProbe, "check"}));
  Result remote = RunProgram(Remote(Address(), "1GiB", {kProbe, "check"}));
  EXPECT_EQ(direct.code, 0) << direct.out;
  EXPECT_EQ(remote.code, 0) << remote.out;
  EXPECT_NE(direct.out.find("check done"), std::string::npos) << direct.out;
  EXPECT_EQ(remote.out, direct.out);
}

TEST_F(RemoteSim, ExampleGivesTheSameOutputAsOnTheSimDirectly) {
  // Allocates 256 MiB chunks until the slice refuses, fills and reads every one back.
  Result direct = RunProgram(Direct("512MiB", {kBin + "/gslice-example"}));
  Result remote = RunProgram(Remote(Address(), "512MiB", {kBin + "/gslice-example"}));
  EXPECT_EQ(direct.code, 0) << direct.out;
  EXPECT_EQ(remote.code, 0) << remote.out;
  EXPECT_EQ(remote.out, direct.out);
}

TEST_F(RemoteSim, TheSliceMemoryLimitHoldsRemotely) {
  const std::string bytes = std::to_string(900ull << 20);
  Result over = RunProgram(Remote(Address(), "512MiB", {kProbe, "alloc", bytes}));
  EXPECT_EQ(over.code, 0) << over.out;
  EXPECT_EQ(over.out, "CUDA_ERROR_OUT_OF_MEMORY\n");
  // The same allocation in a larger slice fits the simulated GPU: the slice refused it above.
  Result fits = RunProgram(Remote(Address(), "1500MiB", {kProbe, "alloc", bytes}));
  EXPECT_EQ(fits.out, "CUDA_SUCCESS\n");
  // Virtual memory management (PyTorch's expandable segments) is counted alike.
  const std::string vmm = std::to_string(768ull << 20);
  EXPECT_EQ(RunProgram(Remote(Address(), "512MiB", {kProbe, "vmm", vmm})).out, "CUDA_ERROR_OUT_OF_MEMORY\n");
  EXPECT_EQ(RunProgram(Remote(Address(), "1500MiB", {kProbe, "vmm", vmm})).out, "CUDA_SUCCESS\n");
}

TEST_F(RemoteSim, AKilledClientsWorkerIsGoneAndItsMemoryFreeWithinOneSecond) {
  for (const char* mode : {"hold", "busy"}) {
    SCOPED_TRACE(mode);
    // hold: idle between calls; busy: blocked in cuCtxSynchronize on a 30 s kernel.
    std::vector<std::string> cmd = std::string(mode) == "hold"
                                       ? std::vector<std::string>{kProbe, "hold", std::to_string(256ull << 20)}
                                       : std::vector<std::string>{kProbe, "busy", "30000"};
    Child client(Remote(Address(), "1GiB", cmd), {"GSLICE_LOG=info"});
    const pid_t worker = WorkerPid(client.ReadUntil("gslice[", 20000));
    ASSERT_GT(worker, 0);
    ASSERT_NE(client.ReadUntil(std::string(mode) == "hold" ? "held" : "busy", 20000), "");
    ASSERT_GT(SimUsed(), 0u);
    // busy: cuCtxSynchronize follows "busy" at once; give it time to reach the worker.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    client.Kill(SIGKILL);
    client.Wait(nullptr, 5000);
    const auto start = std::chrono::steady_clock::now();
    while (!(Gone(worker) && SimUsed() == 0) && std::chrono::steady_clock::now() - start < std::chrono::seconds(3)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    EXPECT_TRUE(Gone(worker)) << "worker " << worker << " still runs after " << took.count() << " ms";
    EXPECT_EQ(SimUsed(), 0u) << "after " << took.count() << " ms";
    EXPECT_LT(took.count(), 1000) << "the worker and its memory took " << took.count() << " ms to go";
  }
}

TEST_F(RemoteSim, AWorkerKilledMidCallIsADeviceErrorInTheClient) {
  Child client(Remote(Address(), "1GiB", {kProbe, "busy", "30000"}), {"GSLICE_LOG=info"});
  const pid_t worker = WorkerPid(client.ReadUntil("gslice[", 20000));
  ASSERT_GT(worker, 0);
  ASSERT_NE(client.ReadUntil("busy", 20000), "");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(worker, SIGKILL);
  std::string rest;
  EXPECT_EQ(client.Wait(&rest, 5000), 0);
  EXPECT_NE(rest.find("CUDA_ERROR_DEVICE_UNAVAILABLE"), std::string::npos) << rest;
  EXPECT_NE(rest.find("lost the server"), std::string::npos) << rest;
  EXPECT_NE(rest.find("cuCtxSynchronize"), std::string::npos) << rest;
}

// A raw connection to the server, for what no client library sends.
class Raw {
 public:
  Raw() {
    std::string error;
    Address a;
    ParseAddress("unix:" + SocketPath(), &a, &error);
    fd_ = Connect(a, &error);
    timeval t = {.tv_sec = 20, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  }
  ~Raw() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  bool Hello(const std::string& memory) {
    Writer w;
    EncodeHello(gslice::remote::Hello{.calls_hash = kCallsHash, .memory = memory, .compute = "", .share = "",
                                      .slice_class = "", .idle_timeout = "", .host = ""},
                &w);
    if (!WriteFrame(fd_, FrameHeader{.seq = 0, .op = kOpHello}, w.buffer().data(), w.size())) return false;
    FrameHeader h;
    std::vector<uint8_t> p;
    if (ReadFrame(fd_, kMaxFrame, &h, &p) != FrameRead::kOk) return false;
    Reader r(p.data(), p.size());
    HelloReply reply;
    std::string error;
    return DecodeHelloReply(&r, &reply, &error) && reply.status == 0;
  }
  // A request's payload: the current context (none) and lane 0, then the call's arguments.
  static Writer Request() {
    Writer w;
    EncodeRequestPrefix(RequestPrefix{}, &w);
    return w;
  }
  // Sends a request; returns its result, or -1 when the connection closed.
  int Call(uint32_t op, const Writer& payload) {
    if (!WriteFrame(fd_, FrameHeader{.seq = ++seq_, .op = op}, payload.buffer().data(), payload.size())) return -1;
    return ReadResult();
  }
  int ReadResult() {
    FrameHeader h;
    std::vector<uint8_t> p;
    if (ReadFrame(fd_, kMaxFrame, &h, &p) != FrameRead::kOk) return -1;
    int32_t r = -2;
    Reader reader(p.data(), p.size());
    reader.Get(&r);
    return r;
  }
  // The server closed the connection (a unix socket closed with unread data reads ECONNRESET).
  bool Closed() {
    char c;
    const ssize_t n = read(fd_, &c, 1);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  int fd_ = -1;
  uint32_t seq_ = 0;
};

TEST_F(RemoteSim, ProtocolGarbageIsRefusedAndOtherClientsAreServed) {
  {
    Raw raw;  // random bytes whose "length" is absurd
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x13, 0x37, 0, 0, 1, 0, 0, 0, 0xde, 0xad};
    ASSERT_TRUE(WriteAll(raw.fd(), junk, sizeof junk));
    EXPECT_TRUE(raw.Closed());
  }
  {
    Raw raw;  // a frame that is not a handshake
    const uint8_t junk[16] = {4, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 2, 3, 4};
    ASSERT_TRUE(WriteAll(raw.fd(), junk, sizeof junk));
    EXPECT_TRUE(raw.Closed());
  }
  {
    Raw raw;  // a handshake of another protocol: refused with a reason
    Writer w;
    w.Put<uint32_t>(0x12345678);
    w.Put<uint64_t>(0);
    ASSERT_TRUE(WriteFrame(raw.fd(), FrameHeader{.seq = 0, .op = kOpHello}, w.buffer().data(), w.size()));
    FrameHeader h;
    std::vector<uint8_t> p;
    ASSERT_EQ(ReadFrame(raw.fd(), kMaxFrame, &h, &p), FrameRead::kOk);
    Reader r(p.data(), p.size());
    HelloReply reply;
    std::string error;
    ASSERT_TRUE(DecodeHelloReply(&r, &reply, &error)) << error;
    EXPECT_NE(reply.status, 0);
    EXPECT_NE(reply.message.find("magic"), std::string::npos) << reply.message;
  }
  {
    Raw raw;  // after the handshake: malformed arguments are answered, the connection goes on
    ASSERT_TRUE(raw.Hello("1GiB"));
    Writer bad = Raw::Request();
    bad.Put<uint8_t>(7);  // cuMemAlloc_v2's presence flag must be 0 or 1
    EXPECT_EQ(raw.Call(kOp_cuMemAlloc_v2, bad), CUDA_ERROR_INVALID_VALUE);
    Writer lie = Raw::Request();  // cuMemcpyHtoD_v2 with 4 bytes sent for a 1 MiB copy
    lie.Put<CUdeviceptr>(0x1000);
    lie.Put<uint8_t>(1);
    lie.Put<uint64_t>(4);
    lie.PadTo(16);
    lie.Put<uint32_t>(0);
    lie.Put<size_t>(1 << 20);
    EXPECT_EQ(raw.Call(kOp_cuMemcpyHtoD_v2, lie), CUDA_ERROR_INVALID_VALUE);
    Writer version = Raw::Request();
    version.Put<uint8_t>(1);
    EXPECT_EQ(raw.Call(kOp_cuDriverGetVersion, version), CUDA_SUCCESS);
    Writer lane;  // a lane the worker does not serve: answered, the connection goes on
    EncodeRequestPrefix(RequestPrefix{.context = 0, .lane = kMaxLanes}, &lane);
    lane.Put<uint8_t>(1);
    EXPECT_EQ(raw.Call(kOp_cuDriverGetVersion, lane), CUDA_ERROR_INVALID_VALUE);
    Writer other;  // another lane of the same connection
    EncodeRequestPrefix(RequestPrefix{.context = 0, .lane = 7}, &other);
    other.Put<uint8_t>(1);
    EXPECT_EQ(raw.Call(kOp_cuDriverGetVersion, other), CUDA_SUCCESS);
    // An opcode no client sends closes the connection.
    EXPECT_EQ(raw.Call(kOpCount + 5, Raw::Request()), -1);
  }
  {
    Raw raw;  // a frame longer than any call after the handshake
    ASSERT_TRUE(raw.Hello("1GiB"));
    uint8_t head[kHeaderSize];
    EncodeHeader(FrameHeader{.length = kMaxFrame + 1, .seq = 1, .op = kOp_cuInit}, head);
    ASSERT_TRUE(WriteAll(raw.fd(), head, sizeof head));
    EXPECT_TRUE(raw.Closed());
  }
  Result after = RunProgram(Remote(Address(), "1GiB", {kProbe, "alloc", "4096"}));
  EXPECT_EQ(after.out, "CUDA_SUCCESS\n");
}

TEST_F(RemoteSim, DevicePropertiesAreAskedForOnce) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "repeat"}), {"GSLICE_LOG=debug"});
  EXPECT_NE(r.out.find("132 132 132\n"), std::string::npos) << r.out;
  size_t hits = 0;
  for (size_t at = 0; (at = r.out.find("cuDeviceGetAttribute answered from the client's cache", at)) != std::string::npos;
       ++at) {
    ++hits;
  }
  EXPECT_EQ(hits, 2u) << r.out;
}

TEST_F(RemoteSim, CopiesLargerThanOneMessageGoInPieces) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "bigcopy", std::to_string(kSplitBytes + 12)}));
  EXPECT_EQ(r.out, "bigcopy ok\n");
}

TEST_F(RemoteSim, AnAsyncCallsErrorComesWithTheNextSynchronisation) {
  // Launches are sent without waiting; the driver's refusal surfaces once, at the next sync
  // (on the simulated driver directly it is the launch's own result).
  Result direct = RunProgram(Direct("1GiB", {kProbe, "deferred"}));
  EXPECT_EQ(direct.out, "launch CUDA_ERROR_INVALID_HANDLE, sync CUDA_SUCCESS, sync CUDA_SUCCESS\n");
  Result remote = RunProgram(Remote(Address(), "1GiB", {kProbe, "deferred"}));
  EXPECT_EQ(remote.out, "launch CUDA_SUCCESS, sync CUDA_ERROR_INVALID_HANDLE, sync CUDA_SUCCESS\n");
}

TEST_F(RemoteSim, WaitingForEveryCallGivesAnAsyncCallsErrorAtTheCall) {
  // GSLICE_REMOTE_WAIT=1 (synchronous forwarding, for comparisons): the launch waits for the
  // worker's answer, so its error is its own, as on the driver directly.
  Result remote = RunProgram(Remote(Address(), "1GiB", {kProbe, "deferred"}), {"GSLICE_REMOTE_WAIT=1"});
  EXPECT_EQ(remote.out, "launch CUDA_ERROR_INVALID_HANDLE, sync CUDA_SUCCESS, sync CUDA_SUCCESS\n");
  // And the programs give the same output as queued.
  Result check = RunProgram(Remote(Address(), "1GiB", {kProbe, "graph"}), {"GSLICE_REMOTE_WAIT=1"});
  EXPECT_EQ(check.code, 0) << check.out;
  EXPECT_NE(check.out.find("replayed 3 times: results verified"), std::string::npos) << check.out;
}

TEST_F(RemoteSim, AThreadInALongSynchronisationHoldsUpNoOtherThread) {
  // Each client thread has its serving thread in the worker: one thread's calls complete while
  // another waits in cuStreamSynchronize, and each has its own per-thread default stream.
  const std::string expected =
      "40 calls, own per-thread stream CUDA_SUCCESS, done while the other thread synchronised: yes\n"
      "synchronised: CUDA_SUCCESS\n";
  Result direct = RunProgram(Direct("1GiB", {kProbe, "threads", "4000"}));
  EXPECT_EQ(direct.out, expected);
  Result remote = RunProgram(Remote(Address(), "1GiB", {kProbe, "threads", "4000"}));
  EXPECT_EQ(remote.out, expected);
}

TEST_F(RemoteSim, WorkAThreadQueuedIsInItsStreamBeforeAnotherThreadsLaterCalls) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "handoff"}));
  EXPECT_EQ(r.out, "handoff: 0 words wrong\n");
}

TEST_F(RemoteSim, CallsNotForwardedReturnNotSupportedAndAreNamed) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "unforwarded"}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("CUDA_ERROR_NOT_SUPPORTED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuMemAllocManaged is not forwarded"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("then cuMemAlloc, memset, copy: ok"), std::string::npos) << r.out;
}

// The probe's output through the client equals its output on the simulated driver directly.
void ExpectSameAsDirect(const std::string& address, const std::string& mode, const std::string& must_say) {
  SCOPED_TRACE(mode);
  Result direct = RunProgram(Direct("1GiB", {kProbe, mode}));
  Result remote = RunProgram(Remote(address, "1GiB", {kProbe, mode}));
  EXPECT_EQ(direct.code, 0) << direct.out;
  EXPECT_EQ(remote.code, 0) << remote.out;
  EXPECT_NE(direct.out.find(must_say), std::string::npos) << direct.out;
  EXPECT_EQ(remote.out, direct.out);
}

TEST_F(RemoteSim, AGraphCapturedThroughTheClientReplaysWithVerifiedResults) {
  // A memset, a kernel and a copy captured on a stream; the graph replayed three times.
  ExpectSameAsDirect(Address(), "graph", "replayed 3 times: results verified");
}

TEST_F(RemoteSim, AHostCopyOnACapturingStreamIsRefusedAtTheEndOfTheCapture) {
  // The copy's host buffer is the worker's message: a graph must not read it at replay.
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "capture-copy"}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "copy CUDA_SUCCESS, end capture CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED\n"
                   "then not capturing; sync CUDA_SUCCESS\n");
}

TEST_F(RemoteSim, AGraphBuiltByHandAndByCaptureIntoItRunsAsOnTheSim) {
  // XLA's command buffers: nodes added by hand (a kernel's arguments among them), work captured
  // into the graph, conditionals, and the executable graph's nodes set in place.
  ExpectSameAsDirect(Address(), "graph-nodes", "executable graph's nodes set: results verified");
}

TEST_F(RemoteSim, ACopyNodeNamingHostMemoryIsRefusedAndNamed) {
  // The worker's driver would read the worker's own memory at that address.
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "graph-host-copy"}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("host-to-device copy node: CUDA_ERROR_NOT_SUPPORTED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuGraphAddMemcpyNode: a copy node with host memory"), std::string::npos) << r.out;
}

TEST_F(RemoteSim, PointerAttributesAreTheWorkersAndTheClientsPageLockedMemoryIsHost) {
  ExpectSameAsDirect(Address(), "pointer", "attributes of page-locked memory: type host, range from the allocation");
}

TEST_F(RemoteSim, StreamCallbacksAndHostFunctionsRunInStreamOrder) {
  ExpectSameAsDirect(Address(), "callbacks",
                     "callback\nhost function\ncallback\nstatus CUDA_SUCCESS\nstatus CUDA_SUCCESS\n");
}

TEST_F(RemoteSim, ContextFunctionAndStreamSettingsAreForwarded) {
  ExpectSameAsDirect(Address(), "settings", "stack limit doubled: yes\ncache config prefers L1: yes\n");
}

// Counts the debug lines saying NAME was answered from the client's cache.
size_t CacheHits(const std::string& out, const std::string& name) {
  const std::string line = "remote: " + name + " answered from the client's cache";
  size_t hits = 0;
  for (size_t at = 0; (at = out.find(line, at)) != std::string::npos; ++at) ++hits;
  return hits;
}

TEST_F(RemoteSim, AnswersTheClientKeepsChangeWhenTheDriversDo) {
  // The answers are the driver's (the same as on the simulated driver directly) after every
  // change: a set attribute, a set limit, the primary context's flags and retains, a module
  // loaded again, a capture begun and ended, a stream destroyed.
  ExpectSameAsDirect(Address(), "kept",
                     "dynamic shared memory set to 2048: reads 2048\n"
                     "dynamic shared memory set to 2048: reads 2048\n"
                     "dynamic shared memory set to 1024: reads 1024\n");
  Result direct = RunProgram(Direct("1GiB", {kProbe, "kept"}));
  for (const char* must : {"stack limit after a set: the new one", "capturing stream: active",
                           "after the capture: none", "reloaded function fills: yes",
                           "a destroyed stream: CUDA_ERROR_INVALID_HANDLE"}) {
    EXPECT_NE(direct.out.find(must), std::string::npos) << must << "\n" << direct.out;
  }
  // And the repeated questions were answered on the client.
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "kept"}), {"GSLICE_LOG=debug"});
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_GE(CacheHits(r.out, "cuCtxGetDevice"), 1u) << r.out;
  EXPECT_GE(CacheHits(r.out, "cuCtxGetDevice_v2"), 1u) << r.out;
  EXPECT_GE(CacheHits(r.out, "cuDevicePrimaryCtxGetState"), 1u) << r.out;
  EXPECT_GE(CacheHits(r.out, "cuCtxGetLimit"), 1u) << r.out;
  EXPECT_GE(CacheHits(r.out, "cuFuncGetAttribute"), 3u) << r.out;
  EXPECT_GE(CacheHits(r.out, "cuOccupancyMaxActiveBlocksPerMultiprocessor"), 1u) << r.out;
  EXPECT_GE(CacheHits(r.out, "cuModuleGetFunction"), 1u) << r.out;
}

// out without the lines saying how many round trips the client made (kept-sets).
std::string WithoutRoundTrips(const std::string& out) {
  std::string kept;
  for (size_t at = 0; at < out.size();) {
    size_t end = out.find('\n', at);
    end = end == std::string::npos ? out.size() : end + 1;
    if (out.compare(at, 13, "round trips: ") != 0) kept.append(out, at, end - at);
    at = end;
  }
  return kept;
}

TEST_F(RemoteSim, ASetOfOneFunctionsAttributeDropsTheAnswersOfThatFunctionOnly) {
  // A's attribute set to a new value: A's attribute is asked again (the driver's new value);
  // B's attribute and occupancy stay kept. A library kernel's attribute set: the kernel's and
  // its function's answers are the driver's new ones, B's stay kept.
  Result direct = RunProgram(Direct("1GiB", {kProbe, "kept-sets"}));
  Result remote = RunProgram(Remote(Address(), "1GiB", {kProbe, "kept-sets"}));
  ASSERT_EQ(direct.code, 0) << direct.out;
  ASSERT_EQ(remote.code, 0) << remote.out;
  for (const char* must : {"A after its set: reads the new value\n",
                           "after a kernel set: its function reads 8192, the kernel 8192\n",
                           "after a set on the kernel's function: the kernel reads 2048\n"}) {
    EXPECT_NE(direct.out.find(must), std::string::npos) << must << "\n" << direct.out;
  }
  EXPECT_EQ(WithoutRoundTrips(remote.out), direct.out);
  for (const char* trips : {"round trips: a set of A's attribute to a new value: 1\n",
                            "round trips: B's attribute and occupancy after a set on A: 0\n",
                            "round trips: A's attribute after its set: 1\n",
                            "round trips: a kernel set, its function's and its attribute: 3\n",
                            "round trips: B's attribute after a kernel set: 0\n"}) {
    EXPECT_NE(remote.out.find(trips), std::string::npos) << trips << "\n" << remote.out;
  }
}

TEST_F(RemoteSim, StreamMemoryOperationsAreForwarded) {
  ExpectSameAsDirect(Address(), "memops", "wrote 7 and 123456789");
}

TEST_F(RemoteSim, NvmlThroughTheClientShowsTheRemoteSlice) {
  // Memory total is the slice's 1 GiB, not the simulated GPU's 2 GiB.
  ExpectSameAsDirect(Address(), "nvml", "memory: total 1073741824, used 0, free 1073741824; v2 total 1073741824");
  // With a CUDA context holding 256 MiB: the slice's usage, and its process (the worker).
  ExpectSameAsDirect(Address(), "nvml-cuda", "with 1, the first using the allocation");
}

TEST_F(RemoteSim, NvmlCallsNotForwardedReturnNotSupportedAndAreNamed) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "nvml-missing"}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nvmlDeviceGetBoardId: 3\n"), std::string::npos) << r.out;  // NVML_ERROR_NOT_SUPPORTED
  EXPECT_NE(r.out.find("nvmlDeviceGetBoardId is not forwarded"), std::string::npos) << r.out;
}

TEST_F(RemoteSim, PageLockedMemoryOfAnotherHostIsNotMappedIntoTheGpuAndSaysSo) {
  // Without shared memory with the worker (as from another host): no device pointer, and the
  // copies carry their bytes (the device-to-host one's come later, not waited for), with the
  // same results.
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "hostmap"}), {"GSLICE_REMOTE_SHM=off"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("CUDA_ERROR_NOT_SUPPORTED\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot be mapped into the remote GPU's address space"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("then cuMemAlloc: CUDA_SUCCESS"), std::string::npos) << r.out;
  Result copies = RunProgram(Remote(Address(), "1GiB", {kProbe, "hostshare", "stats"}), {"GSLICE_REMOTE_SHM=off"});
  EXPECT_EQ(copies.code, 0) << copies.out;
  for (const char* line : {"device pointer: CUDA_ERROR_NOT_SUPPORTED\n", "asynchronous copies in stream order: verified\n",
                           "copies waited for: 0\n",
                           "captured copy CUDA_SUCCESS, end capture CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED\n"}) {
    EXPECT_NE(copies.out.find(line), std::string::npos) << line << copies.out;
  }
}

TEST_F(RemoteSim, AnAsyncCopyOfTheMessagesBytesDoesNotWaitForItsStream) {
  // The worker stages the bytes in page-locked memory of its own (remote/server/staging.h),
  // as the driver does for pageable memory: the copy stays queued behind the kernel, and the
  // program's buffer is free as soon as the call returned. Over the socket and the rings.
  for (const char* shm : {"GSLICE_REMOTE_SHM=off", "GSLICE_REMOTE_SHM=on"}) {
    SCOPED_TRACE(shm);
    Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "staged"}), {shm});
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out, "the stream right after the copy: CUDA_ERROR_NOT_READY\nthe copy: the bytes of the call\n");
  }
}

// NVML's private table nvidia-smi asks for, answered on the client: its size as the driver's,
// the bus id and process slots as the public calls say, the rest refused and named.
TEST_F(RemoteSim, NvidiaSmisPrivateNvmlTableIsAnsweredOnTheClient) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "nvml-table"}));
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* line :
       {"table: 0\n", "size word: 2160\n", "slot 1: null, slot 2: null\n", "slot 81: 0, the device's bus id\n",
        "slot 213: 0, the public list's processes\n", "slot 213 without room: 7, count the number needed\n",
        "slot 230: 3\n", "NVML's private table 6c3efec4 slot 230 is not answered", "another table: 13, null\n",
        "a private table this client does not know"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

TEST_F(RemoteSim, AnAsyncCopyIntoPageLockedMemoryArrivesAtTheSynchronisationThatNeedsIt) {
  // Over the socket the bytes come after the copy is done (wire.h: kOpDeferredData), before
  // the answer that says so; over the rings the memory is shared. As the driver directly.
  const char* say = "after the synchronisation: the device's bytes\n";
  ExpectSameAsDirect(Address(), "late-copy", say);
  Result direct = RunProgram(Direct("1GiB", {kProbe, "late-copy"}));
  Result socket = RunProgram(Remote(Address(), "1GiB", {kProbe, "late-copy"}), {"GSLICE_REMOTE_SHM=off"});
  EXPECT_EQ(socket.code, 0) << socket.out;
  EXPECT_EQ(socket.out, direct.out);
  EXPECT_NE(direct.out.find("right after the call: not there yet\n"), std::string::npos) << direct.out;
  EXPECT_NE(direct.out.find("after the event's query said CUDA_SUCCESS: the device's bytes\n"), std::string::npos)
      << direct.out;
}

TEST_F(RemoteSim, PageLockedMemoryIsSharedWithAWorkerOnTheSameHost) {
  // As the driver itself does it: a device pointer to it (a memset and a kernel write it),
  // asynchronous copies in stream order, a captured copy reading it at each replay.
  ExpectSameAsDirect(Address(), "hostshare", "memset and kernel through it: seen on the host\n");
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "hostshare"}));
  EXPECT_NE(r.out.find("device pointer: CUDA_SUCCESS, the host pointer\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("replayed twice: each read the memory then\n"), std::string::npos) << r.out;
  // Neither copy waits for the worker: no bytes to carry back.
  Result stats = RunProgram(Remote(Address(), "1GiB", {kProbe, "hostshare", "stats"}));
  EXPECT_NE(stats.out.find("copies waited for: 0\n"), std::string::npos) << stats.out;
}

// The driver's private tables as the client answers them: size headers, every slot callable
// (an unanswered one is an error), the integrity hash's constant answers and its stability,
// context-local storage, an unknown UUID refused and named.
TEST_F(RemoteSim, ThePrivateTablesAreAnsweredOnTheClient) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "tables"}));
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* line : {"cudart size 104, integrity size 24\n", "cudart slots all set: yes\n",
                           "cudart slot 3: CUDA_ERROR_NOT_SUPPORTED\n",
                           "private table cudart interface (6bd5fb6c...) slot 3 is not answered",
                           "integrity 0: 3341181c03cb675c 8ed383aa1f4cd1e8\n", "integrity 2: stable\n",
                           "storage get: the value put\n", "storage after delete: CUDA_ERROR_INVALID_HANDLE\n",
                           "cuGetExportTable(01020304-0000-0000-0000-000000000005): a private table this client "
                           "does not know: CUDA_ERROR_NOT_FOUND",
                           "unknown table: CUDA_ERROR_NOT_FOUND, null\n"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

// cuBLASLt's two tables: tools context slot 4 gives each live context its own number, the same
// every time, never one an earlier context had (cuBLASLt keys per-context state by it), the
// current context's for none named and 0 with none current; cuBLASLt data slot 4 is declined
// with its outputs cleared. Tools TLS slot 2 gives the thread's current context (or null).
TEST_F(RemoteSim, CublasLtTablesAreAnsweredOnTheClient) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "lt-tables"}));
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* line : {"tools context size 744, cuBLASLt data size 136, slots all set: yes\n",
                           "thread context: the current one\n", "thread context without one: null\n",
                           "number without a context: 0\n",
                           "number into nothing: CUDA_ERROR_INVALID_VALUE\n",
                           "a context's number: set, the same again: yes, the current one's: yes, "
                           "another's differs: yes\n",
                           "a later context's number is new: yes\n",
                           "private table tools context (21318c60...) slot 3 is not answered",
                           "tools context slot 3: CUDA_ERROR_NOT_SUPPORTED\n",
                           "cuBLASLt data slot 4: CUDA_ERROR_NOT_SUPPORTED, null, 0\n"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

#ifdef GSLICE_TEST_CUDART_PROBE
const std::string kCudartProbe = GSLICE_TEST_CUDART_PROBE;
// The sanitize build: what NVIDIA's libraries keep until exit is not ours to report.
const std::string kNoLeakReports = "ASAN_OPTIONS=detect_leaks=0";

// The CUDA toolkit's own runtime (libcudart 13) through the client: it resolves ~440 entry
// points, fetches the private tables, then allocates, copies both ways, memsets, and runs a
// stream with events; the probe checks every result.
TEST_F(RemoteSim, RealCudartRunsThroughTheClient) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kCudartProbe, "runtime"}), {kNoLeakReports});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("device 0: gslice simulated GPU"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cudart done"), std::string::npos) << r.out;
  // Nothing cudart needed fell through to a refusal.
  EXPECT_EQ(r.out.find("not forwarded"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not answered"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("does not know"), std::string::npos) << r.out;
}

// cuBLAS from the toolkit (cublasCreate/cublasDestroy) through the client: cuBLAS checks the
// driver with the integrity and context-check tables, registers its fatbin, asks for its
// globals, occupancy and limits.
TEST_F(RemoteSim, RealCublasCreatesAndDestroysAHandleThroughTheClient) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kCudartProbe, "cublas"}), {kNoLeakReports});
  if (r.code == 2 && r.out.find("no libcublas") != std::string::npos) GTEST_SKIP() << r.out;
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("cublasCreate: 0\ncublasDestroy: 0\ncublas done\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not forwarded"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not answered"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("does not know"), std::string::npos) << r.out;
}

// A float32 matrix product through the toolkit's cuBLAS: cuBLASLt fetches its own tables
// (tools context, cuBLASLt data) and asks tools context slot 4 for the context's number before it
// picks a kernel; the simulated server runs no fatbin kernels, so the product gets as far as its
// launch, which the server refuses (CUBLAS_STATUS_EXECUTION_FAILED). Without the tables cuBLAS
// stops before it, with CUBLAS_STATUS_NOT_SUPPORTED (15).
TEST_F(RemoteSim, RealCublasSgemmGetsPastTheTablesToItsLaunchThroughTheClient) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kCudartProbe, "sgemm"}), {kNoLeakReports});
  if (r.code == 2 && r.out.find("no libcublas") != std::string::npos) GTEST_SKIP() << r.out;
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("cublasCreate: 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuLaunchKernel: the server cannot lay out the kernel's parameters"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("cublasSgemm: 13\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cublasDestroy: 0\nsgemm done\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not answered"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("does not know"), std::string::npos) << r.out;
}

// The same with the client found the two ways a program may be given it by hand: first on
// LD_LIBRARY_PATH (how `gslice run --remote` does it, and how cudart's dlopen finds it) and
// preloaded.
TEST_F(RemoteSim, RealCudartFindsTheClientOnLdLibraryPathAndPreloaded) {
  const std::string lib = kBin + "/../lib/remote";
  const std::vector<std::string> base = {"GSLICE_REMOTE=" + Address(), "GSLICE_MEMORY=1GiB", kNoLeakReports};
  std::vector<std::string> path_env = base;
  path_env.push_back("LD_LIBRARY_PATH=" + lib);
  Result by_path = RunProgram({kCudartProbe, "runtime"}, path_env);
  EXPECT_EQ(by_path.code, 0) << by_path.out;
  EXPECT_NE(by_path.out.find("cudart done"), std::string::npos) << by_path.out;
  std::vector<std::string> preload_env = base;
  std::string preload = lib + "/libcuda.so.1";
  if (const char* asan = getenv("LD_PRELOAD"); asan != nullptr && *asan != '\0') preload = std::string(asan) + ":" + preload;
  preload_env.push_back("LD_PRELOAD=" + preload);
  Result preloaded = RunProgram({kCudartProbe, "runtime"}, preload_env);
  EXPECT_EQ(preloaded.code, 0) << preloaded.out;
  EXPECT_NE(preloaded.out.find("cudart done"), std::string::npos) << preloaded.out;
}
#endif

TEST_F(RemoteSim, TheClientMapsNoOtherDriver) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "maps"}));
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string lib = std::filesystem::canonical(kBin + "/../lib/remote/libcuda.so.1").string();
  EXPECT_EQ(r.out, lib + "\n");
}

TEST_F(RemoteSim, NoServerOrARefusedSliceIsNoDeviceWithTheReason) {
  Result none = RunProgram(Remote("unix:/nonexistent/gslice.sock", "1GiB", {kProbe, "alloc", "4096"}));
  EXPECT_NE(none.out.find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << none.out;
  EXPECT_NE(none.out.find("connect unix:/nonexistent/gslice.sock"), std::string::npos) << none.out;
  // More memory than the simulated GPU has: the server's gslice run says so, the client logs it.
  Result refused = RunProgram(Remote(Address(), "100GiB", {kProbe, "alloc", "4096"}));
  EXPECT_NE(refused.out.find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("has only"), std::string::npos) << refused.out;
}

// Where gsliced runs, a remote client's worker is a slice gsliced admitted and lists, and it is
// gone from the list once the client is.
TEST_F(RemoteSim, ARemoteSliceIsListedByGslicedWhileItsClientRuns) {
  const std::string dir = "/tmp/gslice-test-" + std::to_string(getpid()) + "-gsliced";
  const std::string ledger = Prefix() + "-daemon-ledger";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  const std::string api = dir + "/api.sock", remoted = dir + "/remoted.sock";
  std::ofstream(dir + "/gsliced.toml") << "socket = \"" << api << "\"\n"
                                      << "database = \"" << dir << "/state/gsliced.db\"\n"
                                      << "ledger = \"" << ledger << "\"\n"
                                      << "nvml_library = \"" << kBin << "/../lib/sim/libnvidia-ml.so.1\"\n"
                                      << "sample_interval_ms = 200\n";
  auto listing = [&] { return RunProgram({kBin + "/gslice", "ls", "--json", "--socket", api}, {}, 10000); };
  {
    Child daemon({kBin + "/gsliced", "--config", dir + "/gsliced.toml"});
    bool up = false;
    for (int i = 0; i < 200 && !up; ++i) {
      up = listing().code == 0;
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(up) << listing().out;
    Child server({kBin + "/gslice-remoted", "--listen", "unix:" + remoted, "--sim", "--allow-root-tenant"},
                 {"GSLICE_SOCKET=" + api, "GSLICE_LEDGER=" + ledger});
    ASSERT_NE(server.ReadUntil("gslice-remoted: listening on", 20000), "");
    {
      Child client(Remote("unix:" + remoted, "1GiB", {kProbe, "hold", std::to_string(64ull << 20)}));
      ASSERT_NE(client.ReadUntil("held", 20000), "");
      const Result during = listing();
      EXPECT_NE(during.out.find("\"remote-"), std::string::npos) << during.out;
      EXPECT_NE(during.out.find(std::to_string(1ull << 30)), std::string::npos) << during.out;
      EXPECT_EQ(client.Wait(nullptr, 10000), 0);  // closes its stdin: the probe frees and exits
    }
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = listing().out.find("\"remote-") == std::string::npos;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(gone) << listing().out;
    server.Kill(SIGTERM);
    server.Wait(nullptr, 10000);
    daemon.Kill(SIGTERM);
    daemon.Wait(nullptr, 10000);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove_all(ledger, ec);
}

TEST_F(RemoteSim, GsliceRunRemoteRefusesWhatItCannotDo) {
  const std::string gslice = kBin + "/gslice";
  Result bad = RunProgram({gslice, "run", "--remote", "host:7000", "--memory", "1GiB", "--", "/bin/true"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("expected unix:PATH, tcp://HOST:PORT or tls://HOST:PORT"), std::string::npos) << bad.out;
  Result sim = RunProgram({gslice, "run", "--remote", Address(), "--sim", "--memory", "1GiB", "--", "/bin/true"});
  EXPECT_EQ(sim.code, 2);
  EXPECT_NE(sim.out.find("gslice-remoted --sim"), std::string::npos) << sim.out;
  Result no_memory = RunProgram({gslice, "run", "--remote", Address(), "--", "/bin/true"});
  EXPECT_EQ(no_memory.code, 2);
  EXPECT_NE(no_memory.out.find("--memory is required"), std::string::npos) << no_memory.out;
  Result gpus = RunProgram({gslice, "run", "--remote", Address(), "--gpus", "0", "--memory", "1GiB", "--", "/bin/true"});
  EXPECT_EQ(gpus.code, 2);
  EXPECT_NE(gpus.out.find("--gpus is not taken here"), std::string::npos) << gpus.out;
  EXPECT_NE(gpus.out.find("CUDA_VISIBLE_DEVICES where it starts"), std::string::npos) << gpus.out;
}

TEST_F(RemoteSim, TcpIsServedOnLoopbackAndRefusedElsewhere) {
  for (const char* wide : {"tcp://0.0.0.0:0", "tcp://[::]:0"}) {
    Result r = RunProgram({kBin + "/gslice-remoted", "--listen", wide, "--sim"}, {}, 10000);
    EXPECT_EQ(r.code, 2) << wide;
    EXPECT_NE(r.out.find("token authentication and TLS"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--listen tls://"), std::string::npos) << r.out;
  }
  // tls:// without its certificate, key and token is refused too.
  Result bare = RunProgram({kBin + "/gslice-remoted", "--listen", "tls://0.0.0.0:0", "--sim"}, {}, 10000);
  EXPECT_EQ(bare.code, 2);
  EXPECT_NE(bare.out.find("needs --cert FILE, --key FILE and one of --tenants FILE or --token-file FILE"), std::string::npos) << bare.out;
  Child server({kBin + "/gslice-remoted", "--listen", "tcp://127.0.0.1:0", "--sim", "--allow-root-tenant"});
  const std::string line = server.ReadUntil("gslice-remoted: listening on", 20000);
  const size_t at = line.find("tcp://");
  ASSERT_NE(at, std::string::npos) << line;
  const std::string address = line.substr(at, line.find(' ', at) - at);
  Result r = RunProgram(Remote(address, "1GiB", {kProbe, "alloc", "4096"}));
  EXPECT_EQ(r.out, "CUDA_SUCCESS\n");
  server.Kill(SIGTERM);
  EXPECT_EQ(server.Wait(nullptr, 10000), 0);
}

using shared::TlsFiles;

// Other machines are served over tls:// only: the server's certificate is verified, a client
// with the token is served, and a wrong or missing token, a plain client and a failed
// handshake are refused and logged without starting a worker.
TEST_F(RemoteSim, TlsServesTheTokenAndRefusesEverythingElse) {
  TlsFiles files;
  ASSERT_TRUE(files.ok()) << "the openssl command is needed to make the test certificates";
  Child server({kBin + "/gslice-remoted", "--listen", "tls://127.0.0.1:0", "--cert", files("server.pem"), "--key",
                files("server.key"), "--token-file", files("token"), "--token-user", "root", "--allow-root-tenant", "--sim"});
  const std::string line = server.ReadUntil("gslice-remoted: listening on", 20000);
  const size_t at = line.find("tls://");
  ASSERT_NE(at, std::string::npos) << line;
  const std::string address = line.substr(at, line.find(' ', at) - at);
  auto client = [&](const std::string& addr, const std::string& token, const std::string& ca,
                    const std::string& log = "info") {
    std::vector<std::string> env = {"GSLICE_LOG=" + log};
    if (!token.empty()) env.push_back("GSLICE_REMOTE_TOKEN_FILE=" + token);
    if (!ca.empty()) env.push_back("GSLICE_REMOTE_CA=" + ca);
    return RunProgram(Remote(addr, "1GiB", {kProbe, "alloc", "4096"}), env);
  };
  const std::string refused = "gslice-remoted: refused a client from 127.0.0.1:";

  // Its device queries go to a probe over TLS (token first), then its allocation attaches a
  // worker over TLS, where the replayed cuInit comes first.
  Result good = client(address, files("token"), files("ca.pem"), "debug");
  EXPECT_NE(good.out.find("CUDA_SUCCESS\n"), std::string::npos) << good.out;
  const size_t probed = good.out.find("remote: asking " + address + " about its devices");
  const size_t attached = good.out.find("(TLS), worker pid");
  EXPECT_NE(probed, std::string::npos) << good.out;
  EXPECT_NE(attached, std::string::npos) << good.out;
  EXPECT_LT(probed, attached) << good.out;

  Result wrong = client(address, files("wrong"), files("ca.pem"));
  EXPECT_NE(wrong.out.find("refused this client: wrong token"), std::string::npos) << wrong.out;
  EXPECT_NE(wrong.out.find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << wrong.out;
  EXPECT_EQ(wrong.out.find("worker pid"), std::string::npos) << wrong.out;

  // A certificate the client's CA did not sign: the client refuses the server.
  Result untrusted = client(address, files("token"), files("other.pem"));
  EXPECT_NE(untrusted.out.find("certificate is not trusted"), std::string::npos) << untrusted.out;
  EXPECT_NE(untrusted.out.find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << untrusted.out;

  // A plain client on the TLS port.
  Result plain = client("tcp://" + address.substr(6), "", "");
  EXPECT_NE(plain.out.find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out.find("worker pid"), std::string::npos) << plain.out;

  // No token: gslice run says what is missing; a TLS client that sends none is refused.
  Result none = client(address, "", files("ca.pem"));
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.out.find("GSLICE_REMOTE_TOKEN_FILE"), std::string::npos) << none.out;
  {
    gslice::remote::Address a;
    std::string error;
    ASSERT_TRUE(ParseAddress(address, &a, &error)) << error;
    const int fd = Connect(a, &error);
    ASSERT_GE(fd, 0) << error;
    TlsSession* tls = TlsConnect(fd, a.host, files("ca.pem"), 10000, &error);
    ASSERT_NE(tls, nullptr) << error;
    const Channel c{.fd = fd, .tls = tls};
    Writer w;
    EncodeHello(gslice::remote::Hello{.calls_hash = kCallsHash, .memory = "1GiB", .compute = "", .share = "",
                                      .slice_class = "", .idle_timeout = "", .host = ""},
                &w);
    ASSERT_TRUE(WriteFrame(c, FrameHeader{.seq = 0, .op = kOpHello}, w.buffer().data(), w.size()));
    FrameHeader h;
    std::vector<uint8_t> p;
    ASSERT_EQ(ReadFrame(c, kMaxFrame, &h, &p), FrameRead::kOk);
    Reader r(p.data(), p.size());
    HelloReply reply;
    ASSERT_TRUE(DecodeHelloReply(&r, &reply, &error)) << error;
    EXPECT_NE(reply.status, 0);
    EXPECT_NE(reply.message.find("wants a token"), std::string::npos) << reply.message;
    TlsFree(tls);
    close(fd);
  }
  // The server logged each refusal (sessions log in whatever order they finish).
  std::string log;
  for (int i = 0; i < 4; ++i) log += server.ReadUntil(refused, 10000) + "\n";
  EXPECT_NE(log.find("wrong token"), std::string::npos) << log;
  EXPECT_NE(log.find("no token"), std::string::npos) << log;
  const size_t handshake = log.find("TLS handshake");
  EXPECT_NE(handshake, std::string::npos) << log;
  EXPECT_NE(log.find("TLS handshake", handshake + 1), std::string::npos) << log;
  server.Kill(SIGTERM);
  EXPECT_EQ(server.Wait(nullptr, 10000), 0);
}

// Over TLS the worker sits behind the session's relay; a killed client still ends it and frees
// its memory within 1 s.
TEST_F(RemoteSim, AKilledTlsClientsWorkerIsGoneWithinOneSecond) {
  TlsFiles files;
  ASSERT_TRUE(files.ok()) << "the openssl command is needed to make the test certificates";
  Child server({kBin + "/gslice-remoted", "--listen", "tls://127.0.0.1:0", "--cert", files("server.pem"), "--key",
                files("server.key"), "--token-file", files("token"), "--token-user", "root", "--allow-root-tenant", "--sim"});
  const std::string line = server.ReadUntil("gslice-remoted: listening on", 20000);
  const size_t at = line.find("tls://");
  ASSERT_NE(at, std::string::npos) << line;
  const std::string address = line.substr(at, line.find(' ', at) - at);
  Child client(Remote(address, "1GiB", {kProbe, "hold", std::to_string(256ull << 20)}),
               {"GSLICE_LOG=info", "GSLICE_REMOTE_TOKEN_FILE=" + files("token"), "GSLICE_REMOTE_CA=" + files("ca.pem")});
  const pid_t worker = WorkerPid(client.ReadUntil("gslice[", 20000));
  ASSERT_GT(worker, 0);
  ASSERT_NE(client.ReadUntil("held", 20000), "");
  ASSERT_GT(SimUsed(), 0u);
  client.Kill(SIGKILL);
  client.Wait(nullptr, 5000);
  const auto start = std::chrono::steady_clock::now();
  while (!(Gone(worker) && SimUsed() == 0) && std::chrono::steady_clock::now() - start < std::chrono::seconds(3)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  EXPECT_TRUE(Gone(worker)) << "worker " << worker << " still runs after " << took.count() << " ms";
  EXPECT_EQ(SimUsed(), 0u) << "after " << took.count() << " ms";
  EXPECT_LT(took.count(), 1000) << "the worker and its memory took " << took.count() << " ms to go";
  server.Kill(SIGTERM);
  EXPECT_EQ(server.Wait(nullptr, 10000), 0);
}

// The client lives inside applications: writing to a TLS server that closed the connection is
// an error, never SIGPIPE (which would kill the application).
TEST_F(RemoteSim, WritingToAClosedTlsConnectionRaisesNoSigpipe) {
  TlsFiles files;
  ASSERT_TRUE(files.ok()) << "the openssl command is needed to make the test certificates";
  Child server({kBin + "/gslice-remoted", "--listen", "tls://127.0.0.1:0", "--cert", files("server.pem"), "--key",
                files("server.key"), "--token-file", files("token"), "--token-user", "root", "--allow-root-tenant", "--sim"});
  const std::string line = server.ReadUntil("gslice-remoted: listening on", 20000);
  const size_t at = line.find("tls://");
  ASSERT_NE(at, std::string::npos) << line;
  const std::string address = line.substr(at, line.find(' ', at) - at);
  const pid_t child = fork();
  if (child == 0) {
    signal(SIGPIPE, SIG_DFL);
    gslice::remote::Address a;
    std::string error;
    if (!ParseAddress(address, &a, &error)) _exit(3);
    const int fd = Connect(a, &error);
    TlsSession* tls = fd >= 0 ? TlsConnect(fd, a.host, files("ca.pem"), 10000, &error) : nullptr;
    if (tls == nullptr) _exit(4);
    const Channel c{.fd = fd, .tls = tls};
    const char wrong[] = "not-the-token-not-the-token";
    WriteFrame(c, FrameHeader{.seq = 0, .op = kOpToken}, wrong, sizeof wrong - 1);
    // The server refuses and closes; keep writing until the writes fail, and once more (the
    // first failure reports the reset; later writes to the dead socket are EPIPE).
    std::vector<uint8_t> junk(64 * 1024, 0x5a);
    for (int i = 0; i < 200; ++i) {
      if (!TlsWriteAll(tls, junk.data(), junk.size())) {
        TlsWriteAll(tls, junk.data(), junk.size());
        send(fd, junk.data(), 1, MSG_NOSIGNAL);  // (the test itself raises none)
        _exit(0);
      }
      usleep(10 * 1000);
    }
    _exit(5);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                              : "exit " + std::to_string(WEXITSTATUS(status)));
  server.Kill(SIGTERM);
  EXPECT_EQ(server.Wait(nullptr, 10000), 0);
}

// A token file others may read is refused on both sides.
TEST_F(RemoteSim, ATokenFileOthersMayReadIsRefused) {
  TlsFiles files;
  ASSERT_TRUE(files.ok()) << "the openssl command is needed to make the test certificates";
  chmod(files("token").c_str(), 0644);
  Result r = RunProgram({kBin + "/gslice-remoted", "--listen", "tls://127.0.0.1:0", "--cert", files("server.pem"),
                         "--key", files("server.key"), "--token-file", files("token"), "--token-user", "root", "--allow-root-tenant", "--sim"},
                        {}, 10000);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("chmod 600"), std::string::npos) << r.out;
  // The client reads its token before it connects: no server needed to be refused.
  Result client = RunProgram(Remote("tls://127.0.0.1:1", "1GiB", {kProbe, "alloc", "4096"}),
                             {"GSLICE_REMOTE_TOKEN_FILE=" + files("token")});
  EXPECT_NE(client.out.find("chmod 600"), std::string::npos) << client.out;
  EXPECT_NE(client.out.find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << client.out;
}

}  // namespace
}  // namespace gslice::remote
