// A test fixture for gsliced's sim tests (GSLICED and GSLICE_CLI set by the target): a
// private config, ledger, simulated driver state and suspend board; gsliced started with
// Start() on its unix socket; the CLI run as this or another user. Everything is removed in
// TearDown.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon_test_support.h"

#ifndef GSLICE_TEST_ASAN_RUNTIME
#define GSLICE_TEST_ASAN_RUNTIME ""
#endif

namespace gslice::testing {

class SimGsliced : public ::testing::Test {
 protected:
  // tag: the test folder's name (/tmp/<tag>-...).
  explicit SimGsliced(const char* tag) : tag_(tag) {}

  void SetUp() override {
    dir_ = testing::UniquePath(tag_, "/tmp");
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0);
    socket_ = dir_ + "/api.sock";
    // No nvml_library: --sim finds the simulated driver itself.
    std::ofstream(dir_ + "/gsliced.toml") << "socket = \"" << socket_ << "\"\n"
                                          << "socket_mode = \"0666\"\n"
                                          << "database = \"" << dir_ << "/state/gsliced.db\"\n"
                                          << "ledger = \"" << ledger_ << "\"\n"
                                          << "sample_interval_ms = 200\n";
    setenv("GSLICE_SIM_STATE", sim_state_.c_str(), 1);
    setenv("GSLICE_SUSPEND_BOARD", board_.c_str(), 1);
    setenv("GSLICE_SOCKET", socket_.c_str(), 1);
    setenv("GSLICE_LEDGER", ledger_.c_str(), 1);  // the daemon's ledger, not the node's
    setenv("GSLICE_CONTEXT_OVERHEAD", "0", 1);       // the slices hold what the programs allocate
    // Under the sanitize preset the shims are instrumented: the ASan runtime goes first.
    if (!std::string(GSLICE_TEST_ASAN_RUNTIME).empty()) {
      setenv("LD_PRELOAD", GSLICE_TEST_ASAN_RUNTIME, 1);
      setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    }
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    for (const char* v : {"GSLICE_SIM_STATE", "GSLICE_SUSPEND_BOARD", "GSLICE_SOCKET", "GSLICE_LEDGER",
                        "GSLICE_CONTEXT_OVERHEAD", "LD_PRELOAD"}) {
      unsetenv(v);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    std::filesystem::remove_all(ledger_, ec);
    std::filesystem::remove_all(board_, ec);
    unlink(sim_state_.c_str());
  }

  void Start(std::vector<std::string> extra = {"--sim"}) {
    pid_ = SpawnGsliced(GSLICED, dir_, extra, /*clear_preload=*/true);
    ASSERT_TRUE(AwaitGsliced(&pid_, dir_, [&] {
      auto r = Api().Get("/healthz");
      return r && r->status == 200;
    }));
  }
  httplib::Client Api() {
    httplib::Client c(socket_);
    c.set_address_family(AF_UNIX);
    c.set_read_timeout(30, 0);
    return c;
  }
  nlohmann::json Get(const std::string& path) {
    auto r = Api().Get(path);
    return r ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json();
  }
  // Runs the CLI (as user `as`: "" for this user, else through setpriv).
  int Cli(const std::string& args, std::string* out, std::string* err = nullptr, const std::string& as = "") {
    static int n = 0;
    const std::string base = dir_ + "/cli-" + std::to_string(n++);
    std::string prefix = as.empty() ? "" : "setpriv --reuid=" + as + " --regid=" + as + " --clear-groups ";
    int rc = std::system((prefix + GSLICE_CLI + " " + args + " > " + base + ".out 2> " + base + ".err").c_str());
    *out = ReadAll(base + ".out");
    if (err != nullptr) *err = ReadAll(base + ".err");
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }

  const char* tag_;
  std::string dir_, socket_;
  std::string ledger_ = testing::UniquePath("ledger");
  std::string sim_state_ = testing::UniquePath("sim");
  std::string board_ = testing::UniquePath("suspend-board");
  pid_t pid_ = -1;
};

}  // namespace gslice::testing
