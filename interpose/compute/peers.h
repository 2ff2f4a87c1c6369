// A gated process's peers on one GPU: the other processes' compute entries in the node
// ledger on the same GPU, each classified (guaranteed or opportunistic, and its floor), and
// whether this process takes exclusive share turns with them. Pure: the gate thread's peer
// scan (every kPeerScanNs) loads what each alive entry with a live owner says (PeerFacts),
// ClassifyPeers decides, and the gate publishes the result for launching threads as one word
// per peer (PackPeer). docs/compute.md explains the design.
//
// Trust: an entry is written by its own process, the limits file only by the ledger's writer.
// So a peer counts as guaranteed only where both its slice and its entry say so (an entry may
// report itself opportunistic but cannot promote itself above its slice), and its floor comes
// from its slice, never from its entry.
#pragma once

#include <cstdint>

#include "controller.h"
#include "gslice/ledger.h"
#include "policy.h"

namespace gslice::compute {

// Peers on one GPU a gate follows (compute entries of any slice on the same GPU); more are
// left out of the scan.
inline constexpr int kMaxPeers = kMaxControlledPeers;

// ---- a peer in one word ----------------------------------------------------------------
//
// A peer as the scan found it, in one word so that launching threads read it whole: its
// compute entry's index, its class and its floor (controller.h, PeerPeriod).
inline constexpr uint32_t kPeerIndexMask = 0xffffu;
inline constexpr int kPeerFloorShift = 16;
inline constexpr uint32_t kPeerFloorMask = 0x7ffu;  // floors are at most 1000 permille
inline constexpr uint32_t kPeerGuaranteed = 1u << 31;
static_assert(kLedgerMaxComputeEntries <= static_cast<int>(kPeerIndexMask) + 1);
inline constexpr uint32_t PackPeer(int index, bool guaranteed, uint32_t floor_permille) {
  return static_cast<uint32_t>(index) | ((floor_permille & kPeerFloorMask) << kPeerFloorShift) |
         (guaranteed ? kPeerGuaranteed : 0u);
}
inline constexpr int PeerIndex(uint32_t word) { return static_cast<int>(word & kPeerIndexMask); }
inline constexpr bool PeerGuaranteed(uint32_t word) { return (word & kPeerGuaranteed) != 0; }
inline constexpr uint32_t PeerFloor(uint32_t word) { return (word >> kPeerFloorShift) & kPeerFloorMask; }

// ---- classification --------------------------------------------------------------------

// What one peer's entry and its slice say, as the scan loaded them: an ALIVE entry on the
// same GPU, not this process's, whose owner lives.
struct PeerFacts {
  int index = -1;                 // its compute entry (node-wide index, ComputeSliceOf)
  uint32_t slice_class = 0;       // its slice's class in the limits file (SliceClass)
  uint32_t protect_permille = 0;  // its slice's protection level (LedgerSlice; 0: default)
  uint32_t entry_class = 0;       // the class its entry reports (ComputeClass)
  uint32_t share_word = 0;        // its entry's share word (kComputeShareSet, ...)
  uint32_t cap_slice = 0;         // 1 + the slice whose cap it charges; 0: none
};

// Loads facts of compute entry index e, whose slice in the limits file is slice (relaxed loads:
// a peer's words change at any time, and each is read whole).
inline PeerFacts LoadPeerFacts(int index, const LedgerComputeEntry& e, const LedgerSlice& slice) {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  return {.index = index,
          .slice_class = __atomic_load_n(&slice.slice_class, __ATOMIC_RELAXED),
          .protect_permille = __atomic_load_n(&slice.protect_permille, __ATOMIC_RELAXED),
          .entry_class = e.slice_class.load(kRelaxed),
          .share_word = e.share_permille.load(kRelaxed),
          .cap_slice = e.cap_slice.load(kRelaxed)};
}

// The class a peer counts with: guaranteed only where both its slice and its entry say so.
ComputeClass PeerClass(uint32_t slice_class, uint32_t entry_class);
// The floor a peer's slice sets: 0 is the default (kProtectDefaultPermille), a value outside
// the valid range counts as its nearest bound.
uint32_t PeerFloorPermille(uint32_t protect_permille);

// This process on the GPU, as its peers are judged against it.
struct PeerSelf {
  ComputeClass cls = ComputeClass::kGuaranteed;  // the class of the policy the gate applies
  bool share_set = false;                         // its share was given explicitly
  uint32_t cap_slice = 0;  // 1 + the slice whose cap its entry charges; 0: none (as PeerFacts)
};

// The peer list the gate publishes for one GPU.
struct PeerList {
  int count = 0;  // words[0, count)
  uint32_t words[kMaxPeers] = {};  // PackPeer, in the order of the facts
  int opportunistic = 0;           // how many are opportunistic (the gate's mode, the controllers)
  int guaranteed = 0;              // how many are guaranteed (whether opportunistic work yields)
  // This process takes exclusive turns with a peer: one of its own class where either side
  // gave a share explicitly, or one that charges the same slice's cap. On a GPU that
  // time-slices processes each one's measured intervals would otherwise include the other's
  // time, and a capped slice would be charged for it twice. Published as kComputeTakesTurns,
  // so that peers that do not take turns are not waited for.
  bool share_peer = false;
};

// Classifies peers[0, n) (at most kMaxPeers; more are left out) against self.
PeerList ClassifyPeers(const PeerSelf& self, const PeerFacts* peers, int n);

}  // namespace gslice::compute
