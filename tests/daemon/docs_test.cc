// The documentation follows the tables it describes: the config reference in
// docs/daemon.md is what `gsliced --print-config` prints, and docs/metrics.md lists every
// metric.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "config.h"
#include "metrics.h"

namespace gslice {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Docs, DaemonMdHoldsTheConfigReference) {
  std::string doc = Read(std::string(GSLICE_SOURCE_DIR) + "/docs/daemon.md");
  ASSERT_FALSE(doc.empty());
  EXPECT_NE(doc.find("```toml\n" + DocumentedDefaults() + "```"), std::string::npos)
      << "docs/daemon.md's config block differs from `gsliced --print-config`; paste it in again";
}

TEST(Docs, MetricsMdListsEveryMetric) {
  std::string doc = Read(std::string(GSLICE_SOURCE_DIR) + "/docs/metrics.md");
  ASSERT_FALSE(doc.empty());
  for (const std::string& name : MetricNames()) {
    EXPECT_NE(doc.find("| `" + name + "` |"), std::string::npos) << name << " is not in docs/metrics.md";
  }
}

}  // namespace
}  // namespace gslice
