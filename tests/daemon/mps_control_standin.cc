// A stand-in for NVIDIA's nvidia-cuda-mps-control on machines without a GPU, for gsliced's
// MPS tests. It keeps the parts of the real program that gsliced and its tenants meet:
//
//   gslice_test_mps_control -d   starts the control daemon: it listens on the socket
//       $CUDA_MPS_PIPE_DIRECTORY/control, writes its pid to
//       $CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid and returns once both are there
//       (refusing while another instance of that folder runs). It logs to
//       $CUDA_MPS_LOG_DIRECTORY/control.log. SIGTERM ends it; SIGKILL leaves its files behind.
//   gslice_test_mps_control      reads commands on stdin, one per line, sends each to the
//       daemon and prints its answer: get_server_list, get_client_list PID, shutdown_server PID
//       [-f], get_default_active_thread_percentage, quit. Exit 1 when no daemon answers.
//
// Clients (tests/daemon/mps_client_probe.cc plays a CUDA program) connect to the same socket
// and send "CLIENT". Like the real daemon, it serves one uid at a time: a client of the
// server's uid (or the first, which starts one) is answered "OK <server pid>" at once; one of
// another uid waits, unanswered, until every client of the running server has gone, and then
// gets a server of its own. Each server is a child process running as its uid. The log
// records "NEW CLIENT <pid> from user <uid>", "SERVED <pid> user <uid>" and "WAITING <pid>
// from user <uid>", which the tests read. Like the real one it takes its commands from
// whoever reaches the socket: who may reach it is gsliced's business (mps_service.h).
// `quit` with clients still served makes it wait for them and take no new client meanwhile (a
// new one gets no answer: the worst a client of a quitting daemon could meet).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string PipeDir() {
  std::string d = Env("CUDA_MPS_PIPE_DIRECTORY");
  return d.empty() ? "/tmp/nvidia-mps" : d;
}

std::string SocketPath() { return PipeDir() + "/control"; }
std::string PidPath() { return PipeDir() + "/nvidia-cuda-mps-control.pid"; }

FILE* g_log = nullptr;

void Log(const std::string& line) {
  if (g_log == nullptr) return;
  std::fprintf(g_log, "[Control %d] %s\n", getpid(), line.c_str());
  std::fflush(g_log);
}

int Connect() {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", SocketPath().c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// ---- the daemon ----

struct Connection {
  int fd;
  pid_t pid;
  uid_t uid;
  std::string in;
  bool client = false;   // a CLIENT that is being served
  bool waiting = false;  // a CLIENT of another uid, queued
};

struct Server {
  pid_t pid = 0;
  uid_t uid = 0;
};

volatile sig_atomic_t g_stop = 0;
bool g_quitting = false;
std::vector<Connection> g_conns;
Server g_server;
int g_listen = -1;

void StopServer() {
  if (g_server.pid <= 0) return;
  kill(g_server.pid, SIGKILL);
  waitpid(g_server.pid, nullptr, 0);
  Log("SERVER " + std::to_string(g_server.pid) + " exited");
  g_server = {};
}

// A server for `uid`: a child that runs as that uid until the daemon ends it (or dies).
void StartServer(uid_t uid) {
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (g_listen >= 0) close(g_listen);
    for (const Connection& c : g_conns) close(c.fd);
    if (setgid(uid) != 0 || setuid(uid) != 0) _exit(1);
    for (;;) pause();
  }
  g_server = {pid, uid};
  Log("Starting new server " + std::to_string(pid) + " for user " + std::to_string(uid));
}

int Clients() {
  int n = 0;
  for (const Connection& c : g_conns) n += c.client ? 1 : 0;
  return n;
}

void Serve(Connection& c) {
  if (g_server.pid <= 0) StartServer(c.uid);
  c.client = true;
  c.waiting = false;
  const std::string ok = "OK " + std::to_string(g_server.pid) + "\n";
  (void)!send(c.fd, ok.data(), ok.size(), MSG_NOSIGNAL);
  Log("SERVED " + std::to_string(c.pid) + " user " + std::to_string(c.uid));
}

// Serves the first waiting clients once the running server has none left.
void ServeWaiting() {
  if (Clients() > 0 || g_quitting) return;
  for (Connection& c : g_conns) {
    if (!c.waiting) continue;
    if (g_server.pid > 0 && g_server.uid != c.uid) {
      if (Clients() > 0) continue;  // waits for the uid just served
      StopServer();
    }
    Serve(c);
  }
}

void NewClient(Connection& c) {
  Log("NEW CLIENT " + std::to_string(c.pid) + " from user " + std::to_string(c.uid));
  if (g_quitting) {
    c.waiting = true;  // never served: the daemon ends when its clients have
    Log("WAITING " + std::to_string(c.pid) + " from user " + std::to_string(c.uid) + ": the daemon is quitting");
    return;
  }
  if (g_server.pid > 0 && g_server.uid != c.uid) {
    if (Clients() > 0) {
      c.waiting = true;
      Log("WAITING " + std::to_string(c.pid) + " from user " + std::to_string(c.uid) + ": server " +
          std::to_string(g_server.pid) + " of user " + std::to_string(g_server.uid) + " has clients");
      return;
    }
    StopServer();
  }
  Serve(c);
}

// Answers one command line; returns false when the daemon should quit.
bool Command(Connection& c, const std::string& line) {
  Log("COMMAND from user " + std::to_string(c.uid) + ": " + line);
  std::string answer;
  bool go_on = true;
  if (line == "get_server_list") {
    if (g_server.pid > 0) answer = std::to_string(g_server.pid) + "\n";
  } else if (line.rfind("get_client_list ", 0) == 0) {
    if (g_server.pid > 0 && std::atoi(line.c_str() + 16) == g_server.pid) {
      for (const Connection& k : g_conns) {
        if (k.client) answer += std::to_string(k.pid) + "\n";
      }
    }
  } else if (line.rfind("shutdown_server ", 0) == 0) {
    if (g_server.pid > 0 && std::atoi(line.c_str() + 16) == g_server.pid) StopServer();
  } else if (line == "get_default_active_thread_percentage") {
    answer = "100.0\n";
  } else if (line == "quit") {
    go_on = false;
  } else {
    answer = "Unknown command: " + line + "\n";
  }
  (void)!send(c.fd, answer.data(), answer.size(), MSG_NOSIGNAL);
  return go_on;
}

void Cleanup() {
  StopServer();
  unlink(SocketPath().c_str());
  unlink(PidPath().c_str());
  Log("exited");
}

int RunDaemon(int ready) {
  const std::string log_dir = Env("CUDA_MPS_LOG_DIRECTORY");
  if (!log_dir.empty()) g_log = std::fopen((log_dir + "/control.log").c_str(), "ae");
  signal(SIGTERM, [](int) { g_stop = 1; });
  signal(SIGINT, [](int) { g_stop = 1; });
  signal(SIGPIPE, SIG_IGN);
  unlink(SocketPath().c_str());
  g_listen = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", SocketPath().c_str());
  umask(0);  // a socket anyone may reach, as a careless daemon would make it
  if (bind(g_listen, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(g_listen, 64) != 0) {
    std::fprintf(stderr, "cannot listen on %s: %s\n", SocketPath().c_str(), std::strerror(errno));
    return 1;
  }
  umask(022);
  if (FILE* f = std::fopen(PidPath().c_str(), "we")) {
    std::fprintf(f, "%d\n", getpid());
    std::fclose(f);
  }
  Log("Starting control daemon using socket " + SocketPath() + " for GPUs " + Env("CUDA_VISIBLE_DEVICES"));
  (void)!write(ready, "1", 1);
  close(ready);
  while (!g_stop) {
    std::vector<pollfd> fds = {{g_listen, POLLIN, 0}};
    for (const Connection& c : g_conns) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 200) <= 0) {
      // Servers that died (killed by a test) are gone for their clients too.
      if (g_server.pid > 0 && waitpid(g_server.pid, nullptr, WNOHANG) == g_server.pid) g_server = {};
      continue;
    }
    if (fds[0].revents & POLLIN) {
      const int fd = accept4(g_listen, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        ucred cred{};
        socklen_t len = sizeof cred;
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
        g_conns.push_back({fd, cred.pid, cred.uid, "", false, false});
      }
    }
    bool quit = false;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Connection& c = g_conns[i - 1];
      char buf[512];
      const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
      if (n <= 0) {
        if (c.client) Log("CLIENT " + std::to_string(c.pid) + " exited");
        close(c.fd);
        c.fd = -1;
        continue;
      }
      c.in.append(buf, static_cast<size_t>(n));
      const size_t nl = c.in.find('\n');
      if (nl == std::string::npos || c.client || c.waiting) continue;
      const std::string line = c.in.substr(0, nl);
      if (line == "CLIENT") {
        NewClient(c);
        continue;
      }
      quit = !Command(c, line) || quit;
      close(c.fd);
      c.fd = -1;
    }
    std::vector<Connection> open;
    for (Connection& c : g_conns) {
      if (c.fd >= 0) open.push_back(c);
    }
    g_conns.swap(open);
    ServeWaiting();
    if (quit) g_quitting = true;
    if (g_quitting && Clients() == 0) break;
  }
  Cleanup();
  return 0;
}

int StartDaemon() {
  // Another instance of this folder that still runs keeps it.
  if (FILE* f = std::fopen(PidPath().c_str(), "re")) {
    int pid = 0;
    const bool read = std::fscanf(f, "%d", &pid) == 1;
    std::fclose(f);
    if (read && pid > 0 && kill(pid, 0) == 0) {
      std::fprintf(stderr, "An instance of this daemon is already running\n");
      return 1;
    }
  }
  int ready[2];
  if (pipe(ready) != 0) return 1;
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(ready[0]);
    setsid();
    // Nothing of the caller's stays open (gsliced waits for its output pipe to close).
    const int devnull = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) dup2(devnull, fd);
    _exit(RunDaemon(ready[1]));
  }
  close(ready[1]);
  char c = 0;
  const bool up = read(ready[0], &c, 1) == 1;
  return up ? 0 : 1;
}

// ---- the command program ----

int RunCommands() {
  char line[512];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    std::string command = line;
    while (!command.empty() && (command.back() == '\n' || command.back() == '\r')) command.pop_back();
    if (command.empty()) continue;
    const int fd = Connect();
    if (fd < 0) {
      std::fprintf(stderr, "Cannot find MPS control daemon process (%s: %s)\n", SocketPath().c_str(),
                   std::strerror(errno));
      return 1;
    }
    command += "\n";
    (void)!send(fd, command.data(), command.size(), MSG_NOSIGNAL);
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) std::fwrite(buf, 1, static_cast<size_t>(n), stdout);
    close(fd);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "-d") == 0) return StartDaemon();
  if (argc > 1) {
    std::fprintf(stderr, "usage: %s [-d] (commands on stdin)\n", argv[0]);
    return 2;
  }
  return RunCommands();
}
