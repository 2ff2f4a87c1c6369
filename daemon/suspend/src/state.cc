#include "gslice/suspend/state.h"

namespace gslice::suspend {

const char* StateName(State s) {
  switch (s) {
    case State::kRunning: return "running";
    case State::kSuspending: return "suspending";
    case State::kSuspended: return "suspended";
    case State::kResuming: return "resuming";
    case State::kFailed: return "failed";
  }
  return "unknown";
}

std::optional<State> ParseState(std::string_view name) {
  for (State s : kAllStates) {
    if (name == StateName(s)) return s;
  }
  return std::nullopt;
}

bool IsValidTransition(State from, State to) {
  if (from == to) return true;
  switch (from) {
    case State::kRunning: return to == State::kSuspending;
    case State::kSuspending:
      return to == State::kSuspended || to == State::kRunning || to == State::kFailed;
    case State::kSuspended: return to == State::kResuming || to == State::kFailed;
    case State::kResuming:
      return to == State::kRunning || to == State::kSuspended || to == State::kFailed;
    case State::kFailed: return to == State::kResuming || to == State::kRunning;
  }
  return false;
}

State AggregateState(std::span<const State> states) {
  bool any_failed = false, any_suspending = false, any_resuming = false;
  size_t suspended = 0;
  for (State s : states) {
    switch (s) {
      case State::kFailed: any_failed = true; break;
      case State::kSuspending: any_suspending = true; break;
      case State::kResuming: any_resuming = true; break;
      case State::kSuspended: ++suspended; break;
      case State::kRunning: break;
    }
  }
  if (any_failed) return State::kFailed;
  if (any_suspending) return State::kSuspending;
  if (any_resuming) return State::kResuming;
  if (states.empty() || suspended == 0) return State::kRunning;
  return suspended == states.size() ? State::kSuspended : State::kSuspending;
}

const char* CauseName(Cause c) {
  switch (c) {
    case Cause::kManual: return "manual";
    case Cause::kIdle: return "idle";
    case Cause::kPreemption: return "preemption";
    case Cause::kMove: return "move";
  }
  return "unknown";
}

}  // namespace gslice::suspend
