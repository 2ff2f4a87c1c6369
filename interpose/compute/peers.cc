#include "peers.h"

#include <algorithm>

namespace gslice::compute {

ComputeClass PeerClass(uint32_t slice_class, uint32_t entry_class) {
  const bool guaranteed = slice_class != static_cast<uint32_t>(SliceClass::kOpportunistic) &&
                          entry_class == static_cast<uint32_t>(ComputeClass::kGuaranteed);
  return guaranteed ? ComputeClass::kGuaranteed : ComputeClass::kOpportunistic;
}

uint32_t PeerFloorPermille(uint32_t protect_permille) {
  return protect_permille == 0 ? kProtectDefaultPermille
                               : std::clamp(protect_permille, kProtectMinPermille, kProtectMaxPermille);
}

PeerList ClassifyPeers(const PeerSelf& self, const PeerFacts* peers, int n) {
  PeerList list;
  for (int k = 0; k < n && list.count < kMaxPeers; ++k) {
    const PeerFacts& f = peers[k];
    const ComputeClass cls = PeerClass(f.slice_class, f.entry_class);
    const bool guaranteed = cls == ComputeClass::kGuaranteed;
    if (guaranteed) {
      ++list.guaranteed;
    } else {
      ++list.opportunistic;
    }
    if (cls == self.cls && (self.share_set || (f.share_word & kComputeShareSet) != 0)) list.share_peer = true;
    if (self.cap_slice != 0 && f.cap_slice == self.cap_slice) list.share_peer = true;
    list.words[list.count++] = PackPeer(f.index, guaranteed, PeerFloorPermille(f.protect_permille));
  }
  return list;
}

}  // namespace gslice::compute
