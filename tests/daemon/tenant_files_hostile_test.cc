// Hostile tenants and the files they own: an unprivileged tenant (user nobody) resizes,
// truncates, scribbles over and locks its own slice's usage file in gsliced's node ledger —
// everything the kernel lets the file's owner do — while gsliced, the CLI and another slice's
// shimmed program keep running. Checked from the outside: gsliced answers, the neighbour's
// program finishes its work and exits 0, the CLI lists the node. Runs as root (CI); the
// tenant is a forked child that drops to nobody.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "daemon_test_support.h"
#include "gslice/ledger.h"
#include "sim_gsliced_fixture.h"

namespace gslice {
namespace {

using nlohmann::json;
using testing::Program;
using Clock = std::chrono::steady_clock;

constexpr uid_t kNobody = 65534;

class TenantFiles : public testing::SimGsliced {
 protected:
  TenantFiles() : SimGsliced("tenant-files") {}

  // The usage file of the only slice nobody owns in gsliced's ledger ("" when none).
  std::string NobodysUsageFile() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(ledger_, ec)) {
      struct stat st;
      const std::string name = e.path().filename();
      if (name.rfind("slice-", 0) == 0 && lstat(e.path().c_str(), &st) == 0 && st.st_uid == kNobody) return e.path();
    }
    return "";
  }

  // Whether slice `name` lists a process in gsliced.
  bool HasProcess(const std::string& name) {
    json s = Get("/v1/slices/" + name);
    return s.is_object() && s.contains("processes") && s["processes"].is_array() && !s["processes"].empty();
  }
};

// What the tenant does to its own file for `seconds`: every operation its write permission
// allows, in a loop, ending with the file cut to nothing. Returns the child's pid.
pid_t AttackOwnFile(const std::string& path, double seconds) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (setgroups(0, nullptr) != 0 || setresgid(kNobody, kNobody, kNobody) != 0 || setresuid(kNobody, kNobody, kNobody) != 0) {
    _exit(77);
  }
  const int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) _exit(78);
  std::mt19937_64 rng(42);
  const off_t size = static_cast<off_t>(sizeof(LedgerUsage));
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  for (int round = 0; Clock::now() < end; ++round) {
    switch (round % 5) {
      case 0: ftruncate(fd, 0); break;                 // nothing left
      case 1: ftruncate(fd, size / 2); break;          // the compute page stays, slots go
      case 2: ftruncate(fd, size * 4); break;          // grown
      case 3: {                                        // back to its size, with garbage
        ftruncate(fd, size);
        char junk[4096];
        for (char& c : junk) c = static_cast<char>(rng());
        for (off_t at = 0; at < size; at += static_cast<off_t>(sizeof junk) * 7) pwrite(fd, junk, sizeof junk, at);
        break;
      }
      case 4: {  // every liveness byte locked, then released
        struct flock l = {};
        l.l_type = F_WRLCK;
        l.l_whence = SEEK_SET;
        l.l_start = kLedgerLockBase;
        l.l_len = kLedgerMaxSlots + kLedgerSliceComputeEntries;
        fcntl(fd, F_OFD_SETLK, &l);
        break;
      }
    }
    usleep(3000);
  }
  ftruncate(fd, 0);
  _exit(0);
}

TEST_F(TenantFiles, ShrinkingItsOwnUsageFileLeavesGslicedAndItsNeighboursRunning) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to act as another user)";
  Start();
  std::string out, err;
  ASSERT_EQ(Cli("create mine --gpus 0 --memory 1GiB --class opportunistic --user nobody", &out, &err), 0) << err;
  ASSERT_EQ(Cli("create neighbour --gpus 0 --memory 2GiB", &out, &err), 0) << err;
  const std::string usage = NobodysUsageFile();
  ASSERT_FALSE(usage.empty()) << "no usage file of nobody's in " << ledger_;

  // Another slice's shimmed program: its launch gate reads every slice's compute entries.
  Program neighbour({GSLICE_CLI, "run", "--sim", "--name", "neighbour", "--", GSLICE_TEST_COMPUTE_WORKER, "--seconds",
                     "6", "--kernel-us", "500"});
  for (const auto until = Clock::now() + std::chrono::seconds(20); !HasProcess("neighbour") && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(HasProcess("neighbour")) << "the neighbour's program did not start";

  const pid_t attacker = AttackOwnFile(usage, 3.0);
  ASSERT_GT(attacker, 0);
  // gsliced keeps answering while it happens (it reads every slice's usage each sample).
  int answered = 0, asked = 0;
  for (int status = 0; waitpid(attacker, &status, WNOHANG) == 0;) {
    for (const char* path : {"/v1/slices", "/metrics"}) {
      auto r = Api().Get(path);
      ++asked;
      if (r && r->status == 200) ++answered;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(answered, asked) << "gsliced stopped answering while a tenant resized its own file";
  // The file stays short: gsliced goes on sampling it.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  int status = 0;
  EXPECT_EQ(waitpid(pid_, &status, WNOHANG), 0) << "gsliced died: " << (WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exit");
  auto health = Api().Get("/v1/slices/neighbour");
  ASSERT_TRUE(health && health->status == 200);

  // The neighbour did its work and exited cleanly.
  const std::string line = neighbour.ReadLine();
  EXPECT_NE(line.find("kernels="), std::string::npos) << line;
  EXPECT_GT(std::strtoull(line.c_str() + std::min(line.size(), line.find("kernels=") + 8), nullptr, 10), 0u) << line;
  EXPECT_EQ(neighbour.Stop(), 0);

  // The CLI, as root and as another user, still lists the node.
  EXPECT_EQ(Cli("ls", &out, &err), 0) << err;
  EXPECT_NE(out.find("neighbour"), std::string::npos) << out;
  EXPECT_EQ(Cli("ls", &out, &err, "65533"), 0) << err;
  // A new program of the neighbour's slice starts and finishes beside the short file.
  EXPECT_EQ(Cli("run --sim --name neighbour -- " + std::string(GSLICE_TEST_COMPUTE_WORKER) +
                    " --seconds 1 --kernel-us 500",
                &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("kernels="), std::string::npos) << out;
}

}  // namespace
}  // namespace gslice
