// The worker's system-call filter (remote/server/syscall_filter.h): in a forked child that
// installs it, the refused calls fail with EPERM (clone3 with ENOSYS, other architectures'
// calls kill), while what a CUDA worker does (files, memory, ioctls, threads, fork) works; the
// measuring filter counts every call by name.
#include "syscall_filter.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace gslice::remote {
namespace {

// Runs body in a forked child with no_new_privs set (as Confine leaves it); what the child
// writes to its pipe comes back (each failed check a line), with how it ended. The child ends
// itself after 60 s, so that a hang fails the test instead of stopping it.
struct ChildEnd {
  std::string said;
  int status = 0;
};

template <typename Body>
ChildEnd InChild(Body body) {
  int out[2];
  EXPECT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    alarm(60);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(3);
    body(out[1]);
    _exit(0);
  }
  close(out[1]);
  ChildEnd end;
  char buf[512];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) end.said.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  while (waitpid(pid, &end.status, 0) < 0 && errno == EINTR) {
  }
  return end;
}

void Say(int fd, const std::string& line) {
  const std::string text = line + "\n";
  ssize_t w = write(fd, text.data(), text.size());
  (void)w;
}

// A check of one call's outcome: rc == -1 with the errno wanted.
void ExpectRefused(int fd, const char* what, long rc, int want) {
  if (rc == -1 && errno == want) return;
  const std::string got = rc == -1 ? std::string(strerrorname_np(errno)) : std::to_string(rc);
  Say(fd, std::string(what) + ": returned " + got + ", want " + strerrorname_np(want));
}

void Install(int fd) {
  std::string error;
  if (!InstallSyscallFilter(&error)) {
    Say(fd, "install: " + error);
    _exit(4);
  }
}

TEST(SyscallFilter, RefusesWhatWidensReach) {
  const ChildEnd end = InChild([](int fd) {
    Install(fd);
    ExpectRefused(fd, "unshare(CLONE_NEWUSER)", unshare(CLONE_NEWUSER), EPERM);
    ExpectRefused(fd, "unshare(CLONE_NEWNS)", unshare(CLONE_NEWNS), EPERM);
    ExpectRefused(fd, "mount", mount("none", "/nonexistent-gslice-mount-point", "tmpfs", 0, nullptr), EPERM);
    ExpectRefused(fd, "umount2", umount2("/nonexistent-gslice-mount-point", 0), EPERM);
    ExpectRefused(fd, "setns", setns(-1, 0), EPERM);
    ExpectRefused(fd, "bpf", syscall(SYS_bpf, 5 /* BPF_PROG_LOAD */, nullptr, 0), EPERM);
    ExpectRefused(fd, "perf_event_open", syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0), EPERM);
    ExpectRefused(fd, "userfaultfd", syscall(SYS_userfaultfd, 0), EPERM);
    ExpectRefused(fd, "process_vm_readv", syscall(SYS_process_vm_readv, getppid(), nullptr, 0, nullptr, 0, 0), EPERM);
    ExpectRefused(fd, "keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0), EPERM);
    ExpectRefused(fd, "io_uring_setup", syscall(SYS_io_uring_setup, 1, nullptr), EPERM);
    ExpectRefused(fd, "chroot", chroot("/"), EPERM);
    // A process of its own in new namespaces; without the filter (as root) it would start.
    const long cloned = syscall(SYS_clone, CLONE_NEWNS | CLONE_NEWUTS | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
    if (cloned == 0) _exit(0);
    ExpectRefused(fd, "clone(CLONE_NEWNS | CLONE_NEWUTS)", cloned, EPERM);
    clone_args args = {};
    args.exit_signal = SIGCHLD;
    const long cloned3 = syscall(SYS_clone3, &args, sizeof args);
    if (cloned3 == 0) _exit(0);
    ExpectRefused(fd, "clone3", cloned3, ENOSYS);
    ExpectRefused(fd, "personality(ADDR_NO_RANDOMIZE)", personality(ADDR_NO_RANDOMIZE), EPERM);
    const int persona = personality(0xffffffff);
    if (persona < 0) Say(fd, std::string("personality(0xffffffff) as a query: ") + strerror(errno));
    if (personality(PER_LINUX) < 0) Say(fd, std::string("personality(PER_LINUX): ") + strerror(errno));
  });
  EXPECT_TRUE(WIFEXITED(end.status) && WEXITSTATUS(end.status) == 0) << "status " << end.status;
  EXPECT_EQ(end.said, "");
}

// An AddressSanitizer build allows ptrace (its leak check at exit attaches to the process's
// threads; syscall_filter.cc): these two checks are for the builds that ship.
#ifndef __SANITIZE_ADDRESS__
TEST(SyscallFilter, RefusesPtrace) {
  // Alone in its child: a child that became traced stops at its next signal, waiting for this
  // process (its tracer) to let it go on.
  const ChildEnd end = InChild([](int fd) {
    Install(fd);
    ExpectRefused(fd, "ptrace(PTRACE_TRACEME)", ptrace(PTRACE_TRACEME, 0, nullptr, nullptr), EPERM);
  });
  EXPECT_TRUE(WIFEXITED(end.status) && WEXITSTATUS(end.status) == 0) << "status " << end.status;
  EXPECT_EQ(end.said, "");
}
#endif

TEST(SyscallFilter, LetsAWorkerWork) {
  const ChildEnd end = InChild([](int fd) {
    Install(fd);
    // Files: the filter shows in the process's status.
    std::ifstream status("/proc/self/status");
    std::stringstream text;
    text << status.rdbuf();
    if (text.str().find("Seccomp:\t2\n") == std::string::npos) Say(fd, "/proc/self/status has no Seccomp:\t2");
    // Memory, ioctls, pipes.
    void* p = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) Say(fd, std::string("mmap: ") + strerror(errno));
    else munmap(p, 1 << 20);
    int pipefd[2];
    if (pipe(pipefd) != 0) Say(fd, std::string("pipe: ") + strerror(errno));
    int queued = -1;
    if (write(pipefd[1], "x", 1) != 1 || ioctl(pipefd[0], FIONREAD, &queued) != 0 || queued != 1) {
      Say(fd, "ioctl(FIONREAD) on a pipe: " + std::to_string(queued));
    }
    // Threads (libc's clone3 refused, its clone fallback allowed), futexes through join.
    int ran = 0;
    std::thread t([&ran] { ran = 1; });
    t.join();
    if (ran != 1) Say(fd, "a thread did not run");
    // fork: clone without namespace flags.
    const pid_t child = fork();
    if (child == 0) _exit(7);
    int st = 0;
    if (child < 0 || waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 7) {
      Say(fd, std::string("fork: ") + strerror(errno));
    }
    if (syscall(SYS_getppid) <= 0) Say(fd, "getppid");
  });
  EXPECT_TRUE(WIFEXITED(end.status) && WEXITSTATUS(end.status) == 0) << "status " << end.status;
  EXPECT_EQ(end.said, "");
}

#if defined(__x86_64__)
TEST(SyscallFilter, KillsOtherArchitecturesCalls) {
  // i386's getpid (20) through int 0x80: another architecture's numbers.
  const auto i386_call = [](bool filtered) {
    return InChild([filtered](int fd) {
      if (filtered) Install(fd);
      long rc = 20;
      asm volatile("int $0x80" : "+a"(rc) : : "memory");
      Say(fd, "an i386 call returned " + std::to_string(rc));
    });
  };
  // A kernel without i386 emulation (ia32_emulation=0) faults on int 0x80 before any filter
  // sees it (a SIGSEGV, or a sanitizer's report of one): there the call cannot return either,
  // and that is all the filter could add.
  const ChildEnd bare = i386_call(false);
  const ChildEnd i386 = i386_call(true);
  if (bare.said.find("returned") == std::string::npos) {
    EXPECT_EQ(i386.said.find("returned"), std::string::npos) << i386.said;
    EXPECT_FALSE(WIFEXITED(i386.status) && WEXITSTATUS(i386.status) == 0) << "this kernel has no i386 entry";
  } else {
    EXPECT_TRUE(WIFSIGNALED(i386.status) && WTERMSIG(i386.status) == SIGSYS) << "status " << i386.status << ": " << i386.said;
  }
  // x32's getpid (39 | 0x40000000).
  const ChildEnd x32 = InChild([](int fd) {
    Install(fd);
    const long rc = syscall(39 | 0x40000000);
    Say(fd, "an x32 call returned " + std::to_string(rc));
  });
  EXPECT_TRUE(WIFSIGNALED(x32.status) && WTERMSIG(x32.status) == SIGSYS) << "status " << x32.status << ": " << x32.said;
}
#endif

TEST(SyscallFilter, MeasuresEveryCallByName) {
  char folder[] = "/tmp/gslice-syscall-log-XXXXXX";
  ASSERT_NE(mkdtemp(folder), nullptr);
  const std::string dir = folder;
  pid_t measured = 0;
  int pids[2];
  ASSERT_EQ(pipe(pids), 0);
  const ChildEnd end = InChild([&](int fd) {
    close(pids[0]);
    const pid_t self = getpid();
    ssize_t w = write(pids[1], &self, sizeof self);
    (void)w;
    std::string error;
    if (!StartSyscallLog(dir, &error)) {
      Say(fd, "start: " + error);
      _exit(4);
    }
    for (int i = 0; i < 5; ++i) syscall(SYS_getppid);
    _exit(0);
  });
  close(pids[1]);
  ASSERT_EQ(read(pids[0], &measured, sizeof measured), static_cast<ssize_t>(sizeof measured));
  close(pids[0]);
  ASSERT_TRUE(WIFEXITED(end.status) && WEXITSTATUS(end.status) == 0) << "status " << end.status << ": " << end.said;
  const std::string path = dir + "/syscalls-" + std::to_string(measured) + ".txt";
  std::ifstream log(path);
  std::map<std::string, std::string> counts;
  std::string name, count, rest;
  while (log >> name >> count) counts[name] = count;
  EXPECT_EQ(counts["getppid"], "5") << path;
  EXPECT_EQ(counts["exit_group"], "1") << path;
  unlink(path.c_str());
  rmdir(folder);
}

TEST(SyscallFilter, ParsesOnAndOff) {
  bool on = false;
  std::string why;
  EXPECT_TRUE(ParseSyscallFilter("on", &on, &why) && on);
  EXPECT_TRUE(ParseSyscallFilter("off", &on, &why) && !on);
  EXPECT_FALSE(ParseSyscallFilter("bogus", &on, &why));
  EXPECT_NE(why.find("'bogus'"), std::string::npos) << why;
}

TEST(SyscallFilter, NamesItsRefusedCalls) {
  const std::vector<std::string> refused = SyscallFilterRefused();
  for (const char* name : {"mount", "unshare", "setns", "bpf", "perf_event_open", "keyctl", "init_module"}) {
    EXPECT_NE(std::find(refused.begin(), refused.end(), name), refused.end()) << name;
  }
#ifndef __SANITIZE_ADDRESS__
  EXPECT_NE(std::find(refused.begin(), refused.end(), "ptrace"), refused.end());
#endif
  for (const char* name : {"mbind", "migrate_pages", "move_pages", "ioctl", "mmap", "clone"}) {
    EXPECT_EQ(std::find(refused.begin(), refused.end(), name), refused.end()) << name;
  }
  EXPECT_STREQ(SyscallName(SYS_getppid), "getppid");
}

}  // namespace
}  // namespace gslice::remote
