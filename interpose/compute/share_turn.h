// The share turn: processes of one class that contend for a GPU take exclusive turns by
// virtual time (policy.h: VtimeIncrement, ShareTurn, VtimeOnActivation). ShareTurnTaker is one
// process's side of it on one GPU, a state machine of three states:
//
//   idle     no peer contends: launches go, the turn is not held
//   waiting  peers contend and the turn is not ours (ShareTurn says no, or the previous
//            runner's queue is still draining)
//   running  the turn is ours until we lead the next contender by kShareQuantumNs
//
// A process that starts contending catches up to the others' virtual time (it banks no idle
// time); one whose peers stop contending is idle at once (work-conserving). Taking the turn
// waits for the previous runner's queued work to drain, so that the intervals measured are
// ours alone, but at most kDrainWaitMaxNs from the moment the turn became ours: a stalled peer
// cannot hold us.
//
// Pure: no clock, atomic, ledger or lock. The launch gate finds the contenders among its peers
// (their entries' times, virtual times and running bits), calls Decide under the GPU's turn
// mutex with its own virtual time and applies the decision: it adds the catch-up to its
// virtual time, publishes whether it runs (kComputeShareRunning) and waits. Inline: every
// gated launch decides.
#pragma once

#include <cstdint>

#include "policy.h"

namespace gslice::compute {

// How long a launch waits before it looks again: for the turn (a turn lasts kShareQuantumNs
// of virtual time), and for the previous runner's queue to drain.
inline constexpr int64_t kTurnWaitNs = 200'000;
inline constexpr int64_t kDrainPollNs = 50'000;

// The other processes of our class that take turns and contend for the GPU now: waiting at
// their gate (active) or with work queued (inflight).
struct Contenders {
  int64_t min_vtime = INT64_MAX;  // lowest virtual time among them; INT64_MAX: none
  bool inflight = false;          // one of them still has queued work
  bool running = false;           // one of them holds the turn
  bool any() const { return min_vtime != INT64_MAX; }
};

// What one launch does about the turn.
struct TurnDecision {
  int64_t wait_ns = 0;    // 0: launch now; else look again after this long
  int64_t vtime_add = 0;  // add to this process's virtual time first (the catch-up; >= 0)
  bool running = false;   // whether this process holds the turn now
};

class ShareTurnTaker {
 public:
  // One launch's decision at now, given the contenders and this process's virtual time
  // (ignored without contenders). REQUIRES: external synchronization (the launching threads
  // of one GPU take turns at it), and the decision's vtime_add applied before the next.
  TurnDecision Decide(const Contenders& c, int64_t my_vtime, int64_t now) {
    TurnDecision d;
    if (!c.any()) {
      was_active_ = false;
      take_since_ = 0;
      running_ = false;
      return d;
    }
    if (!was_active_) {
      // Contention starts (for us): catch up to the others' virtual time.
      const int64_t caught = VtimeOnActivation(my_vtime, c.min_vtime);
      d.vtime_add = caught - my_vtime;
      my_vtime = caught;
      was_active_ = true;
    }
    if (!ShareTurn(my_vtime, c.min_vtime, running_, c.running)) {
      take_since_ = 0;
      running_ = false;
      d.wait_ns = kTurnWaitNs;
      return d;
    }
    if (!running_) {
      // The turn is ours once the previous runner's queue drains, or kDrainWaitMaxNs passed.
      if (take_since_ == 0) take_since_ = now;
      if (c.inflight && now - take_since_ < kDrainWaitMaxNs) {
        d.wait_ns = kDrainPollNs;
        return d;
      }
      take_since_ = 0;
      running_ = true;
    }
    d.running = true;
    return d;
  }

  // Holds the turn (the last decision's running).
  bool running() const { return running_; }

 private:
  bool running_ = false;     // holds the turn
  bool was_active_ = false;  // contended at the previous decision
  int64_t take_since_ = 0;   // the turn is ours since then, once the last runner drains (0: not taking)
};

}  // namespace gslice::compute
