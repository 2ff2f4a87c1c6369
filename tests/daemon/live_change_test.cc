// Live changes on the simulated driver, with the real gsliced (started with --sim), the real
// CLI and shimmed programs: gsliced --sim, `gslice run --name` taking a slice from gsliced,
// and resizing a slice while a program runs in it (gslice set, PATCH /v1/slices/NAME).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "daemon_test_support.h"
#include "sim_gsliced_fixture.h"
#include "gslice/ledger.h"

namespace gslice {
namespace {

using nlohmann::json;
using testing::kGiB;
using testing::ReadAll;
using testing::AwaitGsliced;
using testing::Program;
using testing::SpawnGsliced;

// "total=N free=N nvml=N" -> the field's value, 0 when missing.
uint64_t Field(const std::string& line, const std::string& key) {
  size_t at = line.find(key + "=");
  return at == std::string::npos ? 0 : std::strtoull(line.c_str() + at + key.size() + 1, nullptr, 10);
}

class LiveChange : public testing::SimGsliced {
 protected:
  LiveChange() : SimGsliced("live") {}
  // `client watch` in slice `name`, taken from gsliced; empty when it did not start.
  std::unique_ptr<Program> Watch(const std::string& name) {
    auto p = std::make_unique<Program>(
        std::vector<std::string>{GSLICE_CLI, "run", "--sim", "--name", name, "--", GSLICE_TEST_CLIENT, "watch"});
    if (p->ReadLine() != "ready") return nullptr;
    return p;
  }
};

TEST_F(LiveChange, SimRunsOnTheSimulatedDriverAndSaysSo) {
  Start();
  EXPECT_NE(ReadAll(dir_ + "/gsliced.log").find("SIMULATED driver"), std::string::npos) << ReadAll(dir_ + "/gsliced.log");
  EXPECT_EQ(Get("/v1/gpus")["gpus"].size(), 2u);  // the sim's default node
  // Suspend works on the simulator: the sim's checkpoint API serves it.
  EXPECT_EQ(ReadAll(dir_ + "/gsliced.log").find("suspend/resume unavailable"), std::string::npos)
      << ReadAll(dir_ + "/gsliced.log");
  std::string out, err;
  ASSERT_EQ(Cli("create nb --gpus 0 --memory 2GiB", &out, &err), 0) << err;
  auto program = Watch("nb");
  ASSERT_NE(program, nullptr);
  ASSERT_EQ(program->Ask("alloc 1048576"), "ok");
  // The process shows in the ledger within a few samples.
  for (int i = 0; i < 100 && Get("/v1/slices/nb")["processes"].empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(Cli("suspend nb", &out, &err), 0) << err;
  EXPECT_EQ(Get("/v1/slices/nb")["state"], "suspended");
  ASSERT_EQ(Cli("resume nb", &out, &err), 0) << err;
  EXPECT_EQ(Get("/v1/slices/nb")["state"], "running");
  EXPECT_NE(program->Ask("info"), "");
  EXPECT_EQ(program->Stop(), 0);
}

TEST_F(LiveChange, RunByNameTakesTheSliceFromGsliced) {
  Start();
  std::string out, err;
  ASSERT_EQ(Cli("create train --gpus 1 --memory 3GiB --class opportunistic", &out, &err), 0) << err;
  auto program = Watch("train");
  ASSERT_NE(program, nullptr);
  const std::string info = program->Ask("info");
  EXPECT_EQ(Field(info, "total"), 3 * kGiB) << info;
  EXPECT_EQ(Field(info, "nvml"), 3 * kGiB) << info;
  EXPECT_EQ(program->Stop(), 0);
  // The slice stays: it was gsliced's before the run.
  EXPECT_EQ(Get("/v1/slices/train")["name"], "train");

  // No such slice: the error says so and how to make one; nothing runs.
  const std::string marker = dir_ + "/ran";
  EXPECT_EQ(Cli("run --sim --name nosuch -- touch " + marker, &out, &err), 2);
  EXPECT_NE(err.find("gsliced has no slice named 'nosuch'"), std::string::npos) << err;
  EXPECT_NE(err.find("gslice create nosuch"), std::string::npos) << err;
  // Another user's slice: refused with whose it is.
  EXPECT_EQ(Cli("run --sim --name train -- touch " + marker, &out, &err, "65534"), 2);
  EXPECT_NE(err.find("slice 'train' belongs to root (uid 0), not to you"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(marker));
  // Flags that the slice already decides are refused, not silently ignored.
  EXPECT_EQ(Cli("run --sim --name train --gpus 0 -- true", &out, &err), 2);
  EXPECT_NE(err.find("drop --gpus"), std::string::npos) << err;
}

// Asks `program` for "info" until `key` reads `want`, at most for `bound` (and at least once);
// returns the last line. gsliced writes the ledger before it answers, so the first ask after
// the answer already sees the change.
std::string AwaitField(Program* program, const std::string& key, uint64_t want,
                       std::chrono::milliseconds bound = std::chrono::milliseconds(100)) {
  const auto until = std::chrono::steady_clock::now() + bound;
  std::string line;
  do {
    line = program->Ask("info");
    if (Field(line, key) == want) break;
  } while (std::chrono::steady_clock::now() < until);
  return line;
}

TEST_F(LiveChange, ARunningProgramSeesItsLimitGrowAndShrink) {
  Start();
  std::string out, err;
  ASSERT_EQ(Cli("create grow --gpus 0 --memory 2GiB", &out, &err), 0) << err;
  auto program = Watch("grow");
  ASSERT_NE(program, nullptr);
  std::string info = program->Ask("info");
  ASSERT_EQ(Field(info, "total"), 2 * kGiB) << info;
  ASSERT_EQ(program->Ask("alloc " + std::to_string(kGiB + kGiB / 2)), "ok");
  ASSERT_EQ(program->Ask("alloc " + std::to_string(kGiB)), "oom");

  // Grow: cuMemGetInfo and NVML show it, and the program allocates the difference.
  ASSERT_EQ(Cli("set grow --memory 4GiB", &out, &err), 0) << err;
  info = AwaitField(program.get(), "total", 4 * kGiB);
  EXPECT_EQ(Field(info, "total"), 4 * kGiB) << info;
  EXPECT_EQ(Field(info, "nvml"), 4 * kGiB) << info;
  EXPECT_EQ(program->Ask("alloc " + std::to_string(kGiB)), "ok");

  // A shrink below what it holds (2.5 GiB) is refused with what it holds; nothing changes.
  EXPECT_EQ(Cli("set grow --memory 2GiB", &out, &err), 1);
  EXPECT_NE(err.find("slice 'grow' holds 2.5 GiB on GPU 0"), std::string::npos) << err;
  EXPECT_NE(err.find("more than the new limit of 2 GiB: nothing changed"), std::string::npos) << err;
  EXPECT_NE(err.find("--make-room"), std::string::npos) << err;
  EXPECT_EQ(Get("/v1/slices/grow")["memory_limit_bytes"], 4 * kGiB);
  info = program->Ask("info");
  EXPECT_EQ(Field(info, "total"), 4 * kGiB) << info;
  EXPECT_EQ(program->Ask("alloc " + std::to_string(kGiB)), "ok");  // the old limit still holds

  // Once it holds less, the shrink goes through and the program sees it.
  ASSERT_EQ(program->Ask("free"), "freed");
  ASSERT_EQ(Cli("set grow --memory 1GiB", &out, &err), 0) << err;
  info = AwaitField(program.get(), "total", kGiB);
  EXPECT_EQ(Field(info, "total"), kGiB) << info;
  EXPECT_EQ(Field(info, "nvml"), kGiB) << info;
  EXPECT_EQ(program->Ask("alloc " + std::to_string(kGiB + 1)), "oom");
  EXPECT_EQ(program->Ask("alloc " + std::to_string(kGiB)), "ok");
  EXPECT_EQ(program->Stop(), 0);
}

// A compute_worker line's kernels completed per ms in [from_ms, to_ms) of its window (its
// "buckets=" field counts them per 50 ms); -1 when the line has none.
double KernelRate(const std::string& line, double from_ms, double to_ms) {
  const size_t at = line.find("buckets=");
  if (at == std::string::npos) return -1;
  std::stringstream buckets(line.substr(at + 8));
  std::string item;
  long n = 0;
  for (int i = 0; std::getline(buckets, item, ','); ++i) {
    if (50.0 * i >= from_ms && 50.0 * (i + 1) <= to_ms) n += std::stol(item);
  }
  return static_cast<double>(n) / (to_ms - from_ms);
}

// `gslice set --cap` on a running program: gsliced writes the slice's cap into the ledger
// and the program, started with no compute policy, is capped within a second; its kernel rate
// is taken relative to a program of another slice on the other GPU over the same windows.
TEST_F(LiveChange, ARunningProgramIsCappedBySet) {
  Start();
  std::string out, err;
  ASSERT_EQ(Cli("create capped --gpus 0 --memory 2GiB", &out, &err), 0) << err;
  ASSERT_EQ(Cli("create free --gpus 1 --memory 2GiB", &out, &err), 0) << err;
  // compute_worker's --start-at is wall-clock ms since the epoch.
  const auto epoch_ms = [] {
    return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  const double start_at = epoch_ms() + 1500;  // time for both programs to start
  const auto job = [&](const char* slice) {
    return std::make_unique<Program>(std::vector<std::string>{
        GSLICE_CLI, "run", "--sim", "--name", slice, "--", GSLICE_TEST_COMPUTE_WORKER, "--seconds", "4",
        "--kernel-us", "1000", "--start-at", std::to_string(start_at)});
  };
  auto capped = job("capped");
  auto witness = job("free");
  while (epoch_ms() < start_at + 1500) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(Cli("set capped --cap 30%", &out, &err), 0) << err;
  const std::string c = capped->ReadLine();
  const std::string f = witness->ReadLine();
  EXPECT_EQ(capped->Stop(), 0);
  EXPECT_EQ(witness->Stop(), 0);
  const double free_before = KernelRate(f, 200, 1500), free_after = KernelRate(f, 2500, 4000);
  ASSERT_GT(free_before, 0.1) << f;
  ASSERT_GT(free_after, 0.1) << f;
  const double before = KernelRate(c, 200, 1500) / free_before;
  const double after = KernelRate(c, 2500, 4000) / free_after;  // from a second after the set
  EXPECT_GT(before, 0.5) << "capped " << c << "\nfree " << f;
  EXPECT_LT(after, 0.6 * before) << "capped " << c << "\nfree " << f;
  EXPECT_GT(after, 0.0) << "capped " << c << "\nfree " << f;
}

TEST_F(LiveChange, SetIsAdmittedLikeACreate) {
  Start();
  std::string out, err;
  ASSERT_EQ(Cli("create a --gpus 0 --memory 4GiB", &out, &err), 0) << err;
  ASSERT_EQ(Cli("create b --gpus 0 --memory 10GiB --share 60%", &out, &err), 0) << err;
  // GPU capacity: 16 GiB, 10 of which b reserves.
  EXPECT_EQ(Cli("set a --memory 8GiB", &out, &err), 1);
  EXPECT_NE(err.find("guaranteed memory free, asked 8 GiB"), std::string::npos) << err;
  EXPECT_EQ(Cli("set a --share 50%", &out, &err), 1);
  EXPECT_NE(err.find("compute"), std::string::npos) << err;
  EXPECT_EQ(Get("/v1/slices/a")["memory_limit_bytes"], 4 * kGiB);
  // As opportunistic work it reserves nothing, so it fits.
  ASSERT_EQ(Cli("set a --memory 8GiB --class opportunistic --cap 30% --share 20% --idle-timeout 30m", &out, &err),
            0)
      << err;
  json a = Get("/v1/slices/a");
  EXPECT_EQ(a["class"], "opportunistic");
  EXPECT_EQ(a["memory_limit_bytes"], 8 * kGiB);
  EXPECT_EQ(a["idle_timeout_s"], 1800);
  EXPECT_DOUBLE_EQ(a["gpus"][0]["compute_cap"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(a["gpus"][0]["compute_share"].get<double>(), 0.2);
  // What running processes read: the node ledger's limits file.
  Ledger ledger;
  ASSERT_EQ(ledger.Open(ledger_.c_str(), 2000, false), LedgerError::kOk) << ledger.detail();
  const int slice = ledger.FindSlice("a");
  ASSERT_GE(slice, 0);
  uint8_t uuid[16];
  ASSERT_TRUE(ParseGpuUuid(a["gpus"][0]["uuid"].get<std::string>().c_str(), uuid));
  const int gpu = ledger.FindGpu(slice, uuid);
  ASSERT_GE(gpu, 0);
  EXPECT_EQ(ledger.Limit(slice, gpu), static_cast<int64_t>(8 * kGiB));
  EXPECT_EQ(ledger.ComputeCapWord(slice, gpu), kGpuPolicySet | 300u);
  EXPECT_EQ(ledger.ComputeShareWord(slice, gpu), kGpuPolicySet | 200u);
  EXPECT_EQ(ledger.limits()->slices[slice].slice_class, static_cast<uint32_t>(SliceClass::kOpportunistic));
  // The change is in the event log, and it survives a restart (the database has it).
  bool logged = false;
  const json events = Get("/v1/events");
  for (const json& e : events["events"]) logged = logged || (e["slice"] == "a" && e["kind"] == "set");
  EXPECT_TRUE(logged) << events.dump();
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  Start();
  a = Get("/v1/slices/a");
  EXPECT_EQ(a["memory_limit_bytes"], 8 * kGiB);
  EXPECT_DOUBLE_EQ(a["gpus"][0]["compute_cap"].get<double>(), 0.3);

  // Only the owner or an admin: nobody may not change root's slice.
  EXPECT_EQ(Cli("set a --memory 1GiB", &out, &err, "65534"), 1);
  EXPECT_NE(err.find("slice 'a' belongs to root (uid 0)"), std::string::npos) << err;
  EXPECT_EQ(Get("/v1/slices/a")["memory_limit_bytes"], 8 * kGiB);
  // Bad input: a clear error, nothing sent.
  EXPECT_EQ(Cli("set a --memory 1GiB,2GiB", &out, &err), 1);
  EXPECT_NE(err.find("2 sizes for the 1 GPUs"), std::string::npos) << err;
  EXPECT_EQ(Cli("set a", &out, &err), 2);
  EXPECT_NE(err.find("nothing to change"), std::string::npos) << err;
  EXPECT_EQ(Cli("set nosuch --memory 1GiB", &out, &err), 1);
  EXPECT_NE(err.find("no slice named 'nosuch'"), std::string::npos) << err;
}

TEST_F(LiveChange, MakeRoomSuspendsTheSliceAndSaysSo) {
  Start();
  std::string out, err;
  ASSERT_EQ(Cli("create nb --gpus 0 --memory 1GiB", &out, &err), 0) << err;
  auto program = Watch("nb");
  ASSERT_NE(program, nullptr);
  ASSERT_EQ(program->Ask("alloc " + std::to_string(kGiB / 2)), "ok");
  for (int i = 0; i < 100 && Get("/v1/slices/nb")["processes"].empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(Cli("set nb --memory 256MiB --make-room", &out, &err), 0) << err;
  EXPECT_NE(out.find("suspended slice 'nb' to make room: it held 512 MiB on GPU 0"), std::string::npos) << out;
  json nb = Get("/v1/slices/nb");
  EXPECT_EQ(nb["state"], "suspended");
  EXPECT_EQ(nb["memory_limit_bytes"], 256ull << 20);
  // Resumed, it is over its new limit: it allocates nothing more until it frees.
  ASSERT_EQ(Cli("resume nb", &out, &err), 0) << err;
  EXPECT_EQ(Get("/v1/slices/nb")["state"], "running");
  const std::string info = program->Ask("info");
  EXPECT_EQ(Field(info, "total"), 256ull << 20) << info;
  EXPECT_EQ(program->Ask("alloc 1048576"), "oom");
  EXPECT_EQ(program->Ask("free"), "freed");
  EXPECT_EQ(program->Ask("alloc 1048576"), "ok");
  EXPECT_EQ(program->Stop(), 0);
}

}  // namespace
}  // namespace gslice
