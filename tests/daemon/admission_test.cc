#include "admission.h"

#include <gtest/gtest.h>

namespace gslice {
namespace {

constexpr uint64_t GiB = 1ull << 30;

std::vector<GpuInfo> TwoGpus() {
  return {GpuInfo{0, "GPU-a", "test", 16 * GiB, 0, -1}, GpuInfo{1, "GPU-b", "test", 16 * GiB, 0, -1}};
}

Slice MakeSlice(const std::string& name, SliceClass c, std::vector<SliceGpu> gpus,
                const std::string& project = "p") {
  Slice s;
  s.name = name;
  s.user = "u";
  s.project = project;
  s.slice_class = c;
  s.gpus = std::move(gpus);
  return s;
}

TEST(Admission, GuaranteedMemoryNeverExceedsTheGpu) {
  Project p{"p", 0, 0, 0, 0};
  std::vector<Slice> existing = {MakeSlice("a", SliceClass::kGuaranteed, {{"GPU-a", 10 * GiB, 0.5}})};
  Slice ask = MakeSlice("b", SliceClass::kGuaranteed, {{"GPU-a", 8 * GiB, 0.2}});
  Status s = Admit(ask, TwoGpus(), existing, p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), 409);
  EXPECT_NE(s.message().find("GPU 0 (GPU-a): 6 GiB guaranteed memory free, asked 8 GiB"), std::string::npos)
      << s.message();
  ask.gpus[0].memory_limit = 6 * GiB;
  EXPECT_TRUE(Admit(ask, TwoGpus(), existing, p).ok());
  // The other GPU is untouched.
  ask.gpus[0] = {"GPU-b", 16 * GiB, 1.0};
  EXPECT_TRUE(Admit(ask, TwoGpus(), existing, p).ok());
}

TEST(Admission, GuaranteedComputeNeverExceedsOneGpu) {
  Project p{"p", 0, 0, 0, 0};
  std::vector<Slice> existing = {
      MakeSlice("a", SliceClass::kGuaranteed, {{"GPU-a", 1 * GiB, 1.0 / 3}}),
      MakeSlice("b", SliceClass::kGuaranteed, {{"GPU-a", 1 * GiB, 1.0 / 3}})};
  Slice third = MakeSlice("c", SliceClass::kGuaranteed, {{"GPU-a", 1 * GiB, 1.0 / 3}});
  EXPECT_TRUE(Admit(third, TwoGpus(), existing, p).ok()) << "three thirds fit one GPU";
  existing.push_back(third);
  Slice more = MakeSlice("d", SliceClass::kGuaranteed, {{"GPU-a", 1 * GiB, 0.3}});
  Status s = Admit(more, TwoGpus(), existing, p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("0% guaranteed compute free, asked 30%"), std::string::npos) << s.message();
}

TEST(Admission, OpportunisticReservesNothingButStaysWithinTheGpu) {
  Project p{"p", 1 * GiB, 0, 0, 0};
  std::vector<Slice> existing = {MakeSlice("a", SliceClass::kGuaranteed, {{"GPU-a", 16 * GiB, 1.0}}, "q")};
  Slice opp = MakeSlice("o", SliceClass::kOpportunistic, {{"GPU-a", 12 * GiB, 1.0}});
  EXPECT_TRUE(Admit(opp, TwoGpus(), existing, p).ok());
  opp.gpus[0].memory_limit = 17 * GiB;
  Status s = Admit(opp, TwoGpus(), existing, p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), 400);
  EXPECT_NE(s.message().find("has 16 GiB, asked 17 GiB"), std::string::npos) << s.message();
  // Opportunistic slices do not count against guaranteed commitments.
  existing.push_back(MakeSlice("o2", SliceClass::kOpportunistic, {{"GPU-b", 16 * GiB, 1.0}}));
  EXPECT_TRUE(Admit(MakeSlice("g", SliceClass::kGuaranteed, {{"GPU-b", 16 * GiB, 1.0}}, "q"),
                    TwoGpus(), existing, Project{"q", 0, 0, 0, 0})
                  .ok());
}

TEST(Admission, ProjectQuotaAdmitsOverQuotaOnlyAsOpportunistic) {
  Project p{"ml", 10 * GiB, 1.0, 5, 0};
  std::vector<Slice> existing = {MakeSlice("a", SliceClass::kGuaranteed, {{"GPU-a", 8 * GiB, 0.5}}, "ml")};
  Slice ask = MakeSlice("b", SliceClass::kGuaranteed, {{"GPU-b", 4 * GiB, 0.25}}, "ml");
  Status s = Admit(ask, TwoGpus(), existing, p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("project ml: 2 GiB of its 10 GiB memory quota free, asked 4 GiB"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("opportunistic"), std::string::npos);
  ask.slice_class = SliceClass::kOpportunistic;
  EXPECT_TRUE(Admit(ask, TwoGpus(), existing, p).ok());
  // Compute quota: 1.0 GPU, 0.5 used.
  Slice compute = MakeSlice("c", SliceClass::kGuaranteed, {{"GPU-b", 1 * GiB, 0.6}}, "ml");
  s = Admit(compute, TwoGpus(), existing, p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("50% of its 100% compute quota free, asked 60%"), std::string::npos) << s.message();
  // Other projects' slices do not count.
  existing.push_back(MakeSlice("x", SliceClass::kGuaranteed, {{"GPU-b", 1 * GiB, 0.1}}, "other"));
  compute.gpus[0].compute_share = 0.5;
  EXPECT_TRUE(Admit(compute, TwoGpus(), existing, p).ok());
}

TEST(Admission, RefusesUnknownAndDuplicateGpusAndZeroLimits) {
  Project p{"p", 0, 0, 0, 0};
  EXPECT_EQ(Admit(MakeSlice("a", SliceClass::kGuaranteed, {{"GPU-zz", GiB, 1}}), TwoGpus(), {}, p).code(), 400);
  EXPECT_EQ(Admit(MakeSlice("a", SliceClass::kGuaranteed, {{"GPU-a", GiB, 0.1}, {"GPU-a", GiB, 0.1}}),
                  TwoGpus(), {}, p)
                .code(),
            400);
  EXPECT_EQ(Admit(MakeSlice("a", SliceClass::kGuaranteed, {{"GPU-a", 0, 0.1}}), TwoGpus(), {}, p).code(), 400);
  EXPECT_EQ(Admit(MakeSlice("a", SliceClass::kGuaranteed, {{"GPU-a", GiB, 1.5}}), TwoGpus(), {}, p).code(), 400);
  EXPECT_TRUE(Admit(MakeSlice("a", SliceClass::kGuaranteed, {{"GPU-a", GiB, 0}}), TwoGpus(), {}, p).ok())
      << "a memory-only slice guarantees no compute";
  EXPECT_EQ(Admit(MakeSlice("a", SliceClass::kGuaranteed, {}), TwoGpus(), {}, p).code(), 400);
}

TEST(Names, RefuseWhatCouldEscapeAPath) {
  EXPECT_TRUE(ValidateName("slice", "train-1.a_b").ok());
  for (const char* bad : {"", "..", ".hidden", "a/b", "A", "a b", "a%2f", "-x", "\xc3\xa9"}) {
    EXPECT_FALSE(ValidateName("slice", bad).ok()) << bad;
  }
  EXPECT_FALSE(ValidateName("slice", std::string(64, 'a')).ok());
  EXPECT_TRUE(ValidateName("slice", std::string(63, 'a')).ok());
}

}  // namespace
}  // namespace gslice
