#include "config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace gslice {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = "/tmp/gslice-config-test-" + std::to_string(getpid()) + "-" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Config, DefaultsComeFromTheOptionTable) {
  DaemonConfig c = DefaultConfig();
  EXPECT_EQ(c.socket, "/run/gsliced/gsliced.sock");
  EXPECT_EQ(c.socket_mode, 0660u);
  EXPECT_EQ(c.max_body_bytes, 65536u);
  EXPECT_EQ(c.sample_interval_ms, 1000);
  // --print-config documents every default, and what it prints loads back unchanged.
  std::string path = WriteFile("defaults.toml", DocumentedDefaults());
  auto loaded = LoadConfigFile(path, DaemonConfig{});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->socket, c.socket);
  EXPECT_EQ(loaded->database, c.database);
  EXPECT_EQ(loaded->api_threads, c.api_threads);
  unlink(path.c_str());
}

TEST(Config, ReadsAFile) {
  std::string path = WriteFile("ok.toml",
                               "socket = \"/tmp/x.sock\"\nsocket_mode = \"0600\"\n"
                               "max_body_bytes = \"1MiB\"\nsample_interval_ms = 250\n"
                               "tcp = \"127.0.0.1:7470\"\ntoken_file = \"/tmp/t\"\n");
  auto c = LoadConfigFile(path, DefaultConfig());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->socket, "/tmp/x.sock");
  EXPECT_EQ(c->socket_mode, 0600u);
  EXPECT_EQ(c->max_body_bytes, 1u << 20);
  EXPECT_EQ(c->sample_interval_ms, 250);
  EXPECT_TRUE(ValidateConfig(c.value()).ok());
  unlink(path.c_str());
}

TEST(Config, KubernetesKeysAsATableDottedOrOverridden) {
  DaemonConfig d = DefaultConfig();
  EXPECT_EQ(d.kubernetes_node, "");
  EXPECT_EQ(d.kubernetes_proc_root, "/proc");
  EXPECT_EQ(d.kubernetes_retry_seconds, 10);
  std::string path = WriteFile("k8s.toml",
                               "socket = \"/tmp/x.sock\"\n[kubernetes]\nnode = \"node-a\"\n"
                               "apiserver = \"http://127.0.0.1:8001\"\nretry_seconds = 2\n");
  auto c = LoadConfigFile(path, DefaultConfig());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->kubernetes_node, "node-a");
  EXPECT_EQ(c->kubernetes_apiserver, "http://127.0.0.1:8001");
  EXPECT_EQ(c->kubernetes_retry_seconds, 2);
  EXPECT_EQ(c->kubernetes_proc_root, "/proc");
  unlink(path.c_str());
  path = WriteFile("k8s-dotted.toml", "kubernetes.proc_root = \"/host/proc\"\n");
  c = LoadConfigFile(path, DefaultConfig());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->kubernetes_proc_root, "/host/proc");
  unlink(path.c_str());
  path = WriteFile("k8s-bad.toml", "[kubernetes]\nnode = \"n\"\nnodes = \"n\"\n");
  c = LoadConfigFile(path, DefaultConfig());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(":3: unknown key 'kubernetes.nodes'"), std::string::npos)
      << c.status().message();
  unlink(path.c_str());
  ASSERT_TRUE(ApplyOverride("kubernetes.node=node-b", &d).ok());
  EXPECT_EQ(d.kubernetes_node, "node-b");
  EXPECT_FALSE(ApplyOverride("kubernetes.retry_seconds=0", &d).ok());
  ASSERT_TRUE(ApplyOverride("kubernetes.proc_root=\"\"", &d).ok());
  EXPECT_NE(ValidateConfig(d).message().find("kubernetes.proc_root"), std::string::npos);
}

TEST(Config, ErrorsNameTheLineAndTheKey) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"socket = \"/a\"\n\nsampel_interval_ms = 5\n", ":3: unknown key 'sampel_interval_ms'"},
      {"socket = \"/a\"\nsample_interval_ms = 5\n", ":2: sample_interval_ms: expected an integer from 100 to 60000"},
      {"socket = 7\n", ":1: socket: expected a string"},
      {"max_body_bytes = \"lots\"\n", ":1: max_body_bytes: 'lots' is not a size"},
      {"socket_mode = \"0999\"\n", ":1: socket_mode: '0999' is not octal"},
      {"socket = \"/a\n", "not valid TOML"},
  };
  for (const Case& c : cases) {
    std::string path = WriteFile("bad.toml", c.text);
    auto r = LoadConfigFile(path, DefaultConfig());
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    unlink(path.c_str());
  }
}

TEST(Config, ValidationAndOverrides) {
  DaemonConfig c = DefaultConfig();
  ASSERT_TRUE(ApplyOverride("tcp=0.0.0.0:7470", &c).ok());
  EXPECT_NE(ValidateConfig(c).message().find("not loopback"), std::string::npos);
  ASSERT_TRUE(ApplyOverride("tcp_allow_remote=true", &c).ok());
  EXPECT_NE(ValidateConfig(c).message().find("token_file"), std::string::npos);
  ASSERT_TRUE(ApplyOverride("tcp=127.0.0.1:99999", &c).ok());
  ASSERT_TRUE(ApplyOverride("token_file=/tmp/t", &c).ok());
  EXPECT_NE(ValidateConfig(c).message().find("port"), std::string::npos);
  EXPECT_FALSE(ApplyOverride("nope=1", &c).ok());
  EXPECT_FALSE(ApplyOverride("api_threads=1", &c).ok());
  EXPECT_FALSE(ApplyOverride("api_threads", &c).ok());
  ASSERT_TRUE(ApplyOverride("socket=/tmp/bare.sock", &c).ok());
  EXPECT_EQ(c.socket, "/tmp/bare.sock");
}

TEST(Config, TokenFileMustBePrivateAndLongEnough) {
  std::string path = WriteFile("token", "0123456789abcdef0123\n");
  chmod(path.c_str(), 0644);
  EXPECT_FALSE(ReadToken(path).ok());
  chmod(path.c_str(), 0600);
  auto t = ReadToken(path);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t.value(), "0123456789abcdef0123");
  std::ofstream(path) << "short\n";
  EXPECT_FALSE(ReadToken(path).ok());
  unlink(path.c_str());
}

}  // namespace
}  // namespace gslice
