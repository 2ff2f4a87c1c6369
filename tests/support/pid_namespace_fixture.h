// Test helpers for processes in other pid namespaces (as containers run them): a child in a
// new user+pid+mount namespace with its own /proc, a shared page through which it reports,
// and a made-up /proc tree for PidResolver and IdentifyPid. Header-only; used by the ledger's
// and the suspend board's namespace tests and the suspend service's unit tests.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>

namespace gslice {

// What a child reports to the test (an anonymous shared page).
struct Report {
  std::atomic<int> ready;        // 1: set up and holding; < 0: failed at that step
  std::atomic<int> setup_errno;
  std::atomic<int> host_pid;     // the namespaced process as the test sees it
  std::atomic<int> inner_pid;    // as it sees itself
  std::atomic<int> child_pid;    // a forked child (fork test)
  std::atomic<int> slot;
  std::atomic<int> entry;
};

inline Report* NewReport() {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return new (p) Report{};
}

inline bool WaitFor(const std::function<bool()>& done, int max_ms = 20000) {
  for (int i = 0; i < max_ms; ++i) {
    if (done()) return true;
    usleep(1000);
  }
  return done();
}

// Runs body in the first process (pid 1) of a new pid namespace with its own /proc, as a
// container's processes run. Returns the pid of the intermediate process (which waits for
// the namespaced one and exits with its status); r->host_pid gets the namespaced process's
// pid as the caller sees it. r->ready < 0 reports a setup failure (r->setup_errno).
inline pid_t SpawnInNewPidNamespace(Report* r, const std::function<int()>& body) {
  pid_t mid = fork();
  if (mid != 0) return mid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // a failed test leaves nothing running (nor its namespace)
  // The intermediate: a new user namespace (so that this works unprivileged), pid namespace
  // (for its children) and mount namespace (for their /proc).
  if (unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS) != 0) {
    r->setup_errno.store(errno);
    r->ready.store(-1);
    _exit(77);
  }
  pid_t inner = fork();
  if (inner < 0) {
    r->setup_errno.store(errno);
    r->ready.store(-2);
    _exit(77);
  }
  if (inner == 0) {
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
      r->setup_errno.store(errno);
      r->ready.store(-3);
      _exit(77);
    }
    r->inner_pid.store(static_cast<int>(getpid()));
    _exit(body());
  }
  r->host_pid.store(static_cast<int>(inner));  // we are still in the caller's namespace
  int status = 0;
  waitpid(inner, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (r->ready.load() == 0) r->ready.store(-100 - code);  // the body failed before it was ready
  _exit(code);
}

// Skips (with the reason) where the kernel refuses user namespaces; fails on other errors.
#define WAIT_READY_OR_SKIP(r)                                                                     \
  do {                                                                                            \
    ASSERT_TRUE(WaitFor([&] { return (r)->ready.load() < 0 || ((r)->ready.load() == 1 && (r)->host_pid.load() > 1); })) \
        << "namespaced process never reported";                                                    \
    if ((r)->ready.load() == -1 && ((r)->setup_errno.load() == EPERM || (r)->setup_errno.load() == EINVAL ||  \
                                    (r)->setup_errno.load() == ENOSPC)) {                         \
      GTEST_SKIP() << "user/pid namespaces unavailable here: " << strerror((r)->setup_errno.load()); \
    }                                                                                             \
    ASSERT_EQ((r)->ready.load(), 1) << "setup failed (< -100: the body exited with -100 - code): " \
                                    << strerror((r)->setup_errno.load());                         \
  } while (0)

// Is the byte locked by anyone (a fresh open file sees every other open file's locks)?
inline bool ByteLockedInFile(const std::string& path, int64_t offset) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  struct flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(offset);
  fl.l_len = 1;
  bool locked = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  close(fd);
  return locked;
}

// PidResolver on a made-up /proc: namespaces by readlink of ns/pid, the innermost pid from
// NSpid, start times from stat, the cache and its re-check.
class FakeProc {
 public:
  FakeProc() : root_("/tmp/gslice-test-" + std::to_string(getpid()) + "-fakeproc") {
    Remove();
    mkdir(root_.c_str(), 0755);
  }
  ~FakeProc() { Remove(); }
  const std::string& root() const { return root_; }
  void Self(uint64_t ns) {
    mkdir((root_ + "/self").c_str(), 0755);
    mkdir((root_ + "/self/ns").c_str(), 0755);
    Link(root_ + "/self/ns/pid", ns);
  }
  void Process(uint32_t pid, uint64_t ns, const std::string& nspid, uint64_t start, char state = 'S') {
    const std::string dir = root_ + "/" + std::to_string(pid);
    mkdir(dir.c_str(), 0755);
    mkdir((dir + "/ns").c_str(), 0755);
    Link(dir + "/ns/pid", ns);
    Write(dir + "/status", "Name:\tx\nState:\tS (sleeping)\nTgid:\t" + std::to_string(pid) +
                               "\nNSpid:\t" + nspid + "\nNSpgid:\t" + nspid + "\n");
    std::string stat = std::to_string(pid) + " (a (b) c) " + state;
    for (int field = 4; field < 22; ++field) stat += " 0";
    stat += " " + std::to_string(start) + " 0 0\n";
    Write(dir + "/stat", stat);
  }
  void Gone(uint32_t pid) {
    std::string cmd = "rm -rf '" + root_ + "/" + std::to_string(pid) + "'";
    ASSERT_EQ(system(cmd.c_str()), 0);
  }

 private:
  static void Link(const std::string& at, uint64_t ns) {
    const std::string target = "pid:[" + std::to_string(ns) + "]";
    ASSERT_EQ(symlink(target.c_str(), at.c_str()), 0) << at;
  }
  static void Write(const std::string& at, const std::string& text) {
    FILE* f = fopen(at.c_str(), "w");
    ASSERT_NE(f, nullptr) << at;
    fputs(text.c_str(), f);
    fclose(f);
  }
  void Remove() {
    std::string cmd = "rm -rf '" + root_ + "'";
    if (system(cmd.c_str()) != 0) {
    }
  }
  std::string root_;
};

}  // namespace gslice
