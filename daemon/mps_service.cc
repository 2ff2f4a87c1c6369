#include "mps_service.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "gslice/mps_client.h"

extern char** environ;

namespace gslice {
namespace {

using Clock = std::chrono::steady_clock;

// The names NVIDIA's control daemon uses in its pipe folder.
constexpr const char kControlSocket[] = "control";
constexpr const char kPidFile[] = "nvidia-cuda-mps-control.pid";
// gsliced's own, beside the pipe folder: the pid of a daemon it asked to quit, which serves its
// last clients and takes no new one. A later gsliced waits for it instead of adopting it.
constexpr const char kDrainingFile[] = "draining";

void Log(const std::string& line) { std::fprintf(stderr, "gsliced: mps: %s\n", line.c_str()); }

std::string GpuText(unsigned index) { return "GPU " + std::to_string(index); }

// `name` as the shell would find it: itself when it holds a '/', else the first executable
// <dir>/name on $PATH. "" when there is none.
std::string FindProgram(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

// Makes `path` a folder of this process's owner with exactly `mode`; refuses anything else
// found there (a file, a link, another owner's folder), which gsliced never replaces.
bool EnsureFolder(const std::string& path, mode_t mode, std::string* error) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    *error = "cannot make " + path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = path + " is not a folder; gsliced will not replace it: remove it or set mps_directory elsewhere";
    return false;
  }
  if (st.st_uid != geteuid()) {
    *error = path + " belongs to uid " + std::to_string(st.st_uid) + ", not to gsliced's (" +
             std::to_string(geteuid()) + "): remove it or set mps_directory elsewhere";
    return false;
  }
  if ((st.st_mode & 07777) != mode && chmod(path.c_str(), mode) != 0) {
    *error = "cannot set the mode of " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

// The environment of the control program: gsliced's own, its CUDA_MPS_* and
// CUDA_VISIBLE_DEVICES replaced. Built before fork (the child only calls execve).
std::vector<std::string> ControlEnvironment(const MpsDaemonState& s) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string item = *e;
    if (item.rfind("CUDA_MPS_", 0) == 0 || item.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
    env.push_back(item);
  }
  env.push_back("CUDA_VISIBLE_DEVICES=" + s.gpu.uuid);
  env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + s.pipe_directory);
  env.push_back("CUDA_MPS_LOG_DIRECTORY=" + s.log_directory);
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& items) {
  std::vector<char*> out;
  for (std::string& s : items) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Waits for child `pid` until `deadline`; kills it past that. Returns its wait status, or -1
// when it had to be killed.
int WaitChild(pid_t pid, Clock::time_point deadline) {
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

struct ControlAnswer {
  bool ok = false;
  std::string out = {};    // what the program printed
  std::string error = {};  // why not ok
};

// Runs `control` with `command` on its standard input, as `echo COMMAND | nvidia-cuda-mps-control`
// would, against the daemon of `s`'s folders.
ControlAnswer RunControl(const std::string& control, const MpsDaemonState& s, const std::string& command,
                         std::chrono::milliseconds timeout) {
  ControlAnswer a;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return {.error = std::string("pipe: ") + std::strerror(errno)};
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return {.error = std::string("pipe: ") + std::strerror(errno)};
  }
  // The command goes into the pipe before the program starts: a line fits its buffer, and no
  // write can then meet a reader that has already exited (SIGPIPE).
  const std::string line = command + "\n";
  if (write(in[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
    return {.error = std::string("pipe: ") + std::strerror(errno)};
  }
  close(in[1]);
  std::vector<std::string> env = ControlEnvironment(s);
  std::vector<std::string> argv = {control};
  std::vector<char*> envp = Pointers(env), args = Pointers(argv);
  const int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(devnull >= 0 ? devnull : out[1], 2);
    execve(control.c_str(), args.data(), envp.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (devnull >= 0) close(devnull);
  if (pid < 0) {
    close(out[0]);
    return {.error = std::string("fork: ") + std::strerror(errno)};
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{out[0], POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (a.out.size() < (1u << 20)) a.out.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  const int status = WaitChild(pid, deadline);
  if (status < 0) {
    a.error = "'" + command + "' got no answer within " + std::to_string(timeout.count()) + " ms";
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    a.error = "'" + command + "' failed (status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
  } else {
    a.ok = true;
  }
  return a;
}

// The pids the control program printed, one a line. False when it printed anything else (an
// error, a version that answers otherwise): then nothing is known.
bool ParsePids(const std::string& text, std::vector<int>* pids) {
  pids->clear();
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    if (line.find_first_not_of("0123456789") != std::string::npos || line.size() > 9) return false;
    pids->push_back(std::stoi(line));
  }
  return true;
}

// The real uid of process `pid` (from /proc), -1 when it is gone.
int64_t UidOf(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Uid:", 0) == 0) return std::strtoll(line.c_str() + 4, nullptr, 10);
  }
  return -1;
}

// Whether `pid` is a running instance of `program` (its executable, as /proc shows it).
bool RunsProgram(int pid, const std::string& program) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  char exe[4096];
  const ssize_t n = readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), exe, sizeof exe - 1);
  if (n <= 0) return true;  // not ours to read: alive is all that can be said
  std::string path(exe, static_cast<size_t>(n));
  const std::string deleted = " (deleted)";  // replaced on disk since it started
  if (path.size() > deleted.size() && path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0) {
    path.resize(path.size() - deleted.size());
  }
  char real[4096];
  const std::string want = realpath(program.c_str(), real) != nullptr ? std::string(real) : program;
  return path == want;
}

int ReadPidFile(const std::string& path) {
  std::ifstream in(path);
  long pid = 0;
  if (!(in >> pid) || pid <= 0 || pid > (1l << 30)) return 0;
  return static_cast<int>(pid);
}

std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > bytes) text = "..." + text.substr(text.size() - bytes);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

MpsService::MpsService(MpsServiceOptions options) : options_(std::move(options)) {}

Status MpsService::Prepare() {
  if (options_.mode == MpsMode::kOff) return Status::Ok();
  control_path_ = FindProgram(options_.control);
  if (control_path_.empty() && options_.mode == MpsMode::kOn) {
    return Status::BadRequest("mps = \"on\": the MPS control program '" + options_.control +
                              "' is not here (not executable, or not on $PATH): install the NVIDIA driver's "
                              "MPS tools, set mps_control to its path, or set mps = \"auto\" to run without it");
  }
  if (control_path_.empty()) return Status::Ok();
  if (options_.directory.empty() || options_.directory[0] != '/') {
    return Status::BadRequest("mps_directory: '" + options_.directory + "' is not an absolute path");
  }
  std::string error;
  const std::string parent = options_.directory.substr(0, options_.directory.rfind('/'));
  if (!parent.empty()) {
    struct stat st {};
    if (stat(parent.c_str(), &st) != 0 && mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::BadRequest("mps_directory: cannot make " + parent + ": " + std::strerror(errno));
    }
  }
  if (!EnsureFolder(options_.directory, 0711, &error)) return Status::BadRequest("mps_directory: " + error);
  return Status::Ok();
}

std::string MpsService::Describe() const {
  if (options_.mode == MpsMode::kOff) return "off (mps = \"off\"): every GPU is time-sliced";
  if (control_path_.empty()) {
    return std::string(ToString(options_.mode)) + ": no MPS control program '" + options_.control +
           "' here, so every GPU is time-sliced (set mps_control to its path to use MPS)";
  }
  return std::string(ToString(options_.mode)) + ": one control daemon per GPU in compute mode DEFAULT (" +
         control_path_ + "), folders under " + options_.directory + "; each serves one uid and " +
         (options_.classes == MpsClasses::kOne ? "one class of its slices at a time (mps_classes = \"one\")"
                                               : "both classes of its slices (mps_classes = \"mixed\")");
}

bool MpsService::ShouldServe(const Gpu& g) const {
  return DecideGpuSharing(options_.mode, !control_path_.empty(), options_.control, g.compute_mode, g.state.gpu.index,
                          true, "")
      .mps;
}

void MpsService::Publish(Gpu& g) {
  MpsDaemonState s = g.state;
  s.gpu.sharing = DecideGpuSharing(options_.mode, !control_path_.empty(), options_.control, g.compute_mode,
                                   s.gpu.index, s.pid > 0, g.problem);
  const bool one_class = options_.classes == MpsClasses::kOne;
  const MpsTenant published{.serving = s.gpu.sharing.mps,
                            .uid = s.gpu.sharing.mps ? s.gpu.tenant_uid : -1,
                            .one_class = one_class,
                            .slice_class = one_class && s.gpu.sharing.mps && s.gpu.tenant_uid >= 0
                                               ? s.gpu.tenant_class
                                               : std::nullopt};
  const std::string tenant = !published.serving ? ""
                             : std::to_string(published.uid) + " " + std::string(MpsClassName(published.slice_class));
  if (tenant != g.published_tenant && !control_path_.empty()) {
    std::string error;
    if (WriteMpsTenant(options_.directory, s.gpu.uuid, published, &error)) {
      g.published_tenant = tenant;
    } else {
      Log(GpuText(s.gpu.index) + ": " + error);
    }
  }
  std::lock_guard lock(state_mu_);
  for (MpsDaemonState& p : published_) {
    if (p.gpu.uuid == s.gpu.uuid) {
      p = std::move(s);
      return;
    }
  }
  published_.push_back(std::move(s));
}

std::vector<MpsDaemonState> MpsService::States() const {
  std::lock_guard lock(state_mu_);
  return published_;
}

bool MpsService::GiveSocket(const Gpu& g, int64_t uid, std::string* error) const {
  const std::string socket = g.state.pipe_directory + "/" + kControlSocket;
  const uid_t owner = uid >= 0 ? static_cast<uid_t>(uid) : 0;
  // Not through a link (the folder is root's, so none should be there).
  if (fchownat(AT_FDCWD, socket.c_str(), owner, 0, AT_SYMLINK_NOFOLLOW) != 0 ||
      fchmodat(AT_FDCWD, socket.c_str(), 0600, 0) != 0) {
    *error = "cannot give " + socket + " to uid " + std::to_string(owner) + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

bool MpsService::Start(Gpu* g) {
  MpsDaemonState& s = g->state;
  const std::string gpu_dir = options_.directory + "/" + s.gpu.uuid;
  std::string error;
  // Closed while the daemon makes its socket, which nobody but the tenant may reach.
  if (!EnsureFolder(gpu_dir, 0700, &error) || !EnsureFolder(s.pipe_directory, 0711, &error) ||
      !EnsureFolder(s.log_directory, 0700, &error)) {
    g->problem = error;
    return false;
  }
  const std::string start_log = s.log_directory + "/gsliced-start.log";
  const int log = open(start_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  std::vector<std::string> env = ControlEnvironment(s);
  std::vector<std::string> argv = {control_path_, "-d"};
  std::vector<char*> envp = Pointers(env), args = Pointers(argv);
  const Clock::time_point deadline = Clock::now() + options_.start_timeout;
  const pid_t launcher = fork();
  if (launcher == 0) {
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    if (log >= 0) {
      dup2(log, 1);
      dup2(log, 2);
    }
    umask(022);
    execve(control_path_.c_str(), args.data(), envp.data());
    _exit(127);
  }
  if (log >= 0) close(log);
  if (launcher < 0) {
    g->problem = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  const int status = WaitChild(launcher, deadline);
  if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    g->problem = control_path_ + " -d " +
                 (status < 0 ? "did not return within " + std::to_string(options_.start_timeout.count()) + " ms"
                             : "exited with status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1));
    const std::string said = Tail(start_log, 300);
    if (!said.empty()) g->problem += " (it said: " + said + ")";
    return false;
  }
  // The daemon writes its pid and makes its socket once it is up.
  int pid = 0;
  struct stat st {};
  for (;;) {
    pid = ReadPidFile(s.pipe_directory + "/" + kPidFile);
    const bool socket = lstat((s.pipe_directory + "/" + kControlSocket).c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
    if (pid > 0 && RunsProgram(pid, control_path_) && socket) break;
    if (Clock::now() >= deadline) {
      g->problem = "its daemon did not come up within " + std::to_string(options_.start_timeout.count()) +
                   " ms (no live pid in " + s.pipe_directory + "/" + kPidFile + " and socket " + kControlSocket +
                   "; see " + s.log_directory + ")";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  s.pid = pid;
  // The tenant it had before (a restart) gets it again at once; else it stays root's.
  if (!GiveSocket(*g, s.gpu.tenant_uid, &error)) {
    Log(GpuText(s.gpu.index) + ": " + error + "; its daemon stays root's alone");
    GiveSocket(*g, -1, &error);
    s.gpu.tenant_uid = -1;
    s.gpu.tenant_class.reset();
  }
  if (!EnsureFolder(gpu_dir, 0711, &error)) {
    g->problem = error;
    return false;
  }
  g->problem.clear();
  g->backoff = std::chrono::milliseconds(1000);
  return true;
}

void MpsService::StopDaemon(Gpu* g, const char* why) {
  MpsDaemonState& s = g->state;
  if (s.pid <= 0) return;
  const std::string gpu = GpuText(s.gpu.index);
  ControlAnswer servers = RunControl(control_path_, s, "get_server_list", options_.command_timeout);
  std::vector<int> server_pids, client_pids;
  if (!servers.ok || !ParsePids(servers.out, &server_pids)) server_pids.clear();
  size_t clients = 0;
  for (int server : server_pids) {
    ControlAnswer c = RunControl(control_path_, s, "get_client_list " + std::to_string(server), options_.command_timeout);
    if (c.ok && ParsePids(c.out, &client_pids)) clients += client_pids.size();
  }
  // A quitting daemon takes no new client, and a program that reached it might wait: nobody
  // but root reaches it from now on (programs that start meanwhile run without MPS).
  const std::string gpu_dir = options_.directory + "/" + s.gpu.uuid;
  std::string error;
  if (!GiveSocket(*g, -1, &error)) Log(gpu + ": " + error);
  if (FILE* f = std::fopen((gpu_dir + "/" + kDrainingFile).c_str(), "we")) {
    std::fprintf(f, "%d\n", s.pid);
    std::fclose(f);
  }
  ControlAnswer quit = RunControl(control_path_, s, "quit", options_.command_timeout);
  const Clock::time_point deadline = Clock::now() + options_.stop_timeout;
  bool gone = false;
  while (!(gone = !RunsProgram(s.pid, control_path_)) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (gone) {
    unlink((gpu_dir + "/" + kDrainingFile).c_str());
    Log(gpu + ": its MPS control daemon (pid " + std::to_string(s.pid) + ") has quit (" + why + ")");
  } else {
    g->draining_pid = s.pid;
    Log(gpu + ": its MPS control daemon (pid " + std::to_string(s.pid) + ") was asked to quit (" + why + ")" +
        (quit.ok ? "" : " but did not take it: " + quit.error) + " and still runs after " +
        std::to_string(options_.stop_timeout.count()) + " ms" +
        (clients > 0 ? ": " + std::to_string(clients) + " program(s) still use its server; it ends when they exit"
                     : ""));
  }
  s.pid = 0;
  s.gpu.tenant_uid = -1;
  s.gpu.tenant_class.reset();
  s.gpu.busy_uid = -1;
}

void MpsService::Reconcile(const std::vector<GpuInfo>& gpus) {
  std::lock_guard work(work_mu_);
  const Clock::time_point now = Clock::now();
  std::vector<std::string> listed;
  for (const GpuInfo& info : gpus) {
    listed.push_back(info.uuid);
    auto [it, fresh] = gpus_.try_emplace(info.uuid);
    Gpu& g = it->second;
    if (fresh) {
      order_.push_back(info.uuid);
      g.state.gpu.uuid = info.uuid;
      g.state.pipe_directory = options_.directory + "/" + info.uuid + "/pipe";
      g.state.log_directory = options_.directory + "/" + info.uuid + "/log";
    }
    g.state.gpu.index = info.index;
    g.compute_mode = info.compute_mode;
    const std::string gpu = GpuText(info.index);
    if (!ShouldServe(g)) {
      if (g.state.pid > 0) StopDaemon(&g, "the GPU no longer allows MPS");
      Publish(g);
      continue;
    }
    if (!g.adopted_checked) {
      // A daemon that runs already (gsliced restarted) keeps serving its clients: adopted, with
      // the tenant its socket is given to.
      g.adopted_checked = true;
      const int pid = ReadPidFile(g.state.pipe_directory + "/" + kPidFile);
      struct stat st {};
      const std::string draining = options_.directory + "/" + info.uuid + "/" + kDrainingFile;
      if (pid > 0 && ReadPidFile(draining) == pid && RunsProgram(pid, control_path_)) {
        g.draining_pid = pid;
        Log(gpu + ": its MPS control daemon (pid " + std::to_string(pid) +
            ") was asked to quit and serves its last clients; a new one starts once it has exited");
      } else if (pid > 0 && RunsProgram(pid, control_path_) &&
                 lstat((g.state.pipe_directory + "/" + kControlSocket).c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
        g.state.pid = pid;
        g.state.gpu.tenant_uid = st.st_uid != 0 ? static_cast<int64_t>(st.st_uid) : -1;
        // The class it served is the one the previous gsliced published with that uid; unknown
        // (nullopt) otherwise, and then the plan names one, which Hand sets.
        const MpsTenant was = ReadMpsTenant(options_.directory, info.uuid);
        if (was.serving && was.uid == g.state.gpu.tenant_uid) g.state.gpu.tenant_class = was.slice_class;
        std::string error;
        if ((st.st_mode & 07777) != 0600 && !GiveSocket(g, g.state.gpu.tenant_uid, &error)) Log(gpu + ": " + error);
        Log(gpu + ": adopted its running MPS control daemon (pid " + std::to_string(pid) + ")" +
            (g.state.gpu.tenant_uid >= 0 ? ", given to uid " + std::to_string(g.state.gpu.tenant_uid) : ""));
      }
    }
    if (g.draining_pid > 0) {
      if (RunsProgram(g.draining_pid, control_path_)) {
        g.problem = "its previous daemon (pid " + std::to_string(g.draining_pid) + ") ends with its last clients";
        Publish(g);
        continue;
      }
      unlink((options_.directory + "/" + info.uuid + "/" + kDrainingFile).c_str());
      g.draining_pid = 0;
    }
    if (g.state.pid > 0 && RunsProgram(g.state.pid, control_path_)) {
      Publish(g);
      continue;
    }
    if (g.state.pid > 0) {
      // Its clients lose it: a program whose server exits with it gets errors from CUDA, and
      // programs that start while it is down run without MPS (CUDA's behaviour when it cannot
      // reach a daemon). The new daemon is given to the same uid.
      g.problem = "its daemon (pid " + std::to_string(g.state.pid) + ") has exited";
      Log(gpu + ": its MPS control daemon (pid " + std::to_string(g.state.pid) +
          ") has exited; starting it again. Programs that used its server may fail; programs that "
          "start meanwhile run without MPS");
      g.state.pid = 0;
      g.state.gpu.busy_uid = -1;
      g.state.restarts++;
      g.next_attempt = now;
      Publish(g);  // readers see it down while the next one starts
    }
    if (now < g.next_attempt) {
      Publish(g);
      continue;
    }
    if (Start(&g)) {
      Log(gpu + ": MPS control daemon started (pid " + std::to_string(g.state.pid) + ", CUDA_MPS_PIPE_DIRECTORY=" +
          g.state.pipe_directory + ")");
    } else {
      g.next_attempt = now + g.backoff;
      Log(gpu + ": cannot start its MPS control daemon: " + g.problem + "; trying again in " +
          std::to_string(g.backoff.count() / 1000) + " s, time-sliced meanwhile");
      g.backoff = std::min(g.backoff * 2, options_.max_retry);
    }
    Publish(g);
  }
  for (auto& [uuid, g] : gpus_) {
    if (std::find(listed.begin(), listed.end(), uuid) == listed.end() && g.state.pid > 0) {
      StopDaemon(&g, "its GPU is gone");
      Publish(g);
    }
  }
}

std::optional<int64_t> MpsService::BusyServer(const Gpu& g, const std::function<bool(int64_t)>& counts,
                                              std::string* said) const {
  ControlAnswer servers = RunControl(control_path_, g.state, "get_server_list", options_.command_timeout);
  std::vector<int> server_pids, client_pids;
  if (!servers.ok || !ParsePids(servers.out, &server_pids)) {
    *said = "cannot tell its MPS control daemon's servers (" +
            (servers.ok ? "it answered '" + servers.out.substr(0, 80) + "'" : servers.error) + ")";
    return std::nullopt;
  }
  for (int server : server_pids) {
    const int64_t server_uid = UidOf(server);
    if (server_uid < 0 || !counts(server_uid)) continue;
    // A server whose clients cannot be told counts as busy.
    ControlAnswer clients =
        RunControl(control_path_, g.state, "get_client_list " + std::to_string(server), options_.command_timeout);
    if (!clients.ok || !ParsePids(clients.out, &client_pids) || !client_pids.empty()) {
      *said = "its MPS server of uid " + std::to_string(server_uid) + " (pid " + std::to_string(server) + ") " +
              (clients.ok ? "still has clients" : "does not say its clients (" + clients.error + ")");
      return server_uid;
    }
  }
  return -1;
}

void MpsService::Hand(const std::string& uuid, int64_t uid, std::optional<SliceClass> cls) {
  std::lock_guard work(work_mu_);
  auto it = gpus_.find(uuid);
  if (it == gpus_.end() || it->second.state.pid <= 0) return;
  Gpu& g = it->second;
  MpsGpuState& s = g.state.gpu;
  if (uid < 0) cls.reset();
  if (s.tenant_uid == uid && s.tenant_class == cls && s.busy_uid < 0) return;
  const std::string gpu = GpuText(s.index);
  std::string error, said;
  if (uid >= 0 && s.tenant_uid == uid) {
    // Another class of the same uid. Its server's clients run as that uid whatever their class
    // (a program whose slice was gone before a sample saw it, one whose slice changed class
    // while it ran), so a class is given only once the server has none; meanwhile the class is
    // pending and gslice run and the plugins put no one on it. The socket stays the uid's, so
    // nothing waits at CUDA initialisation. Both classes ("mixed") need no wait.
    const std::optional<int64_t> busy =
        cls ? BusyServer(g, [uid](int64_t server_uid) { return server_uid == uid; }, &said) : -1;
    if (!busy || *busy >= 0) {
      if (s.busy_uid < 0) {
        Log(gpu + ": its MPS of uid " + std::to_string(uid) + " serves its " + std::string(ToString(*cls)) +
            " slices once the programs on it have exited: " + said);
      }
      s.tenant_class.reset();
      s.busy_uid = uid;
      Publish(g);
      return;
    }
    Log(gpu + ": its MPS of uid " + std::to_string(uid) + " now serves its " +
        (cls ? std::string(ToString(*cls)) : std::string("guaranteed and opportunistic")) + " slices");
    s.tenant_class = cls;
    s.busy_uid = -1;
    Publish(g);
    return;
  }
  // Closed first, so that no new client of the old tenant slips in while the servers are asked.
  if (s.tenant_uid >= 0 && !GiveSocket(g, -1, &error)) {
    Log(gpu + ": " + error);
    return;
  }
  const int64_t previous = s.tenant_uid;
  s.tenant_uid = -1;
  s.tenant_class.reset();
  s.busy_uid = -1;
  if (uid >= 0) {
    // A busy server of another uid would make the new uid's programs wait.
    const std::optional<int64_t> busy =
        BusyServer(g, [uid](int64_t server_uid) { return server_uid != uid; }, &said);
    if (!busy) {
      Log(gpu + ": " + said + "; it stays closed");
      Publish(g);
      return;
    }
    if (*busy >= 0) {
      s.busy_uid = *busy;
      Log(gpu + ": not given to uid " + std::to_string(uid) + " yet: " + said);
      Publish(g);
      return;
    }
    if (!GiveSocket(g, uid, &error)) {
      Log(gpu + ": " + error);
      Publish(g);
      return;
    }
    s.tenant_uid = uid;
    s.tenant_class = cls;
  }
  if (previous != s.tenant_uid) {
    Log(gpu + ": its MPS is " +
        (uid >= 0 ? "given to uid " + std::to_string(uid) + (cls ? " for its " + std::string(ToString(*cls)) + " slices" : "")
                  : std::string("closed")) +
        (previous >= 0 ? " (was uid " + std::to_string(previous) + ")" : ""));
  }
  Publish(g);
}

void MpsService::Stop() {
  std::lock_guard work(work_mu_);
  for (const std::string& uuid : order_) {
    Gpu& g = gpus_[uuid];
    if (g.state.pid > 0) {
      StopDaemon(&g, "gsliced stops");
      Publish(g);
    }
  }
}

}  // namespace gslice
