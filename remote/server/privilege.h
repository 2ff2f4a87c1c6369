// What a session process gives up before it runs anything for its client (docs/security.md,
// "Remote GPUs"): the session, its probe and its worker (started by the session, through
// `gslice run`) run as the client's identity, never the server's.
//
// Confine(), called once in a session process as soon as it knows whom it serves:
//   1. where the server runs as root: a mount namespace of the process's own (every mount
//      private, so that nothing propagates back to the node), in which each of `hidden` (the
//      server's key, token and tenants files) is covered by `placeholder`, an empty file mode
//      0000 owned by root: opening it as the identity fails with EACCES, and reading it as root
//      gives nothing;
//   2. every capability dropped from the bounding set, supplementary groups cleared, the
//      identity's gid and uid set (real, effective and saved), so that the permitted and
//      effective capabilities are empty (uid 0, allowed only by --allow-root-tenant, keeps
//      them: such a tenant is trusted);
//   3. no_new_privs set: nothing the process or its children execute gains privilege
//      (set-user-ID programs, file capabilities);
//   4. the system-call filter (syscall_filter.h), unless --syscall-filter off: from here on
//      the process and everything it starts cannot reach the calls it refuses (with
//      --syscall-log, the measuring filter goes in first).
// Each step's outcome is checked (the capability sets read back): a session that cannot
// confine itself refuses its client and starts nothing.
//
// Where the server does not run as root, the identity must be the server's own (tenants.h
// refuses others at load, the session refuses other unix peers), there is no private mount
// namespace (an unprivileged process cannot make one that hides files from itself), and only
// no_new_privs is set.
//
// After Confine the process is not dumpable (the kernel's rule after a change of uid): a worker
// of the same uid cannot read the session's memory (the TLS key it still holds) through ptrace
// or /proc. Nothing may set PR_SET_DUMPABLE back.
//
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace gslice::remote {

struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
};

struct Confinement {
  Identity identity;
  std::vector<std::string> hidden;  // absolute paths of regular files
  std::string placeholder;          // MakePlaceholder's file
  bool syscall_filter = true;       // step 4
  std::string syscall_log;          // a folder: measure the calls there (syscall_filter.h)
};

// Makes the placeholder (an empty file mode 0000) in a new folder mode 0700 under /run or /tmp.
// Only where this process runs as root; "" otherwise (nothing to hide with). *folder is to be
// removed (RemovePlaceholder) at exit.
bool MakePlaceholder(std::string* file, std::string* folder, std::string* error);
void RemovePlaceholder(const std::string& file, const std::string& folder);

// Confines the calling process for good (above). REQUIRES: single-threaded (setuid and the
// mount namespace apply to the calling thread's process only when no other thread runs; the
// filter to every thread only when it is the only one).
bool Confine(const Confinement& c, std::string* error);

}  // namespace gslice::remote
