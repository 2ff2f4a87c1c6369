#include "shim_env.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <filesystem>

#include "gslice/clock.h"

extern char** environ;

namespace gslice::test {
namespace {

// MonotonicNs in seconds.
double Now() { return static_cast<double>(gslice::MonotonicNs()) * 1e-9; }

std::vector<std::string> BuildEnv(const std::map<std::string, std::string>& vars) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (vars.count(key) == 0 && key.rfind("GSLICE_", 0) != 0 && key != "LD_PRELOAD" && key != "CUDA_VISIBLE_DEVICES") {
      env.push_back(kv);
    }
  }
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return env;
}

void DrainInto(int fd, std::string* s) {
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) s->append(buf, static_cast<size_t>(n));
}

}  // namespace

std::string ClientPath() { return GSLICE_TEST_CLIENT; }
std::string GsliceBinary() { return GSLICE_TEST_GSLICE; }

ShimEnv::ShimEnv(const std::string& name) {
  std::string base = "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-" + name;
  std::string preload;
  if (std::string(GSLICE_TEST_ASAN_RUNTIME).size() > 0) preload = std::string(GSLICE_TEST_ASAN_RUNTIME) + " ";
  preload += std::string(GSLICE_TEST_SHIM_DIR) + "/libcuda.so.1 " + GSLICE_TEST_SHIM_DIR + "/libnvidia-ml.so.1";
  vars["LD_PRELOAD"] = preload;
  vars["GSLICE_REAL_DRIVER"] = std::string(GSLICE_TEST_SIM_DIR) + "/libcuda.so.1";
  vars["GSLICE_REAL_NVML"] = std::string(GSLICE_TEST_SIM_DIR) + "/libnvidia-ml.so.1";
  vars["GSLICE_SIM_STATE"] = base + "-sim";
  vars["GSLICE_LEDGER"] = base + "-ledger";
  // Every shimmed process claims a suspend-board entry at its first driver call.
  vars["GSLICE_SUSPEND_BOARD"] = base + "-board";
  vars["GSLICE_SLICE"] = name;
  vars["GSLICE_MEMORY"] = "64MiB";
  vars["GSLICE_CONTEXT_OVERHEAD"] = "0";
  vars["GSLICE_SIM_MEMORY"] = "1GiB";
  // Killed clients are part of the tests: no leak reports from them.
  vars["ASAN_OPTIONS"] = "detect_leaks=0";
}

ShimEnv::~ShimEnv() {
  unlink(vars["GSLICE_SIM_STATE"].c_str());
  std::filesystem::remove_all(vars["GSLICE_LEDGER"]);
  // Where a process that may not use the ledger falls back to (its user's own).
  std::filesystem::remove_all(vars["GSLICE_LEDGER"] + "-u" + std::to_string(geteuid()));
  // Only the board this environment named (a test may point it at a shared one).
  const std::string& board = vars["GSLICE_SUSPEND_BOARD"];
  if (board.rfind("/dev/shm/gslice-test-" + std::to_string(getpid()) + "-", 0) == 0) std::filesystem::remove_all(board);
}

int ShimEnv::Start(const std::vector<std::string>& argv, int* in_fd, int* out_fd) const {
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0) return -1;
  std::vector<std::string> env = BuildEnv(vars);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    e.push_back(nullptr);
    execve(a[0], a.data(), e.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  *in_fd = in_pipe[1];
  *out_fd = out_pipe[0];
  return pid;
}

ChildResult ShimEnv::Run(const std::vector<std::string>& argv, double timeout_s) const {
  ChildResult res;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return res;
  std::vector<std::string> env = BuildEnv(vars);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    e.push_back(nullptr);
    execve(a[0], a.data(), e.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  const double deadline = Now() + timeout_s;
  int status = 0;
  for (;;) {
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    poll(fds, 2, 20);
    DrainInto(out_pipe[0], &res.out);
    DrainInto(err_pipe[0], &res.err);
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      res.timed_out = true;
      break;
    }
  }
  DrainInto(out_pipe[0], &res.out);
  DrainInto(err_pipe[0], &res.err);
  close(out_pipe[0]);
  close(err_pipe[0]);
  if (!res.timed_out && WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) res.signal = WTERMSIG(status);
  return res;
}

std::string ReadLine(int fd, double timeout_s) {
  std::string line;
  const double deadline = Now() + timeout_s;
  while (Now() < deadline) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char c;
    ssize_t n = read(fd, &c, 1);
    if (n <= 0) return line;
    if (c == '\n') return line;
    line.push_back(c);
  }
  return line;
}

}  // namespace gslice::test
