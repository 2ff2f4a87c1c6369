// The suspend state of one process (or, aggregated, one slice), and the transitions the
// state machine allows. This is the single definition of the state names that `gslice ls`,
// the API and the metrics print.
//
//   running ──suspend──> suspending ──checkpointed──> suspended ──resume──> resuming ──> running
//      ^                    │ lock/checkpoint failed,        ^                  │ restore failed,
//      └────────────────────┘ process unlocked again         └──────────────────┘ still checkpointed
//   any transitional state ──driver reports FAILED──> failed ──adopt/resume──> resuming|running
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace gslice::suspend {

enum class State : uint8_t {
  kRunning = 0,
  kSuspending = 1,
  kSuspended = 2,
  kResuming = 3,
  kFailed = 4,
};

inline constexpr State kAllStates[] = {State::kRunning, State::kSuspending, State::kSuspended,
                                       State::kResuming, State::kFailed};

// "running", "suspending", "suspended", "resuming", "failed".
const char* StateName(State s);
std::optional<State> ParseState(std::string_view name);

// True for the edges drawn above (and s -> s, which is a no-op).
bool IsValidTransition(State from, State to);

// True while the driver may hold the process locked or checkpointed: its CUDA calls wait.
inline bool IsTransitional(State s) { return s == State::kSuspending || s == State::kResuming; }

// The state of a slice from its processes': failed if any failed; otherwise a transitional
// state if any process is in one (suspending before resuming); suspended when every process
// is suspended; running when none is; a slice with some of each reports suspended only when
// all are, so a half-suspended slice reads "suspending". No processes: running.
State AggregateState(std::span<const State> states);

// Why a process was (or is to be) suspended; kept for metrics and `gslice ls`.
enum class Cause : uint8_t { kManual = 0, kIdle = 1, kPreemption = 2, kMove = 3 };
const char* CauseName(Cause c);

}  // namespace gslice::suspend
