// The shim's per-process allocation table: O(1) insert/erase under growth, every key found
// exactly once, kinds kept apart, erase keeping probe chains intact.
#include "allocation_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace gslice::shim {
namespace {

TEST(AllocationTable, MatchesAReferenceMapUnderRandomOperations) {
  static AllocationTable table;  // process-lifetime, as in the shim (it has no destructor)
  std::map<std::pair<uint64_t, int>, AllocRecord> ref;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Device-pointer-like keys, clustered so probe chains collide and wrap.
    uint64_t key = 0x7f0000000000ull + (rng() % 5000) * 0x200000ull;
    AllocKind kind = (rng() % 4 == 0) ? AllocKind::kVmmHandle : AllocKind::kLinear;
    auto rk = std::make_pair(key, static_cast<int>(kind));
    if (rng() % 2 == 0) {
      AllocRecord rec{static_cast<int64_t>(rng() % 1000000), static_cast<int>(rng() % 4)};
      ASSERT_TRUE(table.Insert(key, kind, rec));
      ref[rk] = rec;
    } else {
      AllocRecord got;
      bool found = table.Erase(key, kind, &got);
      auto it = ref.find(rk);
      ASSERT_EQ(found, it != ref.end());
      if (found) {
        EXPECT_EQ(got.bytes, it->second.bytes);
        EXPECT_EQ(got.gpu, it->second.gpu);
        ref.erase(it);
      }
    }
    ASSERT_EQ(table.size(), ref.size());
  }
  for (const auto& [k, rec] : ref) {
    AllocRecord got;
    ASSERT_TRUE(table.Erase(k.first, static_cast<AllocKind>(k.second), &got));
    EXPECT_EQ(got.bytes, rec.bytes);
  }
  EXPECT_EQ(table.size(), 0u);
}

TEST(AllocationTable, KindsAreSeparateAndZeroIsNoKey) {
  static AllocationTable table;  // process-lifetime, as in the shim (it has no destructor)
  EXPECT_FALSE(table.Insert(0, AllocKind::kLinear, AllocRecord{1, 0}));
  ASSERT_TRUE(table.Insert(42, AllocKind::kLinear, AllocRecord{10, 0}));
  ASSERT_TRUE(table.Insert(42, AllocKind::kVmmHandle, AllocRecord{20, 1}));
  AllocRecord r;
  ASSERT_TRUE(table.Erase(42, AllocKind::kVmmHandle, &r));
  EXPECT_EQ(r.bytes, 20);
  ASSERT_TRUE(table.Erase(42, AllocKind::kLinear, &r));
  EXPECT_EQ(r.bytes, 10);
  EXPECT_FALSE(table.Erase(42, AllocKind::kLinear, &r));
}

}  // namespace
}  // namespace gslice::shim
