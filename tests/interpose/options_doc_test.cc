// docs/interposer.md's option table lists every GSLICE_* variable of options.def, with its
// default and text, so the one table stays the one documentation.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gslice/options.h"

namespace gslice {
namespace {

std::string Row(const OptionInfo& o) {
  std::string def = o.default_value[0] == '\0' ? "(empty)" : std::string("`") + o.default_value + "`";
  return std::string("| `") + o.env + "` | " + def + " | " + o.doc + " |";
}

TEST(OptionsDoc, InterposerDocListsEveryOption) {
  std::ifstream in(GSLICE_SOURCE_DIR "/docs/interposer.md");
  ASSERT_TRUE(in.good()) << "cannot read docs/interposer.md";
  std::string line, table;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line == "<!-- options:begin -->") inside = true;
    else if (line == "<!-- options:end -->") inside = false;
    else if (inside && line.rfind("| `GSLICE_", 0) == 0) table += line + "\n";
  }
  std::string expected;
  for (const OptionInfo& o : kOptions) expected += Row(o) + "\n";
  EXPECT_EQ(table, expected) << "update the table in docs/interposer.md between the options markers to:\n"
                             << expected;
}

TEST(OptionsDoc, NamesAreUniqueAndPrefixed) {
  for (size_t i = 0; i < kOptionCount; ++i) {
    EXPECT_EQ(std::string(kOptions[i].env).rfind("GSLICE_", 0), 0u) << kOptions[i].env;
    for (size_t j = i + 1; j < kOptionCount; ++j) EXPECT_STRNE(kOptions[i].env, kOptions[j].env);
  }
}

}  // namespace
}  // namespace gslice
