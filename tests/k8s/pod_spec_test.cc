// The pod library's readers of a pod object: its user-set annotations and the uid a container
// runs as (k8s/pod/include/gslice/k8s/pod_annotations.h, pod_user.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gslice/k8s/pod_annotations.h"
#include "gslice/k8s/pod_user.h"

namespace gslice::k8s {
namespace {

using nlohmann::json;

TEST(PodAnnotations, ReadsTheUserSetStringsAndNothingElse) {
  const json pod = {{"metadata",
                     {{"annotations",
                       {{"gslice.io/class", "opportunistic"},
                        {"gslice.io/compute-cap", "40%"},
                        {"gslice.io/protect", 0.9},  // not a string: not set
                        {"gslice.io/memory", "16GiB,8GiB"},
                        {"gslice.io/idle-timeout", "30m"},
                        {"gslice.io/assignment", "{}"},  // the extender's, not the user's
                        {"example.com/other", "x"}}}}}};
  const PodAnnotations a = ReadPodAnnotations(pod);
  EXPECT_EQ(a.slice_class, "opportunistic");
  EXPECT_EQ(a.compute_cap, "40%");
  EXPECT_EQ(a.protect, "");
  EXPECT_EQ(a.memory, "16GiB,8GiB");
  EXPECT_EQ(a.idle_timeout, "30m");
  EXPECT_EQ(a.policy, "");
}

TEST(PodAnnotations, APodWithoutThemOrNotAnObjectHasNoneSet) {
  for (const json& pod : {json(nullptr), json("pod"), json::object(), json{{"metadata", 3}},
                          json{{"metadata", {{"annotations", json::array()}}}}}) {
    EXPECT_EQ(ReadPodAnnotations(pod), PodAnnotations{}) << pod.dump();
  }
}

TEST(PodUser, TheContainersRunAsUserComesBeforeThePods) {
  const json spec = {{"securityContext", {{"runAsUser", 1000}, {"runAsNonRoot", true}}},
                     {"containers",
                      {{{"name", "main"}, {"securityContext", {{"runAsUser", 2000}, {"runAsNonRoot", false}}}},
                       {{"name", "side"}}}}};
  EXPECT_EQ(ContainerRunAsUser(spec, "main"), 2000);
  EXPECT_EQ(ContainerRunAsUser(spec, "side"), 1000);
  EXPECT_EQ(ContainerRunAsUser(spec, "absent"), 1000);
  EXPECT_FALSE(ContainerRunAsNonRoot(spec, "main"));
  EXPECT_TRUE(ContainerRunAsNonRoot(spec, "side"));
}

TEST(PodUser, ASpecThatDoesNotSayOrSaysNoUidGivesMinusOne) {
  EXPECT_EQ(ContainerRunAsUser(json{{"containers", {{{"name", "main"}}}}}, "main"), -1);
  EXPECT_FALSE(ContainerRunAsNonRoot(json{{"containers", {{{"name", "main"}}}}}, "main"));
  for (const json& uid : {json(-1), json(4294967295LL), json("1000"), json(10.5)}) {
    EXPECT_EQ(SecurityContextRunAsUser(json{{"securityContext", {{"runAsUser", uid}}}}), -1) << uid.dump();
  }
  EXPECT_EQ(SecurityContextRunAsUser(json{{"securityContext", {{"runAsUser", 0}}}}), 0);
  EXPECT_EQ(SecurityContextRunAsUser(json("not an object")), -1);
}

}  // namespace
}  // namespace gslice::k8s
