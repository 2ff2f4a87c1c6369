// Liveness of the owner of an entry in a node-wide shared file (the ledger, the suspend
// board) across pid namespaces. The owner holds an open-file-description lock (F_OFD_SETLK,
// write) on one byte of the file, past its mapped layout, for as long as it owns the entry;
// the kernel drops it when the last descriptor of that open file closes, which a killed
// process's exit does, in whatever pid namespace it ran. A judge asks with F_OFD_GETLK
// through a second open file of its own (the probe): OFD locks conflict between open files
// even of one process, so the probe sees its own process's locks too.
//
// An owner is alive iff its byte is locked AND, when the judge is in the owner's pid
// namespace, its pid is alive with the recorded start time (which catches a dead owner whose
// lock a forked child still holds). docs/ledger.md ("Liveness") has the whole rule.
#pragma once

#include <atomic>
#include <cstdint>

namespace gslice {

// Takes the write lock on byte offset of fd's open file. False when another open file holds
// it (or fd < 0 is not a file: then true, nothing to lock).
bool LockOwnerByte(int fd, int64_t offset);
// Drops it. fd < 0: nothing.
void UnlockOwnerByte(int fd, int64_t offset);
// Is the byte locked by any open file other than probe_fd's? probe_fd < 0 or a failed query:
// true (cannot tell: assume alive).
bool OwnerByteLocked(int probe_fd, int64_t offset);

// Opens path a second time as the probe for fd (the same inode) and checks that the kernel
// answers OFD lock queries there. -1 on failure (errno set).
int OpenOwnerProbe(const char* path, int fd);

// The liveness rule above. pid_ns: the owner's recorded namespace (0: unknown, the lock alone
// decides); self_ns: the judge's (SelfPidNamespace()); start_time 0: not checked.
bool OwnerAlive(int probe_fd, int64_t lock_byte, uint32_t pid, uint64_t pid_ns, uint64_t start_time,
                uint64_t self_ns);

// An entry being claimed whose lock byte is not held yet: alive while the claim is younger
// than kClaimGraceNs (ledger.h). claimed_ns is the claim's MonotonicNs(); 0 means the claimer
// died before stamping it, so the judge stamps it now and the grace starts from there.
bool ClaimWithinGrace(std::atomic<int64_t>& claimed_ns);

// A random claim tag, never 0, below 2^24: stored with an owner's pid so that a CAS on a word
// read earlier fails once the entry went to another owner with the same pid (pid 1 is in
// every container). A per-thread xorshift, no locks.
uint32_t OwnerClaimTag();
// The next value of that per-thread generator (backoff jitter).
uint64_t OwnerJitter();

}  // namespace gslice
