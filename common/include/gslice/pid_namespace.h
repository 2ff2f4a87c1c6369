// Process identity across pid namespaces (containers). A process in a container knows itself
// by a container-local pid; the node ledger records that pid together with the inode of its
// pid namespace (/proc/self/ns/pid) and its start time, and a reader in another namespace
// (gsliced on the host) maps that triple to the pid it sees with PidResolver.
#pragma once

#include <cstdint>
#include <map>  // PidResolver only (src/pid_resolver.cc); the rest is libc (src/pid_namespace.cc)
#include <string>
#include <tuple>

namespace gslice {

// The inode of /proc/self/ns/pid: the calling process's pid namespace. 0 when /proc cannot
// tell (not mounted, or no permission), which readers treat as "unknown namespace".
uint64_t SelfPidNamespace();

// Maps (pid namespace, pid in that namespace, start time) to the pid as the proc mount at
// proc_root numbers it — with the default "/proc", the pid the caller sees. Same namespace
// as proc_root's own (proc_root/self/ns/pid): the pid as is (when it is alive with that
// start time). Otherwise it scans proc_root/<p>/: `NSpid:` in status gives p's pid in each
// nested namespace (the last field is its pid in its own, innermost namespace), ns/pid
// names that namespace ("pid:[inode]"), and field 22 of stat is the start time.
//
// A hit is cached and re-checked with one read of stat; a miss rescans, at most once per
// min_rescan_ns (misses in between return 0), and one scan indexes every process it reads.
// REQUIRES: external synchronization (one resolver per thread, or a lock around it).
class PidResolver {
 public:
  explicit PidResolver(std::string proc_root = "/proc", int64_t min_rescan_ns = 200'000'000);

  // The pid as proc_root numbers it; 0 when the process is not visible there (another
  // namespace's processes are invisible to a process inside a container), gone, or its start
  // time differs (start_time 0: not checked).
  uint32_t Resolve(uint64_t pid_ns, uint32_t pid, uint64_t start_time);

  // proc_root's own pid namespace (0 if unreadable).
  uint64_t own_namespace() const { return own_ns_; }

 private:
  struct Seen {
    uint32_t outer_pid;
    uint64_t start_time;
  };
  bool StartTimeIs(uint32_t outer_pid, uint64_t start_time) const;
  void Rescan();

  std::string root_;
  int64_t min_rescan_ns_;
  uint64_t own_ns_ = 0;
  int64_t last_scan_ns_ = 0;
  bool scanned_ = false;
  std::map<std::pair<uint64_t, uint32_t>, Seen> index_;  // (namespace, inner pid) -> seen
};

// Who a pid is, the other way round from PidResolver::Resolve: for pid as proc_root numbers
// it, its pid namespace (ns/pid), its pid in that, innermost namespace (the last field of
// NSpid; the pid as is when the line is missing and it shares proc_root's namespace) and its
// start time. False when it is gone, a zombie, or cannot be read.
struct PidIdentity {
  uint64_t pid_ns = 0;
  uint32_t pid = 0;
  uint64_t start_time = 0;
};
bool IdentifyPid(const std::string& proc_root, uint32_t pid, PidIdentity* out);

// Reads a /proc/<pid>/stat file: its state letter (field 3) and start time (field 22, clock
// ticks since boot, the same in every pid namespace). False when it cannot be read.
bool ReadProcStat(const char* stat_path, char* state, uint64_t* start_time);

// The last field of the `NSpid:` line of a /proc/<pid>/status file: the pid in the process's
// own, innermost namespace. False when it cannot be read (kernels before 4.1 lack the line).
bool ReadInnermostPid(const char* status_path, uint32_t* pid);

// The namespace named by a readlink of */ns/pid ("pid:[4026531836]") or, when the link
// cannot be read as such, the path's inode. 0 on error.
uint64_t PidNamespaceAt(const char* ns_path);

}  // namespace gslice
