// The launch gate's peer classification (peers.h), on synthetic ledger entries: who counts as
// guaranteed, each peer's floor, and with whom a process takes exclusive share turns.
#include "peers.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace gslice::compute {
namespace {

constexpr uint32_t kG = static_cast<uint32_t>(ComputeClass::kGuaranteed);
constexpr uint32_t kO = static_cast<uint32_t>(ComputeClass::kOpportunistic);

// A peer in entry index of a slice of class slice_class whose entry reports entry_class.
PeerFacts Peer(int index, uint32_t slice_class, uint32_t entry_class) {
  return {.index = index, .slice_class = slice_class, .entry_class = entry_class, .share_word = 1000};
}
PeerList Classify(const PeerSelf& self, const std::vector<PeerFacts>& peers) {
  return ClassifyPeers(self, peers.data(), static_cast<int>(peers.size()));
}

TEST(ComputePeers, AnEntryCannotPromoteItselfAboveItsSlice) {
  EXPECT_EQ(PeerClass(kG, kG), ComputeClass::kGuaranteed);
  EXPECT_EQ(PeerClass(kO, kG), ComputeClass::kOpportunistic) << "its slice is opportunistic";
  EXPECT_EQ(PeerClass(kG, kO), ComputeClass::kOpportunistic) << "it reports itself opportunistic";
  EXPECT_EQ(PeerClass(kO, kO), ComputeClass::kOpportunistic);
  EXPECT_EQ(PeerClass(kG, 7), ComputeClass::kOpportunistic) << "an entry's class word it made up";

  const PeerList list = Classify({}, {Peer(3, kO, kG), Peer(9, kG, kG), Peer(12, kG, kO)});
  ASSERT_EQ(list.count, 3);
  EXPECT_EQ(list.guaranteed, 1);
  EXPECT_EQ(list.opportunistic, 2);
  EXPECT_FALSE(PeerGuaranteed(list.words[0]));
  EXPECT_TRUE(PeerGuaranteed(list.words[1]));
  EXPECT_FALSE(PeerGuaranteed(list.words[2]));
  EXPECT_EQ(PeerIndex(list.words[0]), 3);
  EXPECT_EQ(PeerIndex(list.words[1]), 9);
  EXPECT_EQ(PeerIndex(list.words[2]), 12);
}

TEST(ComputePeers, AFloorComesFromTheSliceWithinItsBounds) {
  EXPECT_EQ(PeerFloorPermille(0), kProtectDefaultPermille);
  EXPECT_EQ(PeerFloorPermille(800), 800u);
  EXPECT_EQ(PeerFloorPermille(1), kProtectMinPermille) << "below the range: its lower bound";
  EXPECT_EQ(PeerFloorPermille(0xffffffffu), kProtectMaxPermille) << "above the range: its upper bound";
  PeerFacts p = Peer(kLedgerMaxComputeEntries - 1, kG, kG);
  p.protect_permille = 600;
  const PeerList list = Classify({}, {p});
  EXPECT_EQ(PeerFloor(list.words[0]), 600u);
  EXPECT_EQ(PeerIndex(list.words[0]), kLedgerMaxComputeEntries - 1) << "the highest index fits its word";
}

TEST(ComputePeers, TurnsAreTakenWithinAClassWhereEitherGaveAShare) {
  const PeerSelf plain = {.cls = ComputeClass::kGuaranteed};
  const PeerSelf shared = {.cls = ComputeClass::kGuaranteed, .share_set = true};
  PeerFacts peer_shared = Peer(1, kG, kG);
  peer_shared.share_word = 300 | kComputeShareSet;
  EXPECT_FALSE(Classify(plain, {Peer(1, kG, kG)}).share_peer) << "neither gave a share";
  EXPECT_TRUE(Classify(shared, {Peer(1, kG, kG)}).share_peer) << "this process gave one";
  EXPECT_TRUE(Classify(plain, {peer_shared}).share_peer) << "the peer gave one";
  EXPECT_FALSE(Classify(shared, {Peer(1, kG, kO)}).share_peer) << "an opportunistic peer: another class";
  PeerFacts opp_shared = Peer(1, kO, kG);
  opp_shared.share_word = 300 | kComputeShareSet;
  EXPECT_FALSE(Classify(plain, {opp_shared}).share_peer) << "counted opportunistic by its slice";
  const PeerSelf opportunistic = {.cls = ComputeClass::kOpportunistic, .share_set = true};
  EXPECT_TRUE(Classify(opportunistic, {opp_shared}).share_peer) << "opportunistic peers share among themselves";
}

TEST(ComputePeers, ProcessesOfOneCappedSliceTakeTurns) {
  PeerFacts same = Peer(1, kG, kG);
  same.cap_slice = 5;
  PeerFacts other = Peer(2, kG, kG);
  other.cap_slice = 6;
  EXPECT_TRUE(Classify({.cap_slice = 5}, {same}).share_peer);
  EXPECT_FALSE(Classify({.cap_slice = 5}, {other}).share_peer) << "another slice's cap";
  EXPECT_FALSE(Classify({.cap_slice = 0}, {Peer(1, kG, kG)}).share_peer) << "neither is capped";
  PeerFacts same_opp = Peer(3, kO, kO);
  same_opp.cap_slice = 5;
  EXPECT_TRUE(Classify({.cap_slice = 5}, {same_opp}).share_peer) << "one slice's cap binds across classes";
}

TEST(ComputePeers, KeepsAtMostTheMostPeersItFollows) {
  std::vector<PeerFacts> many;
  for (int i = 0; i < kMaxPeers + 5; ++i) many.push_back(Peer(i, kG, i < kMaxPeers ? kO : kG));
  const PeerList list = Classify({}, many);
  EXPECT_EQ(list.count, kMaxPeers);
  EXPECT_EQ(list.opportunistic, kMaxPeers);
  EXPECT_EQ(list.guaranteed, 0) << "those beyond the list are not counted";
}

TEST(ComputePeers, FactsAreLoadedFromTheEntryAndItsSlice) {
  LedgerComputeEntry e{};
  e.slice_class.store(kG);
  e.share_permille.store(400 | kComputeShareSet | kComputeTakesTurns);
  e.cap_slice.store(3);
  const auto slice = std::make_unique<LedgerSlice>();
  slice->slice_class = static_cast<uint32_t>(SliceClass::kOpportunistic);
  slice->protect_permille = 700;
  const PeerFacts f = LoadPeerFacts(42, e, *slice);
  EXPECT_EQ(f.index, 42);
  EXPECT_EQ(f.slice_class, static_cast<uint32_t>(SliceClass::kOpportunistic));
  EXPECT_EQ(f.protect_permille, 700u);
  EXPECT_EQ(f.entry_class, kG);
  EXPECT_EQ(f.share_word, 400 | kComputeShareSet | kComputeTakesTurns);
  EXPECT_EQ(f.cap_slice, 3u);
  const PeerList list = Classify({}, {f});
  EXPECT_FALSE(PeerGuaranteed(list.words[0])) << "the slice in the limits file decides";
}

}  // namespace
}  // namespace gslice::compute
