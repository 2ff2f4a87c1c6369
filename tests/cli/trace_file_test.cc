// Trace files in a folder other users may write (/tmp): root writes them (gslice run --trace,
// and through the same AtomicFile, gslice trace -o and gsliced's kept traces) and another
// user plants symbolic links at every name it can predict. Nothing is written through them;
// the file ends up a regular file of root's with the trace.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "gslice/atomic_file.h"
#include "shim_env.h"

namespace gslice::test {
namespace {

constexpr uid_t kNobody = 65534;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs fn in a child as user nobody; true when it returned true there.
bool AsNobody(const std::function<bool()>& fn) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(kNobody, kNobody, kNobody) != 0 ||
        setresuid(kNobody, kNobody, kNobody) != 0) {
      _exit(99);
    }
    _exit(fn() ? 0 : 1);
  }
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A sticky folder every user may write, as /tmp, holding a file of root's that another user
// would like root to overwrite.
class SharedFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: another user plants the links";
    char pattern[] = "/tmp/gslice-tracefile-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    ASSERT_EQ(chmod(dir_.c_str(), 01777), 0);
    precious_ = dir_ + "/precious";
    std::ofstream(precious_) << kPrecious;
    ASSERT_EQ(chmod(precious_.c_str(), 0644), 0);
    file_ = dir_ + "/run.trace.json";
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  // As nobody: FILE and FILE.tmp-<pid> (each pid from first to last) link to the precious file.
  void PlantLinks(pid_t first, pid_t last) {
    ASSERT_TRUE(AsNobody([&] {
      if (symlink(precious_.c_str(), file_.c_str()) != 0) return false;
      for (pid_t p = first; p <= last; ++p) {
        const std::string tmp = file_ + ".tmp-" + std::to_string(p);
        if (symlink(precious_.c_str(), tmp.c_str()) != 0) return false;
      }
      return true;
    }));
    struct stat st {};
    ASSERT_EQ(lstat(file_.c_str(), &st), 0);
    ASSERT_TRUE(S_ISLNK(st.st_mode));
    ASSERT_EQ(st.st_uid, kNobody);
  }
  // FILE is root's own regular file now; the precious file is untouched.
  void ExpectWrittenSafely() {
    EXPECT_EQ(ReadAll(precious_), kPrecious) << "written through a link planted by another user";
    struct stat st {};
    ASSERT_EQ(lstat(file_.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << "mode " << std::oct << st.st_mode;
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_nlink, 1u);
  }
  // Names in the folder other than those the test made.
  int Leftovers() {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (e.path() != file_ && e.path() != precious_ && name.find(".tmp-") == std::string::npos) ++n;
    }
    return n;
  }

  static constexpr const char* kPrecious = "root's own file\n";
  std::string dir_, precious_, file_;
};

TEST_F(SharedFolder, AtomicFileReplacesAPlantedLinkWithoutFollowingIt) {
  PlantLinks(getpid(), getpid());
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(file_, "{\"traceEvents\":[]}\n", 0644, &error)) << error;
  ExpectWrittenSafely();
  EXPECT_EQ(ReadAll(file_), "{\"traceEvents\":[]}\n");
  EXPECT_EQ(Leftovers(), 0);
}

TEST_F(SharedFolder, GsliceRunTraceIsNotRedirectedThroughPlantedLinks) {
  // gslice starts stopped (a shell waiting for a line, then exec'ing it, so its pid is known):
  // the links go in at every name it used to write through, then it runs.
  ShimEnv env("cli-tracefile");
  env.vars.erase("LD_PRELOAD");
  env.vars.erase("GSLICE_REAL_DRIVER");
  env.vars.erase("GSLICE_REAL_NVML");
  env.vars.erase("GSLICE_MEMORY");
  env.vars.erase("GSLICE_SLICE");
  if (std::string(GSLICE_TEST_ASAN_RUNTIME).size() > 0) env.vars["LD_PRELOAD"] = GSLICE_TEST_ASAN_RUNTIME;
  env.vars["GSLICE_SOCKET"] = dir_ + "/no-gsliced.sock";
  const std::string command = "read go && exec " + GsliceBinary() + " run --sim --no-daemon --memory 96MiB --trace " +
                              file_ + " -- " + ClientPath() + " info 2>&1";
  int in_fd = -1, out_fd = -1;
  const pid_t pid = env.Start({"/bin/sh", "-c", command}, &in_fd, &out_fd);
  ASSERT_GT(pid, 0);
  PlantLinks(pid - 16, pid + 16);
  ASSERT_EQ(write(in_fd, "go\n", 3), 3);
  close(in_fd);
  std::string out;
  char buf[4096];
  for (;;) {  // until gslice exits (its output closes) or a minute passes
    pollfd p = {out_fd, POLLIN, 0};
    if (poll(&p, 1, 60000) <= 0) break;
    const ssize_t n = read(out_fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(out_fd);
  kill(pid, SIGKILL);  // nothing when it has exited; the test fails below when it had not
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  ExpectWrittenSafely();
  EXPECT_NE(ReadAll(file_).find("\"traceEvents\":["), std::string::npos) << ReadAll(file_);
  EXPECT_NE(out.find("trace written to " + file_), std::string::npos) << out;
  EXPECT_EQ(Leftovers(), 0);
}

// A folder every user may write that is not sticky: anyone could swap the file afterwards.
TEST_F(SharedFolder, RefusesAFolderEveryoneMayWriteThatIsNotSticky) {
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);
  std::string error;
  EXPECT_FALSE(WriteFileAtomically(file_, "x", 0644, &error));
  EXPECT_NE(error.find("cannot write " + file_ + ": its folder " + dir_ + " is writable by every user and not sticky"),
            std::string::npos)
      << error;
  EXPECT_NE(access(file_.c_str(), F_OK), 0);
  EXPECT_EQ(Leftovers(), 0);
  // gslice run --trace says so before the program runs.
  ShimEnv env("cli-tracefile-open");
  env.vars.erase("LD_PRELOAD");
  if (std::string(GSLICE_TEST_ASAN_RUNTIME).size() > 0) env.vars["LD_PRELOAD"] = GSLICE_TEST_ASAN_RUNTIME;
  env.vars["GSLICE_SOCKET"] = dir_ + "/no-gsliced.sock";
  const std::string marker = dir_ + "/ran";
  const ChildResult r = env.Run({GsliceBinary(), "run", "--sim", "--no-daemon", "--memory", "96MiB", "--trace", file_,
                                 "--", "/bin/sh", "-c", "touch " + marker});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("is writable by every user and not sticky"), std::string::npos) << r.err;
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the program ran";
  EXPECT_EQ(Leftovers(), 0);
}

// What cannot be replaced by a file fails with the reason and leaves nothing behind.
TEST_F(SharedFolder, AFolderAtThePathFailsAndLeavesNothing) {
  ASSERT_EQ(mkdir(file_.c_str(), 0755), 0);
  std::string error;
  EXPECT_FALSE(WriteFileAtomically(file_, "x", 0644, &error));
  EXPECT_NE(error.find("cannot write " + file_), std::string::npos) << error;
  struct stat st {};
  ASSERT_EQ(lstat(file_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(Leftovers(), 0);
  EXPECT_FALSE(WriteFileAtomically(dir_ + "/", "x", 0644, &error));
  EXPECT_NE(error.find("it names a folder"), std::string::npos) << error;
}

// The mode is the caller's less the umask, as open(2); the file is the caller's.
TEST_F(SharedFolder, TheFileTakesTheModeLessTheUmask) {
  const mode_t old = umask(027);
  std::string error;
  const bool ok = WriteFileAtomically(file_, "x", 0666, &error);
  umask(old);
  ASSERT_TRUE(ok) << error;
  struct stat st {};
  ASSERT_EQ(lstat(file_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  // An unfinished file leaves nothing: not committed, discarded.
  {
    AtomicFile f;
    ASSERT_TRUE(f.Open(dir_ + "/unfinished.json", 0644, &error)) << error;
    ASSERT_TRUE(f.Write("partial"));
  }
  EXPECT_NE(access((dir_ + "/unfinished.json").c_str(), F_OK), 0);
  EXPECT_EQ(Leftovers(), 0);
}

}  // namespace
}  // namespace gslice::test
