#include "gslice/k8s/pod_identity.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace gslice::k8s {
namespace {

constexpr const char* kUid = "5f3c1f5e-8a2b-4c3d-9e4f-0123456789ab";
constexpr const char* kCid = "3e5a9d0c1b2f4e6a8c7d9b0a1f2e3d4c5b6a7980a1b2c3d4e5f60718293a4b5c";

TEST(PodCgroup, CgroupV2Systemd) {
  std::string text = std::string("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod") +
                     "5f3c1f5e_8a2b_4c3d_9e4f_0123456789ab.slice/cri-containerd-" + kCid + ".scope\n";
  auto cg = ParsePodCgroup(text);
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->pod_uid, kUid);
  EXPECT_EQ(cg->container_id, kCid);
  EXPECT_EQ(cg->qos, "burstable");
}

TEST(PodCgroup, CgroupV2Cgroupfs) {
  auto cg = ParsePodCgroup(std::string("0::/kubepods/besteffort/pod") + kUid + "/" + kCid + "\n");
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->pod_uid, kUid);
  EXPECT_EQ(cg->container_id, kCid);
  EXPECT_EQ(cg->qos, "besteffort");
}

TEST(PodCgroup, CgroupV1CgroupfsGuaranteed) {
  std::string text = std::string("12:pids:/kubepods/pod") + kUid + "/" + kCid + "\n" +
                     "11:memory:/kubepods/pod" + kUid + "/" + kCid + "\n" +
                     "1:name=systemd:/kubepods/pod" + kUid + "/" + kCid + "\n";
  auto cg = ParsePodCgroup(text);
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->pod_uid, kUid);
  EXPECT_EQ(cg->container_id, kCid);
  EXPECT_EQ(cg->qos, "guaranteed");
}

TEST(PodCgroup, CgroupV1SystemdDockerAndCrio) {
  std::string docker = std::string("4:devices:/kubepods.slice/kubepods-pod") +
                       "5f3c1f5e_8a2b_4c3d_9e4f_0123456789ab.slice/docker-" + kCid + ".scope\n";
  auto cg = ParsePodCgroup(docker);
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->pod_uid, kUid);
  EXPECT_EQ(cg->container_id, kCid);
  EXPECT_EQ(cg->qos, "guaranteed");
  std::string crio = std::string("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod") +
                     "5f3c1f5e_8a2b_4c3d_9e4f_0123456789ab.slice/crio-" + kCid + ".scope";
  cg = ParsePodCgroup(crio);
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->container_id, kCid);
  EXPECT_EQ(cg->qos, "besteffort");
}

TEST(PodCgroup, NestedUnderKindOrSystemSlice) {
  // kind nodes run the kubelet inside a container: the pod path is nested.
  auto cg = ParsePodCgroup(std::string("0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/") +
                           "kubelet-kubepods-besteffort-pod5f3c1f5e_8a2b_4c3d_9e4f_0123456789ab.slice/cri-containerd-" +
                           kCid + ".scope");
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->pod_uid, kUid);
  EXPECT_EQ(cg->container_id, kCid);
}

TEST(PodCgroup, PodSandboxAndHostProcesses) {
  auto sandbox = ParsePodCgroup(std::string("0::/kubepods/burstable/pod") + kUid + "\n");
  ASSERT_TRUE(sandbox);
  EXPECT_EQ(sandbox->pod_uid, kUid);
  EXPECT_EQ(sandbox->container_id, "");
  EXPECT_FALSE(ParsePodCgroup("0::/user.slice/user-1000.slice/session-3.scope\n"));
  EXPECT_FALSE(ParsePodCgroup("0::/\n"));
  EXPECT_FALSE(ParsePodCgroup("0::/system.slice/podman-1234.scope\n"));
  EXPECT_FALSE(ParsePodCgroup("garbage"));
  EXPECT_FALSE(ParsePodCgroup(""));
}

TEST(PodDirectory, NamesPodAndContainer) {
  PodDirectory dir;
  dir.AddPod(kUid, "team-a", "trainer-0");
  dir.AddContainer(kUid, std::string("containerd://") + kCid, "main");
  auto cg = ParsePodCgroup(std::string("0::/kubepods/pod") + kUid + "/" + kCid);
  ASSERT_TRUE(cg);
  auto name = dir.Lookup(*cg);
  ASSERT_TRUE(name);
  EXPECT_EQ(name->namespace_name, "team-a");
  EXPECT_EQ(name->name, "trainer-0");
  EXPECT_EQ(name->container, "main");
  PodCgroup other{"00000000-0000-0000-0000-000000000000", "", "guaranteed"};
  EXPECT_FALSE(dir.Lookup(other));
}

TEST(PodDirectory, ReadsProcFiles) {
  auto root = std::filesystem::temp_directory_path() / ("gslice-proc-" + std::to_string(getpid()));
  std::filesystem::create_directories(root / "42");
  std::ofstream(root / "42" / "cgroup") << "0::/kubepods/burstable/pod" << kUid << "/" << kCid << "\n";
  auto cg = PodCgroupOfPid(42, root.string());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->pod_uid, kUid);
  EXPECT_FALSE(PodCgroupOfPid(43, root.string()));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace gslice::k8s
