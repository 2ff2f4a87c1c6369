// gsliced's configuration: one table of options (config.cc: kOptions) that the TOML
// loader, `--set key=value`, `gsliced --print-config` and docs/daemon.md all follow.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "status.h"

namespace gslice {

struct DaemonConfig {
  std::string socket;            // unix socket of the API
  uint32_t socket_mode = 0660;   // its permission bits: who may call
  std::string socket_group;      // its group, if set
  std::string database;          // SQLite file
  std::string ledger;            // node ledger path
  std::string suspend_board;     // suspend board directory; empty: $GSLICE_SUSPEND_BOARD or default
  std::string nvml_library;      // what dlopen loads
  std::string driver_library;    // CUDA driver for checkpoints; empty: libcuda.so.1
  std::string tcp;               // "host:port" or empty
  bool tcp_allow_remote = false; // tcp may bind a non-loopback address
  std::string token_file;        // bearer token for TCP; its holder is an admin
  std::string admin_group;       // members may change every slice (root always may)
  std::string slice_reads;       // "open" or "owner" (SliceReads)
  int64_t sample_interval_ms = 1000;
  int64_t history_seconds = 600;
  int64_t api_threads = 256;            // connections served at once, per listener
  int64_t api_connections_per_client = 128; // per peer uid (unix) or IP address (TCP)
  int64_t api_request_timeout_s = 10;   // a whole request must arrive within this
  int64_t api_idle_timeout_s = 30;      // a keep-alive connection may idle this long
  uint64_t max_body_bytes = 65536;
  std::string default_project;
  // Shares of the node's slice table (Registry::Options::shares); 0: no limit.
  int64_t slices_per_user = 16;
  int64_t slices_per_project = 32;
  int64_t slices_reserved_for_admins = 8;
  // NVIDIA MPS as the compute-sharing substrate (daemon/mps_service.h, docs/compute.md).
  std::string mps;            // "auto", "on" or "off"
  std::string mps_classes;    // "one" or "mixed" (mps_plan.h)
  std::string mps_control;    // nvidia-cuda-mps-control: a path, or a name on $PATH
  std::string mps_directory;  // the GPUs' pipe and log folders
  // Pod labels for GPU processes (daemon/pod_resolver.h); off without a node name.
  std::string kubernetes_node;        // empty: $NODE_NAME
  std::string kubernetes_apiserver;   // empty: in-cluster
  std::string kubernetes_token_file;
  std::string kubernetes_ca_file;
  std::string kubernetes_proc_root;
  int64_t kubernetes_refresh_seconds = 60;
  int64_t kubernetes_retry_seconds = 10;
};

// What a caller who is not an admin may read of slices that are not its own (slice_reads):
// kOpen, everything (one team's node); kOwner, nothing: its own slices, events and history,
// the GPUs' totals, and 404 for another's slice as for one that does not exist. Admins (root,
// admin_group, the token's holder) read everything under both.
enum class SliceReads { kOpen, kOwner };

// "open" or "owner"; false for anything else.
bool ParseSliceReads(std::string_view text, SliceReads* out);

// The defaults, as the option table states them.
DaemonConfig DefaultConfig();

// Reads a TOML file over the defaults. Keys with a dot ("kubernetes.node") may also be
// written as a table ([kubernetes] node = ...). Errors name the file, line and key, and what is
// expected ("gsliced.toml:3: sample_interval_ms: expected an integer from 100 to 60000").
Result<DaemonConfig> LoadConfigFile(const std::string& path, DaemonConfig base);

// Applies "key=value" (the value as it would be written in TOML, quotes optional for
// strings) to `config`.
Status ApplyOverride(const std::string& assignment, DaemonConfig* config);

// Checks what no single option can: tcp needs a token, loopback unless allowed, etc.
// Looks at nothing outside the configuration itself.
Status ValidateConfig(const DaemonConfig& config);

// Checks what the configuration names on this machine: default_project is a valid project
// name, socket_group and admin_group exist, token_file is a readable regular file of mode
// 0600 (or stricter), the socket path is free or a socket, and the folders of socket,
// database, ledger and suspend_board exist or can be created. `gsliced --check-config` and the start run it.
Status CheckReferences(const DaemonConfig& config);

// Refuses a socket path that names anything but a socket (or nothing): gsliced replaces a
// stale socket, never a file.
Status CheckSocketPath(const std::string& path);

// A commented TOML file with every option at its default: `gsliced --print-config`.
std::string DocumentedDefaults();

// Reads the token file: one line, at least 16 characters; refuses a file others may read.
Result<std::string> ReadToken(const std::string& path);

}  // namespace gslice
