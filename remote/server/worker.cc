// One client's worker: started by `gslice run` (so the gslice shim is preloaded and the slice's
// limits are in its environment), it loads libcuda.so.1 - the shim in front of the real or
// simulated driver - answers the handshake and serves the client's calls until the client
// goes away. A watcher thread ends the process the moment the client's socket closes, even
// while a call blocks in the driver: the process's exit frees everything the client held.
#include "worker.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cstring>
#include <unistd.h>

#include <vector>

#include "dispatch.h"
#include "socket_io.h"

namespace gslice::remote {

namespace {

using CtxGetFn = CUresult (*)(CUcontext*);
using CtxSetFn = CUresult (*)(CUcontext);
CtxGetFn g_ctx_get = nullptr;
CtxSetFn g_ctx_set = nullptr;

void* WatchClient(void* arg) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  for (;;) {
    pollfd p = {fd, POLLRDHUP, 0};
    int rc = poll(&p, 1, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) _exit(0);
  }
  return nullptr;
}

// Makes ctx current on this (the only serving) thread, as it is on the client's calling thread.
CUresult MakeCurrent(CUcontext want) {
  if (g_ctx_get == nullptr || g_ctx_set == nullptr) return CUDA_SUCCESS;
  for (int tries = 0; tries < 64; ++tries) {
    CUcontext cur = nullptr;
    if (g_ctx_get(&cur) != CUDA_SUCCESS || cur == want) return CUDA_SUCCESS;  // before cuInit: nothing to do
    CUresult r = g_ctx_set(want);  // NULL pops one level of the stack
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

bool SendHelloReply(int fd, const HelloReply& reply) {
  Writer w;
  EncodeHelloReply(reply, &w);
  return WriteFrame(fd, FrameHeader{.seq = 0, .op = kOpHello | kReplyBit}, w.buffer().data(), w.size());
}

}  // namespace

int RunWorker(int fd) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (driver == nullptr) {
    const char* why = dlerror();
    const std::string message = std::string("the worker cannot load libcuda.so.1: ") + (why != nullptr ? why : "?");
    fprintf(stderr, "gslice-remoted: %s\n", message.c_str());
    SendHelloReply(fd, HelloReply{.status = 1, .worker_pid = 0, .message = message});
    return 1;
  }
  LoadDriver(driver);
  // The worker's NVML (the shim's, preloaded by gslice run) answers the NVML client; without
  // one, its calls are answered NVML_ERROR_NOT_SUPPORTED.
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL); nvml != nullptr) LoadNvml(nvml);
  g_ctx_get = reinterpret_cast<CtxGetFn>(dlsym(driver, "cuCtxGetCurrent"));
  g_ctx_set = reinterpret_cast<CtxSetFn>(dlsym(driver, "cuCtxSetCurrent"));
  if (!SendHelloReply(fd, HelloReply{.status = 0, .worker_pid = static_cast<uint32_t>(getpid()), .message = ""})) {
    return 0;
  }
  pthread_t watcher;
  if (pthread_create(&watcher, nullptr, WatchClient, reinterpret_cast<void*>(static_cast<intptr_t>(fd))) == 0) {
    pthread_detach(watcher);
  }
  std::vector<uint8_t> payload;
  int32_t deferred = CUDA_SUCCESS;  // the first error of an async call since the last collect
  for (;;) {
    FrameHeader h;
    FrameRead got = ReadFrame(fd, kMaxFrame, &h, &payload);
    if (got == FrameRead::kClosed) return 0;
    if (got == FrameRead::kTooLarge) {
      fprintf(stderr, "gslice-remoted[%d]: a frame of %u bytes (at most %u): closing the connection\n",
              static_cast<int>(getpid()), h.length, kMaxFrame);
      return 3;
    }
    Reader in(payload.data(), payload.size());
    Writer out;
    uint64_t ctx = 0;
    const bool driver_call = h.op >= kOpCount || kOpLibrary[h.op] == Library::kCuda;
    if (!in.Get(&ctx)) {
      out.Put<int32_t>(CUDA_ERROR_INVALID_VALUE);
    } else if (CUresult r = driver_call ? MakeCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(ctx)))
                                        : CUDA_SUCCESS;
               r != CUDA_SUCCESS && h.op < kOpCount) {
      out.Put<int32_t>(r);
    } else {
      switch (Dispatch(h.op, in, out)) {
        case Dispatched::kAnswered:
          break;
        case Dispatched::kRefused:
          fprintf(stderr, "gslice-remoted[%d]: malformed %s request: answered CUDA_ERROR_INVALID_VALUE\n",
                  static_cast<int>(getpid()), kOpNames[h.op]);
          break;
        case Dispatched::kUnknownOp:
          fprintf(stderr, "gslice-remoted[%d]: unknown request %#x: closing the connection\n",
                  static_cast<int>(getpid()), h.op);
          return 3;
      }
    }
    int32_t result = CUDA_SUCCESS;
    std::memcpy(&result, out.buffer().data(), sizeof result);
    if (h.op < kOpCount && kOpAsync[h.op]) {
      // The client does not wait for this one: its error waits for the next synchronisation.
      if (result != CUDA_SUCCESS && deferred == CUDA_SUCCESS) deferred = result;
      continue;
    }
    if (h.op < kOpCount && kOpCollects[h.op] && deferred != CUDA_SUCCESS && result == CUDA_SUCCESS) {
      result = deferred;
      std::memcpy(out.buffer().data(), &result, sizeof result);
      deferred = CUDA_SUCCESS;
    }
    if (!WriteFrame(fd, FrameHeader{.seq = h.seq, .op = h.op | kReplyBit}, out.buffer().data(), out.size())) return 0;
  }
}

}  // namespace gslice::remote
