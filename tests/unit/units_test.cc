#include "gslice/units.h"

#include <gtest/gtest.h>

#include <string>

namespace gslice {
namespace {

TEST(ParseSize, AcceptsBinaryUnits) {
  EXPECT_EQ(ParseSize("20GiB").bytes, 20ULL << 30);
  EXPECT_EQ(ParseSize("20G").bytes, 20ULL << 30);
  EXPECT_EQ(ParseSize("20gb").bytes, 20ULL << 30);
  EXPECT_EQ(ParseSize("512MiB").bytes, 512ULL << 20);
  EXPECT_EQ(ParseSize("64k").bytes, 64ULL << 10);
  EXPECT_EQ(ParseSize("1TiB").bytes, 1ULL << 40);
  EXPECT_EQ(ParseSize("4096").bytes, 4096ULL);
  EXPECT_EQ(ParseSize(" 7 B ").bytes, 7ULL);
}

TEST(ParseSize, AcceptsFractions) {
  EXPECT_EQ(ParseSize("1.5GiB").bytes, 3ULL << 29);
  EXPECT_EQ(ParseSize("0.25M").bytes, 256ULL << 10);
}

TEST(ParseSize, RefusesNonsenseWithAReason) {
  for (const char* bad : {"", "GiB", "-1G", "12XB", "1.", "1.5", "99999999999999999999", "20000000T"}) {
    ParsedSize r = ParseSize(bad);
    EXPECT_FALSE(r.ok) << bad;
    EXPECT_NE(r.error, nullptr) << bad;
  }
}

TEST(ParsePercent, AcceptsRange) {
  EXPECT_DOUBLE_EQ(ParsePercent("30%").fraction, 0.30);
  EXPECT_DOUBLE_EQ(ParsePercent("100").fraction, 1.0);
  EXPECT_DOUBLE_EQ(ParsePercent("12.5%").fraction, 0.125);
  for (const char* bad : {"0%", "101%", "-5%", "abc", "%", "30%%"}) {
    EXPECT_FALSE(ParsePercent(bad).ok) << bad;
  }
}

TEST(ParseProtect, AcceptsFractionOrPercentFromHalfToOne) {
  EXPECT_EQ(ParseProtect("0.9").permille, 900u);
  EXPECT_EQ(ParseProtect("90%").permille, 900u);
  EXPECT_EQ(ParseProtect(" 97.5 % ").permille, 975u);
  EXPECT_EQ(ParseProtect("0.97").permille, 970u);
  EXPECT_EQ(ParseProtect("0.5").permille, 500u);
  EXPECT_EQ(ParseProtect("1").permille, 1000u);
  EXPECT_EQ(ParseProtect("1.0").permille, 1000u);
  EXPECT_EQ(ParseProtect("100%").permille, 1000u);
  EXPECT_EQ(ParseProtect("0.8999").permille, 900u);  // the nearest thousandth
  EXPECT_TRUE(ParseProtect("0.5").ok);
}

TEST(ParseProtect, RefusesOutsideTheRangeAndBareWholeNumbers) {
  for (const char* bad : {"", "%", "0.49", "0.4994", "49%", "0", "1.01", "101%", "90", "2", "-0.9", "abc", "0.9x",
                          "90%%", "1.", "99999999999999999999999"}) {
    ParsedProtect p = ParseProtect(bad);
    EXPECT_FALSE(p.ok) << bad;
    EXPECT_NE(p.error, nullptr) << bad;
  }
  EXPECT_NE(std::string(ParseProtect("90").error).find("90%"), std::string::npos);  // says how to write it
  EXPECT_NE(std::string(ParseProtect("0.3").error).find("0.5 to 1"), std::string::npos);
}

TEST(FormatSize, ReadsAtAGlance) {
  char buf[32];
  EXPECT_STREQ(FormatSize(20ULL << 30, buf, sizeof buf), "20 GiB");
  EXPECT_STREQ(FormatSize(3ULL << 29, buf, sizeof buf), "1.5 GiB");
  EXPECT_STREQ(FormatSize(100, buf, sizeof buf), "100 B");
}

}  // namespace
}  // namespace gslice
