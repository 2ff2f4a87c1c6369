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
#include "socket_io.h"
#include "test_support.h"
#include "wire.h"

namespace gslice::remote {
namespace {

using gslice::test::Child;

const std::string kBin = GSLICE_TEST_BIN;
const std::string kProbe = GSLICE_TEST_PROBE;

std::string Prefix() { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-remote"; }
std::string SocketPath() { return "/tmp/gslice-test-" + std::to_string(getpid()) + "-remoted.sock"; }

struct Result {
  int code = -1;
  std::string out;
};

Result RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}, int timeout_ms = 60000) {
  Child c(argv, env);
  Result r;
  r.code = c.Wait(&r.out, timeout_ms);
  return r;
}

std::vector<std::string> Direct(const std::string& memory, std::vector<std::string> cmd) {
  std::vector<std::string> argv = {kBin + "/gslice", "run", "--sim", "--memory", memory, "--"};
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  return argv;
}

std::vector<std::string> Remote(const std::string& address, const std::string& memory, std::vector<std::string> cmd) {
  std::vector<std::string> argv = {kBin + "/gslice", "run", "--remote", address, "--memory", memory, "--"};
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  return argv;
}

// The worker's pid from the client's info log line.
pid_t WorkerPid(const std::string& line) {
  size_t at = line.find("worker pid ");
  return at == std::string::npos ? -1 : static_cast<pid_t>(std::stol(line.substr(at + 11)));
}

bool Gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

class RemoteSim : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("GSLICE_SIM_STATE", (Prefix() + "-node").c_str(), 1);
    setenv("GSLICE_SIM_DEVICES", "1", 1);
    setenv("GSLICE_SIM_MEMORY", "2GiB", 1);
    setenv("GSLICE_LEDGER", (Prefix() + "-ledger").c_str(), 1);
    setenv("GSLICE_SUSPEND_BOARD", (Prefix() + "-board").c_str(), 1);
    setenv("GSLICE_CONTEXT_OVERHEAD", "64MiB", 1);
    for (const char* v : {"GSLICE_REMOTE", "GSLICE_SOCKET", "GSLICE_DAEMON", "GSLICE_MEMORY", "GSLICE_LOG",
                          "GSLICE_CLASS", "GSLICE_COMPUTE", "GSLICE_SHARE"}) {
      unsetenv(v);
    }
    // The sanitize build: the ASan runtime first, before the shim gslice run preloads.
    if (const std::string asan = GSLICE_TEST_ASAN_RUNTIME; !asan.empty()) setenv("LD_PRELOAD", asan.c_str(), 1);
    unlink(SocketPath().c_str());
    server_ = new Child({kBin + "/gslice-remoted", "--listen", "unix:" + SocketPath(), "--sim"});
    ASSERT_NE(server_->ReadUntil("gslice-remoted: listening on", 20000), "");
  }

  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      server_->Kill(SIGTERM);
      server_->Wait(nullptr, 10000);
      delete server_;
      server_ = nullptr;
    }
    unlink(SocketPath().c_str());
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
      if (entry.path().string().rfind(Prefix(), 0) == 0) std::filesystem::remove_all(entry.path(), ec);
    }
  }

  static std::string Address() { return "unix:" + SocketPath(); }

  static uint64_t SimUsed() {
    sim::Node node;
    std::string error;
    if (!sim::Node::Open(&node, &error)) return ~0ull;
    return node.Used(0);
  }

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
  // A request's payload: the current context (none), then the call's arguments.
  static Writer Request() {
    Writer w;
    w.Put<uint64_t>(0);
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

TEST_F(RemoteSim, CallsNotForwardedReturnNotSupportedAndAreNamed) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "unforwarded"}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("CUDA_ERROR_NOT_SUPPORTED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuMemAllocManaged is not forwarded"), std::string::npos) << r.out;
}

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
    Child server({kBin + "/gslice-remoted", "--listen", "unix:" + remoted, "--sim"},
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
  EXPECT_NE(bad.out.find("expected unix:PATH or tcp://HOST:PORT"), std::string::npos) << bad.out;
  Result sim = RunProgram({gslice, "run", "--remote", Address(), "--sim", "--memory", "1GiB", "--", "/bin/true"});
  EXPECT_EQ(sim.code, 2);
  EXPECT_NE(sim.out.find("gslice-remoted --sim"), std::string::npos) << sim.out;
  Result no_memory = RunProgram({gslice, "run", "--remote", Address(), "--", "/bin/true"});
  EXPECT_EQ(no_memory.code, 2);
  EXPECT_NE(no_memory.out.find("--memory is required"), std::string::npos) << no_memory.out;
}

TEST_F(RemoteSim, TcpIsServedOnLoopbackAndRefusedElsewhere) {
  for (const char* wide : {"tcp://0.0.0.0:0", "tcp://[::]:0"}) {
    Result r = RunProgram({kBin + "/gslice-remoted", "--listen", wide, "--sim"}, {}, 10000);
    EXPECT_EQ(r.code, 2) << wide;
    EXPECT_NE(r.out.find("token authentication and TLS"), std::string::npos) << r.out;
  }
  Child server({kBin + "/gslice-remoted", "--listen", "tcp://127.0.0.1:0", "--sim"});
  const std::string line = server.ReadUntil("gslice-remoted: listening on", 20000);
  const size_t at = line.find("tcp://");
  ASSERT_NE(at, std::string::npos) << line;
  const std::string address = line.substr(at, line.find(' ', at) - at);
  Result r = RunProgram(Remote(address, "1GiB", {kProbe, "alloc", "4096"}));
  EXPECT_EQ(r.out, "CUDA_SUCCESS\n");
  server.Kill(SIGTERM);
  EXPECT_EQ(server.Wait(nullptr, 10000), 0);
}

}  // namespace
}  // namespace gslice::remote
