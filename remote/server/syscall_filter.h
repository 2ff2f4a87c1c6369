// The system-call filter of a session and everything it starts (its probe, `gslice run`, the
// worker and the driver inside it; docs/security.md, "Remote GPUs"): a seccomp-BPF program
// installed by Confine (privilege.h) once the process is the client's identity with
// no_new_privs set, inherited by every thread and child after it and kept across execve.
//
// What it does, in order:
//   1. a call of another architecture than the one gslice-remoted was built for (i386 through
//      int 0x80 on x86-64, anything on a foreign ABI) kills the process, and so does an x32
//      call on x86-64: the numbers below mean nothing there;
//   2. calls a CUDA worker has no use for and that widen a confined process's reach fail with
//      EPERM (SyscallFilterRefused(): mounts, namespaces, tracing and reading other processes,
//      BPF and perf, keys, modules, the clock, io_uring, whose operations bypass this filter...);
//      clone with any namespace flag fails with EPERM; clone3 fails with ENOSYS, so that libc
//      falls back to clone, whose flags BPF can read (clone3's are behind a pointer);
//      personality fails with EPERM unless it only asks (0xffffffff) or sets the default (0);
//   3. everything else is allowed. A deny-list, not an allow-list: the set of calls the NVIDIA
//      driver makes changes between driver versions, and an allow-list would fail workers after
//      a driver update; the set measured with the driver (docs/remote.md, "System calls") holds
//      none of the refused calls.
//
// Measuring (--syscall-log FOLDER): StartSyscallLog installs a filter that hands every call to
// a supervisor thread of the calling process, which counts it by number and lets it go on
// (SECCOMP_RET_USER_NOTIF, SECCOMP_USER_NOTIF_FLAG_CONTINUE). Needs Linux 5.5 or later; gVisor
// has no such filters and the start fails there.
#pragma once

#include <string>
#include <vector>

namespace gslice::remote {

// --syscall-filter's value: "on" or "off"; false with *why for anything else.
bool ParseSyscallFilter(const std::string& text, bool* on, std::string* why);

// Installs the filter (above) on the calling thread and every thread and child it makes after.
// REQUIRES: no_new_privs set; the process single-threaded, or its other threads meant to stay
// unfiltered. False with *error when the kernel refuses it or the architecture has no filter.
bool InstallSyscallFilter(std::string* error);

// The names of the calls the filter refuses on this architecture (besides clone3, clone with
// namespace flags and personality other than a query), for the docs and the measurement.
std::vector<std::string> SyscallFilterRefused();

// Starts the measuring filter (above): from here on the calling thread and everything it starts
// hand each call to a supervisor thread made here, which keeps in FOLDER/syscalls-PID.txt (PID:
// the calling process's) one line "NAME COUNT" per call number seen, sorted by name, with
// " refused" after those the filter refuses; clone with namespace flags counts apart as
// "clone(namespace)", personality other than a query or the default as "personality(set)".
// The file is rewritten before a new call's first use goes on, at each exit_group and once a
// second while calls come: the names are complete, the counts at most a second behind.
// REQUIRES: no_new_privs set; single-threaded; at most once per process.
bool StartSyscallLog(const std::string& folder, std::string* error);

// The name of system call `nr` of this architecture, or "" when it has none.
const char* SyscallName(long nr);

}  // namespace gslice::remote
