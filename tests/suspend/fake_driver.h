// A scripted CheckpointDriver for unit tests: keeps a driver-side state per pid, follows the
// real API's state rules (lock needs RUNNING, checkpoint LOCKED, restore CHECKPOINTED,
// unlock LOCKED) and fails the steps a test asks it to.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gslice/suspend/driver.h"

namespace gslice::suspend::testing {

class FakeDriver : public CheckpointDriver {
 public:
  std::map<int, CUprocessState> states;
  // Step name ("lock", "checkpoint", "restore", "unlock", "state") -> error to return once
  // (or always, if sticky).
  std::map<std::string, CUresult> fail_once;
  std::map<std::string, CUresult> fail_always;
  // What the state becomes when a step fails ("checkpoint" -> LOCKED by default: the real
  // driver leaves a failed checkpoint locked).
  std::map<std::string, CUprocessState> state_after_failure;
  std::vector<std::string> calls;
  std::vector<GpuPair> last_pairs;

  CUresult GetState(int pid, CUprocessState* s) override {
    calls.push_back("state");
    if (CUresult r = Fail("state"); r != CUDA_SUCCESS) return r;
    auto it = states.find(pid);
    if (it == states.end()) return CUDA_ERROR_INVALID_VALUE;
    *s = it->second;
    return CUDA_SUCCESS;
  }
  CUresult Lock(int pid, unsigned) override { return Step(pid, "lock", CU_PROCESS_STATE_RUNNING, CU_PROCESS_STATE_LOCKED); }
  CUresult Checkpoint(int pid) override {
    return Step(pid, "checkpoint", CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_CHECKPOINTED);
  }
  CUresult Restore(int pid, std::span<const GpuPair> pairs) override {
    last_pairs.assign(pairs.begin(), pairs.end());
    return Step(pid, "restore", CU_PROCESS_STATE_CHECKPOINTED, CU_PROCESS_STATE_LOCKED);
  }
  CUresult Unlock(int pid) override { return Step(pid, "unlock", CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_RUNNING); }
  CUresult GetRestoreThreadId(int, int* tid) override {
    *tid = 1;
    return CUDA_SUCCESS;
  }
  const char* ErrorName(CUresult r) override {
    switch (r) {
      case CUDA_SUCCESS: return "CUDA_SUCCESS";
      case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
      case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
      case CUDA_ERROR_ILLEGAL_STATE: return "CUDA_ERROR_ILLEGAL_STATE";
      case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
      case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
      default: return "CUDA_ERROR_UNKNOWN";
    }
  }
  int Count(const std::string& step) const {
    int n = 0;
    for (const auto& c : calls) n += c == step;
    return n;
  }

 private:
  CUresult Fail(const std::string& step) {
    if (auto it = fail_always.find(step); it != fail_always.end()) return it->second;
    if (auto it = fail_once.find(step); it != fail_once.end()) {
      CUresult r = it->second;
      fail_once.erase(it);
      return r;
    }
    return CUDA_SUCCESS;
  }
  CUresult Step(int pid, const std::string& step, CUprocessState need, CUprocessState to) {
    calls.push_back(step);
    auto it = states.find(pid);
    if (it == states.end()) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = Fail(step); r != CUDA_SUCCESS) {
      if (auto a = state_after_failure.find(step); a != state_after_failure.end()) it->second = a->second;
      return r;
    }
    if (it->second != need) return CUDA_ERROR_ILLEGAL_STATE;
    it->second = to;
    return CUDA_SUCCESS;
  }
};

}  // namespace gslice::suspend::testing
