// Plays a CUDA program's start on MPS for gsliced's tests (with the stand-in daemon,
// mps_control_standin.cc): prints the MPS environment it was given, and where
// CUDA_MPS_PIPE_DIRECTORY is set, connects to that daemon the way CUDA's initialisation does.
// A daemon it cannot reach means running without MPS, as CUDA does; a daemon that does not
// answer within --wait-ms means the program would have been blocked at initialisation.
//
// usage: gslice_test_mps_client [--wait-ms N] [--hold-file PATH]
//   prints "uid=U pipe=P log=L priority=C threads=T" (- for what is unset), then one of
//   "mps: none", "mps: not reached (...)", "mps: served by server PID", "mps: BLOCKED";
//   with --hold-file it stays (connected) until PATH exists (at most 60 s), then exits.
//   Exit 3 when blocked, 0 otherwise.
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : "-";
}

}  // namespace

int main(int argc, char** argv) {
  int wait_ms = 5000;
  std::string hold;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--wait-ms") == 0) wait_ms = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--hold-file") == 0) hold = argv[i + 1];
  }
  const std::string pipe = Env("CUDA_MPS_PIPE_DIRECTORY");
  std::printf("uid=%d pipe=%s log=%s priority=%s threads=%s\n", static_cast<int>(getuid()), pipe.c_str(),
              Env("CUDA_MPS_LOG_DIRECTORY").c_str(), Env("CUDA_MPS_CLIENT_PRIORITY").c_str(),
              Env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").c_str());
  std::fflush(stdout);
  int fd = -1;
  if (pipe == "-") {
    std::printf("mps: none\n");
  } else {
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s/control", pipe.c_str());
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      std::printf("mps: not reached (%s): running without MPS\n", std::strerror(errno));
      close(fd);
      fd = -1;
    } else {
      (void)!send(fd, "CLIENT\n", 7, MSG_NOSIGNAL);
      pollfd p{fd, POLLIN, 0};
      char buf[64] = {};
      if (poll(&p, 1, wait_ms) == 1 && recv(fd, buf, sizeof buf - 1, 0) > 3 && std::strncmp(buf, "OK ", 3) == 0) {
        std::string server(buf + 3);
        while (!server.empty() && server.back() == '\n') server.pop_back();
        std::printf("mps: served by server %s\n", server.c_str());
      } else {
        std::printf("mps: BLOCKED at initialisation for %d ms\n", wait_ms);
        std::fflush(stdout);
        return 3;
      }
    }
  }
  std::fflush(stdout);
  if (!hold.empty()) {
    struct stat st {};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (stat(hold.c_str(), &st) != 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (fd >= 0) close(fd);
  return 0;
}
