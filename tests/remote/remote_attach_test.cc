// Attach on use and release when idle (docs/remote.md, "Attached only while used"), end to end
// on the simulated driver: a client that only asks about the devices holds no worker and no
// slice; its first call that needs a GPU starts the worker; a remote slice with an idle
// timeout is suspended to host memory by gsliced and resumed by the client's next call, its
// data intact, and `gslice ls` names it as remote with its client and state.
// Every test uses its own simulated node, ledger, board and sockets (pid-based names).
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "calls.h"
#include "node.h"
#include "remote_test_support.h"
#include "socket_io.h"
#include "test_support.h"
#include "wire.h"

namespace {

using gslice::test::Child;
using nlohmann::json;
using namespace gslice::remote;

const std::string kBin = GSLICE_TEST_BIN;
const std::string kProgram = GSLICE_TEST_ATTACH_PROBE;

std::string Prefix() { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-attach"; }
std::string Dir() { return "/tmp/gslice-test-" + std::to_string(getpid()) + "-attach"; }

using shared::CountDescendants;

class RemoteAttach : public ::testing::Test {
 protected:
  void SetUp() override {
    shared::SetUpSimWorld(Prefix(), {"GSLICE_IDLE_TIMEOUT"});
    if (const std::string asan = GSLICE_TEST_ASAN_RUNTIME; !asan.empty()) setenv("LD_PRELOAD", asan.c_str(), 1);
    std::filesystem::remove_all(Dir());
    ASSERT_EQ(mkdir(Dir().c_str(), 0700), 0);
  }

  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(Dir(), ec);
    shared::RemoveSimWorld(Prefix());
  }

  static uint64_t SimUsed() { return shared::SimUsed(); }

  std::vector<std::string> Remote(const std::string& socket, std::vector<std::string> options) {
    std::vector<std::string> argv = {kBin + "/gslice", "run", "--remote", "unix:" + socket, "--memory", "1GiB"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), {"--", kProgram});
    return argv;
  }
};

TEST_F(RemoteAttach, DeviceQueriesHoldNoWorkerAndTheFirstGpuCallAttaches) {
  const std::string socket = Dir() + "/remoted.sock";
  Child server({kBin + "/gslice-remoted", "--listen", "unix:" + socket, "--sim", "--allow-root-tenant"});
  ASSERT_NE(server.ReadUntil("gslice-remoted: listening on", 20000), "");
  {
    Child client(Remote(socket, {}), {"GSLICE_LOG=info"});
    const std::string queried = client.ReadUntil("queried", 30000);
    // The slice's memory, as the worker's shim would report it, not the device's 2 GiB.
    EXPECT_EQ(queried, "queried 1 " + std::to_string(1ull << 30));
    EXPECT_EQ(CountDescendants(server.pid(), "--worker-fd"), 0) << "a worker runs before any GPU call";
    EXPECT_EQ(SimUsed(), 0u) << "device memory is held before any GPU call";
    client.WriteLine("go");
    std::string out;
    for (std::string line; out.find("written") == std::string::npos && client.ReadLine(&line, 30000);) out += line + "\n";
    EXPECT_NE(out.find("worker pid"), std::string::npos) << out;
    EXPECT_EQ(CountDescendants(server.pid(), "--worker-fd"), 1) << out;
    EXPECT_GE(SimUsed(), 64ull << 20);
    client.WriteLine("go");
    EXPECT_EQ(client.ReadUntil("intact", 30000), "intact");
    client.WriteLine("go");
    EXPECT_EQ(client.Wait(&out, 30000), 0) << out;
  }
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
}

// NVML before any CUDA call (nvidia-smi, an NVML-based device check) is answered by the probe:
// no worker and no device memory; the slice's memory, nothing used, no processes (not even
// another program's on the same GPU). The handle the probe gave out still names the device once
// the first CUDA call has attached the worker, and the worker's NVML is initialised for the
// client that initialised it on the probe.
TEST_F(RemoteAttach, NvmlQueriesHoldNoWorkerAndTheirHandlesSurviveTheAttach) {
  const std::string socket = Dir() + "/remoted.sock";
  Child server({kBin + "/gslice-remoted", "--listen", "unix:" + socket, "--sim", "--allow-root-tenant"});
  ASSERT_NE(server.ReadUntil("gslice-remoted: listening on", 20000), "");
  // Someone else's program on the GPU node, holding memory.
  Child other({kBin + "/gslice", "run", "--sim", "--memory", "1GiB", "--", kProgram});
  ASSERT_EQ(other.ReadUntil("queried", 30000).rfind("queried", 0), 0u);
  other.WriteLine("go");
  ASSERT_EQ(other.ReadUntil("written", 30000), "written");
  const uint64_t others = SimUsed();
  {
    std::vector<std::string> argv = Remote(socket, {});
    argv.push_back("nvml");
    Child client(argv, {"GSLICE_LOG=info"});
    const std::string queried = client.ReadUntil("nvml", 30000);
    EXPECT_EQ(queried, "nvml 1 " + std::to_string(1ull << 30) + " 0 0");
    EXPECT_EQ(CountDescendants(server.pid(), "--worker-fd"), 0) << "NVML queries started a worker";
    EXPECT_EQ(SimUsed(), others) << "device memory is held before any GPU call";
    client.WriteLine("go");
    std::string out;
    for (std::string line; out.find("attached") == std::string::npos && client.ReadLine(&line, 30000);)
      out += line + "\n";
    const size_t at = out.find("attached same name ");
    ASSERT_NE(at, std::string::npos) << out;
    EXPECT_GE(std::stoull(out.substr(at + 19)), 64ull << 20) << out;  // the worker's slice, in use
    EXPECT_EQ(CountDescendants(server.pid(), "--worker-fd"), 1) << out;
    // NCCL looks its GPU up by PCI bus id, under the first version's name.
    EXPECT_EQ(client.ReadUntil("by bus id", 30000), "by bus id same device");
    client.WriteLine("go");
    EXPECT_EQ(client.ReadUntil("shutdown", 30000), "shutdown 0");
    EXPECT_EQ(client.Wait(&out, 30000), 0) << out;
  }
  other.WriteLine("go");
  other.WriteLine("go");
  other.Wait(nullptr, 30000);
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
}

// A probe connection answers device queries and nothing else: a client that asks it for
// memory is disconnected, and no worker or slice is made for it.
TEST_F(RemoteAttach, AProbeRefusesCallsThatNeedASlice) {
  const std::string socket = Dir() + "/remoted.sock";
  Child server({kBin + "/gslice-remoted", "--listen", "unix:" + socket, "--sim", "--allow-root-tenant"});
  ASSERT_NE(server.ReadUntil("gslice-remoted: listening on", 20000), "");
  Address address;
  std::string error;
  ASSERT_TRUE(ParseAddress("unix:" + socket, &address, &error)) << error;
  const int fd = Connect(address, &error);
  ASSERT_GE(fd, 0) << error;
  timeval limit = {.tv_sec = 20, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  auto call = [&](uint32_t seq, uint32_t op, const Writer& w, std::vector<uint8_t>* reply) {
    FrameHeader h;
    return WriteFrame(fd, FrameHeader{.seq = seq, .op = op}, w.buffer().data(), w.size()) &&
           ReadFrame(fd, kMaxFrame, &h, reply) == FrameRead::kOk && h.seq == seq && h.op == (op | kReplyBit);
  };
  Writer hello;
  EncodeHello(Hello{.calls_hash = kCallsHash, .memory = "1GiB", .compute = "", .share = "", .slice_class = "",
                    .idle_timeout = "", .host = "test"},
              &hello);
  std::vector<uint8_t> reply;
  ASSERT_TRUE(call(0, kOpProbe, hello, &reply));
  Writer init;
  EncodeRequestPrefix(RequestPrefix{}, &init);
  init.Put<uint32_t>(0);
  ASSERT_TRUE(call(1, kOp_cuInit, init, &reply));
  Writer count;
  EncodeRequestPrefix(RequestPrefix{}, &count);
  count.Put<uint8_t>(1);
  ASSERT_TRUE(call(2, kOp_cuDeviceGetCount, count, &reply));
  int32_t result = -1, devices = 0;
  Reader r(reply.data(), reply.size());
  ASSERT_TRUE(r.Get(&result) && r.Get(&devices));
  EXPECT_EQ(result, CUDA_SUCCESS);
  EXPECT_EQ(devices, 1);
  Writer alloc;
  EncodeRequestPrefix(RequestPrefix{}, &alloc);
  alloc.Put<uint8_t>(1);
  alloc.Put<uint64_t>(64ull << 20);
  EXPECT_FALSE(call(3, kOp_cuMemAlloc_v2, alloc, &reply)) << "a probe answered cuMemAlloc";
  EXPECT_NE(server.ReadUntil("gslice-remoted[", 20000).find("needs a slice"), std::string::npos);
  EXPECT_EQ(CountDescendants(server.pid(), "--worker-fd"), 0);
  EXPECT_EQ(SimUsed(), 0u);
  close(fd);
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
}

TEST_F(RemoteAttach, AnIdleRemoteSliceIsSuspendedAndTheNextCallResumesItIntact) {
  const std::string api = Dir() + "/api.sock", socket = Dir() + "/remoted.sock";
  std::ofstream(Dir() + "/gsliced.toml") << "socket = \"" << api << "\"\n"
                                        << "database = \"" << Dir() << "/state/gsliced.db\"\n"
                                        << "ledger = \"" << Prefix() << "-ledger\"\n"
                                        << "sample_interval_ms = 200\n";
  auto ls = [&](bool as_json) {
    std::vector<std::string> argv = {kBin + "/gslice", "ls", "--socket", api};
    if (as_json) argv.push_back("--json");
    Child c(argv);
    std::string out;
    const int code = c.Wait(&out, 10000);
    return code == 0 ? out : std::string();
  };
  // The remote slice as gsliced lists it (null while there is none).
  auto remote_slice = [&]() -> json {
    json node = json::parse(ls(true), nullptr, false);
    if (!node.is_object()) return nullptr;
    for (const json& s : node["slices"])
      if (s["remote"].is_object()) return s;
    return nullptr;
  };
  Child daemon({kBin + "/gsliced", "--sim", "--config", Dir() + "/gsliced.toml"});
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    up = !ls(true).empty();
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(up);
  Child server({kBin + "/gslice-remoted", "--listen", "unix:" + socket, "--sim", "--allow-root-tenant"}, {"GSLICE_SOCKET=" + api});
  ASSERT_NE(server.ReadUntil("gslice-remoted: listening on", 20000), "");
  {
    Child client(Remote(socket, {"--idle-timeout", "3s"}));
    ASSERT_NE(client.ReadUntil("queried", 30000), "");
    EXPECT_TRUE(remote_slice().is_null()) << ls(true);  // device queries hold no slice
    client.WriteLine("go");
    ASSERT_EQ(client.ReadUntil("written", 30000), "written");
    json slice = remote_slice();
    ASSERT_TRUE(slice.is_object()) << ls(true);
    EXPECT_EQ(slice["idle_timeout_s"], 3);
    EXPECT_NE(slice["remote"]["client"].get<std::string>().find("unix pid"), std::string::npos) << slice;
    // Idle for 3 s: gsliced suspends the worker to host memory.
    bool suspended = false;
    for (int i = 0; i < 300 && !suspended; ++i) {
      slice = remote_slice();
      suspended = slice.is_object() && slice["remote"]["state"] == "suspended" && slice["activity"] == "suspended";
      if (!suspended) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(suspended) << ls(true);
    EXPECT_EQ(SimUsed(), 0u) << "the suspended worker still holds device memory";
    const std::string table = ls(false);
    EXPECT_NE(table.find(": remote, client "), std::string::npos) << table;
    EXPECT_NE(table.find(", suspended"), std::string::npos) << table;
    // The next call resumes it, with the data as it was.
    client.WriteLine("go");
    EXPECT_EQ(client.ReadUntil("intact", 60000), "intact");
    // Page-locked memory shared with the worker is still its after the release.
    EXPECT_EQ(client.ReadUntil("pinned", 60000), "pinned intact");
    bool attached = false;
    for (int i = 0; i < 100 && !attached; ++i) {
      slice = remote_slice();
      attached = slice.is_object() && slice["remote"]["state"] == "attached";
      if (!attached) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(attached) << ls(true);
    client.WriteLine("go");
    std::string rest;
    EXPECT_EQ(client.Wait(&rest, 30000), 0) << rest;
  }
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
  daemon.Kill(SIGTERM);
  daemon.Wait(nullptr, 10000);
}

}  // namespace
