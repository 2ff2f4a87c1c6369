// Mappings of files that another user can shrink.
//
// A MAP_SHARED mapping of a file faults with SIGBUS wherever the file no longer reaches: the
// kernel lets whoever may write a file truncate it (write permission is enough, whatever the
// owner or the mode of the directory), and it unmaps the truncated pages from every process
// that maps them. The node ledger's usage files are written by their slice's processes, so a
// tenant that truncates its own usage file would kill every other process that maps it: the
// daemon, the device plugin, tools run by root.
//
// The guard makes such a process survive: it installs one SIGBUS handler that, when the
// faulting address lies in a range registered here, replaces the whole range with zero-filled
// anonymous memory of the same protection (MAP_FIXED, atomic per page) and marks the range
// shrunk. The faulting instruction then runs again and reads (or writes) private zeros; the
// owner of the range sees MappingShrunk() and drops it (docs/ledger.md: the usage file is
// refused until it has its size again). Any other SIGBUS goes to the handler that was there
// before, or kills the process as it would have.
//
// Only gslice's own programs install it (gsliced, the device plugin, the DRA driver, the CLI,
// the suspend agent install it at start; a Ledger that is about to map another user's usage
// file installs it where nobody forbade it): never the shim, which lives in applications
// whose signal handlers are theirs and calls ForbidShrinkGuard() first. A process without the
// guard does not map files another user can shrink (Ledger refuses them; ComputeWindow copies
// other slices' pages instead).
//
// Thread safety: everything here may be called from any thread. The handler takes no lock and
// makes one system call (mmap).
#pragma once

#include <cstddef>

namespace gslice {

// Installs the SIGBUS handler (once per process; later calls do nothing). False when
// sigaction fails or ForbidShrinkGuard() came first.
bool InstallShrinkGuard();
// For processes whose signal handlers belong to someone else (the shim, inside applications):
// InstallShrinkGuard fails from now on, and a guard installed already (inherited through
// fork) is removed: the SIGBUS action before it is restored. Call it before this process
// maps anything under the guard.
void ForbidShrinkGuard();
// Whether InstallShrinkGuard succeeded in this process.
bool ShrinkGuardInstalled();

// Registers [addr, addr + len) (a whole mapping, page-aligned, prot as mapped). Returns its
// id, or -1 when the guard is not installed or every one of its kMaxGuardedRanges entries is
// taken (then do not map the file).
inline constexpr int kMaxGuardedRanges = 1024;
int GuardMapping(void* addr, size_t len, int prot);
// Forgets a range (before it is unmapped). id -1 is ignored.
// REQUIRES: no thread still touches the range (it is about to be unmapped).
void UnguardMapping(int id);
// True once a fault in the range replaced it with zeros: what it shows is no longer the file.
bool MappingShrunk(int id);
// How many ranges were replaced since the process started (for logs and tests).
long ShrunkMappingCount();

}  // namespace gslice
