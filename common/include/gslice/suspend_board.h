// The suspend board: shared memory through which the shim's resume gate and gsliced's suspend
// service talk about one process each. This header is the ONE definition of its layout and of
// who may write what (docs/suspend.md explains the protocol).
//
// The board is a directory (GSLICE_SUSPEND_BOARD, default /dev/shm/gslice-suspend). The OS
// enforces who writes what through the owners and modes of its files:
//
//   D/                   root 0755   made by gsliced, the suspend agent or the device plugin
//   D/service            root 0644   SuspendServiceHeader: which service runs, its heartbeat
//   D/gates/             root 0755
//   D/gates/P            root 0644   SuspendGatesLayout: the service's side of partition P
//   D/shim/              root 1777   (sticky) partitions of host processes
//   D/shim/uid-N         uid N 0600  SuspendPartitionLayout: the shim's side of uid N's processes
//   D/shim/uid-N.X       uid N 0600  the same, shared by uid N's processes while uid-N is taken
//   D/pods/              root 0700   partitions of containers, made by the device plugin
//   D/pods/k8s-S         root 0666   the container of slice S; reached only through its bind mount
//
// A partition's entry i and its gates file's entry i describe one process. The shim claims
// entries in its own partition only (a host user's processes share one partition per uid: the
// OS cannot keep two processes of one user apart - either may ptrace the other - so nothing
// finer would hold; a container gets its own whatever uid it runs as). It maps the gates file
// and D/service read-only: futexes work on read-only shared mappings (FUTEX_WAIT and FUTEX_WAKE
// only read the word). The service never maps a partition (its owner could truncate it under
// a SIGBUS): it reads entries with pread, and acts on an entry only after checking that the
// process it names maps that partition writable (/proc/PID/maps), so an entry naming somebody
// else's process is ignored.
//
// Trust: the board directory must be owned by root or by the caller and writable by nobody
// else; D/service, D/gates/* and the folders must belong to the board's owner; uid-N and
// uid-N.X to uid N with mode 0600; a container's partition to the caller or the board's owner.
// Every name is opened relative to the board's directory descriptor with O_NOFOLLOW, created
// with O_EXCL, and checked with fstat before use.
//
// Taken names. shim/ is writable by everyone, so another user can make uid-N before uid N's
// first process does (a file, a link, a directory of theirs). Nothing of uid N's may depend on
// that name, and nothing may be left behind by working around it:
//   - the shim of uid N then joins uid N's fallback partition, a uid-N.X of its own (made when
//     there is none, as uid-N.<pid>-<tag>), so all its processes share one, and says so
//     (notice());
//   - the service serves every uid-N.X of uid N's like uid-N, and removes the name taken in
//     shim/ (any uid-N[.X] not owned by N): it makes the object root's first (so its maker can
//     no longer swap something else in under the name), checks that it is still at the name,
//     then unlinks it and logs the taker's uid. An object with other names (hard links) is left
//     where it is: making it root's would take it from whoever owns those names;
//   - a fallback partition is removed (by the service, or by a later process of uid N that
//     falls back) once no process holds it. Presence: each process holds a shared lock on the
//     partition's presence byte for its lifetime, taken right after opening and followed by a
//     check that the file still has its name (nlink 1); a remover takes that byte exclusively,
//     checks that no entry's lock byte is held, and only then unlinks. So an opener either
//     keeps the remover off or sees the file gone and opens another; a partition is never
//     removed under a process that uses it.
//
// Writers (one per field; a process killed at any point blocks nobody):
//   shim (partition):   owner, start_time, pid_ns, claimed_ns, activity, resume_request,
//                       attached, mem_request_*, header.doorbell, header.high_water
//   service (gates):    owner, gate, mem_reply*, move_reply*
//   gslice move (gates, root only): move_owner, move_to_gpu, move_seq
//   service (D/service): service_pid, service_pid_ns, heartbeat_ns, attach, wake
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace gslice {

inline constexpr uint32_t kSuspendServiceMagic = 0x53535347;    // "GSSS"
inline constexpr uint32_t kSuspendPartitionMagic = 0x50535347;  // "GSSP"
inline constexpr uint32_t kSuspendGatesMagic = 0x47535347;      // "GSSG"
// 3: a directory of per-owner files (2 was one file, mode 0666, that everyone wrote).
inline constexpr uint32_t kSuspendBoardVersion = 3;
inline constexpr int kSuspendPartitionEntries = 4096;  // per partition
inline constexpr size_t kSuspendPartitionNameMax = 96;
// Partitions of one uid the service serves (a second name only exists when the first was
// taken by somebody else: see SuspendShimBoard::Open).
inline constexpr int kSuspendPartitionsPerUid = 4;

// gate values.
inline constexpr uint32_t kGateOpen = 0;
inline constexpr uint32_t kGateClosed = 1;  // suspending, suspended or resuming: calls wait

// move_reply values.
inline constexpr uint32_t kMoveReplyMoved = 1;    // restored on the target GPU
inline constexpr uint32_t kMoveReplyRefused = 2;  // not moved (the service logs why); it runs where it was

// mem_reply values.
inline constexpr uint32_t kMemReplyFreed = 1;    // memory was freed: retry the allocation
inline constexpr uint32_t kMemReplyRefused = 2;  // nothing can be freed: the allocation fails

// A service whose heartbeat is older than this is gone (killed: a clean stop clears the pid).
inline constexpr int64_t kSuspendServiceStaleNs = 5'000'000'000;

// The owner word: the owner's pid (in its own namespace) in bits 0..31, a random claim tag
// in bits 32..55 (a CAS on a word read earlier fails once the entry went to another owner
// with the same pid: pid 1 is in every container), and kBoardOwnerClaiming while the claimer
// fills the entry in. 0: free. The tag also tells the service that an entry changed owner.
inline constexpr uint64_t kBoardOwnerClaiming = uint64_t{1} << 56;
inline constexpr uint64_t BoardOwnerWord(uint32_t pid, uint32_t tag) {
  return static_cast<uint64_t>(pid) | (static_cast<uint64_t>(tag & 0xffffffu) << 32);
}
inline constexpr uint32_t BoardOwnerPid(uint64_t word) { return static_cast<uint32_t>(word); }
inline constexpr bool BoardOwnerLive(uint64_t word) { return word != 0 && (word & kBoardOwnerClaiming) == 0; }

// D/service.
struct SuspendServiceHeader {
  uint32_t magic;  // kSuspendServiceMagic
  uint32_t version;
  uint64_t size;
  std::atomic<uint32_t> initialised;
  // Futex word the service sleeps on between ticks. Shims wake it (FUTEX_WAKE on their
  // read-only mapping) after bumping their partition's doorbell; only the service changes it.
  std::atomic<uint32_t> wake;
  // kGateOpen, or kGateClosed while some live process has not yet found its gates file: the
  // gate of such a process points here, so its next call looks for the file (attach).
  std::atomic<uint32_t> attach;
  uint32_t reserved0;
  std::atomic<uint64_t> service_pid;     // the suspend service running now (0: none), in
  std::atomic<uint64_t> service_pid_ns;  // this pid namespace
  std::atomic<int64_t> heartbeat_ns;     // its CLOCK_MONOTONIC, renewed every second
  uint8_t reserved[4096 - 56];
};
static_assert(sizeof(SuspendServiceHeader) == 4096);

// One process, the shim's side (a partition).
struct SuspendShimEntry {
  std::atomic<uint64_t> owner;       // 0 free, else BoardOwnerWord (claimed by the shim)
  std::atomic<uint64_t> start_time;  // the owner's /proc start time (pid reuse)
  std::atomic<uint64_t> pid_ns;      // inode of the owner's /proc/self/ns/pid (0: unknown)
  std::atomic<int64_t> claimed_ns;   // CLOCK_MONOTONIC of the claim (kClaimGraceNs)
  std::atomic<uint64_t> activity;    // gated calls passed (only "has it moved" matters)
  std::atomic<uint32_t> resume_request;  // 1: a call of the owner waits at the closed gate
  std::atomic<uint32_t> attached;        // 1: the owner reads its gate in the gates file
  // A guaranteed allocation that failed: seq is bumped after bytes and gpu are written, and
  // stays until the service answered (seq precedes them so that a reader copying in address
  // order sees a new seq only with the fields written before it).
  std::atomic<uint64_t> mem_request_seq;
  std::atomic<uint64_t> mem_request_bytes;
  uint8_t mem_request_gpu[16];
  uint8_t reserved[48];
};
static_assert(sizeof(SuspendShimEntry) == 128);

struct SuspendPartitionHeader {
  uint32_t magic;  // kSuspendPartitionMagic
  uint32_t version;
  uint64_t size;
  std::atomic<uint32_t> initialised;
  std::atomic<uint32_t> doorbell;    // bumped by a shim that wants the service's attention
  std::atomic<uint32_t> high_water;  // 1 + the highest entry index ever claimed
  uint8_t reserved[4096 - 28];
};
static_assert(sizeof(SuspendPartitionHeader) == 4096);

struct SuspendPartitionLayout {
  SuspendPartitionHeader header;
  SuspendShimEntry entries[kSuspendPartitionEntries];
};

// One process, the service's side (a gates file; entry i pairs with the partition's entry i).
// Every field speaks to the owner word in `owner`: the service resets them and sets `owner`
// when it first sees an entry's new owner, and a shim ignores them while `owner` is not its
// own (a gate its entry's previous owner left closed does not stop it).
struct SuspendGateEntry {
  std::atomic<uint64_t> owner;          // service
  std::atomic<uint32_t> gate;           // service: kGateOpen / kGateClosed (futex word)
  std::atomic<uint32_t> mem_reply;      // service: kMemReply* (futex word for the shim)
  std::atomic<uint64_t> mem_reply_seq;  // service: = mem_request_seq when answered
  // `gslice move` (root): restore the process on another GPU.
  std::atomic<uint64_t> move_owner;     // the owner word the request is for
  std::atomic<uint64_t> move_seq;       // ++ per request (after move_owner and move_to_gpu)
  uint8_t move_to_gpu[16];              // target GPU UUID
  std::atomic<uint64_t> move_reply_seq;  // service: = move_seq when answered
  std::atomic<uint32_t> move_reply;      // service: kMoveReply* (futex word for the CLI)
  uint32_t reserved0;
  uint8_t reserved[56];
};
static_assert(sizeof(SuspendGateEntry) == 128);

struct SuspendGatesHeader {
  uint32_t magic;  // kSuspendGatesMagic
  uint32_t version;
  uint64_t size;
  std::atomic<uint32_t> initialised;
  uint32_t reserved0;
  // The partition file these gates pair with (a partition removed and made again under the
  // same name gets new gates; a shim attaches only to gates of its own partition).
  uint64_t partition_dev;
  uint64_t partition_ino;
  uint8_t reserved[4096 - 40];
};
static_assert(sizeof(SuspendGatesHeader) == 4096);

struct SuspendGatesLayout {
  SuspendGatesHeader header;
  SuspendGateEntry entries[kSuspendPartitionEntries];
};

// The liveness lock bytes of a partition's entries: file offsets past the mapped layout
// (fcntl locks need no data there). Only processes that may write the partition can lock.
inline constexpr int64_t kSuspendPartitionLockBase = static_cast<int64_t>(sizeof(SuspendPartitionLayout));
inline constexpr int64_t SuspendEntryLockByte(int entry) { return kSuspendPartitionLockBase + 64 + entry; }
// Held shared by every process that has the partition open (see "Taken names" above).
inline constexpr int64_t kSuspendPartitionPresenceByte = kSuspendPartitionLockBase;

// Is name usable as a partition's file name ([A-Za-z0-9._-], not starting with '.', short)?
bool ValidPartitionName(const char* name);
// The partition of this process when none is given: "uid-<effective uid>".
std::string DefaultPartitionName();

// Makes the board at path, or checks the one there: the directory, its folders and
// D/service, owned by the caller (root in production), with the modes above. A path that is
// a symbolic link, a file (the one-file board of version 2), owned by somebody else or
// writable by others is refused with *error saying what to do. Idempotent.
bool CreateSuspendBoard(const char* path, std::string* error);

// Root (the device plugin): makes the partition of a container, D/pods/NAME (mode 0666; only
// the container reaches it, through its bind mount) and its gates D/gates/NAME, so both exist
// before the container starts. NAME must not start with "uid-". Idempotent.
bool CreatePodPartition(const char* board, const char* name, std::string* error);

// Is `pid` (as proc_root numbers it) mapping the file (dev, ino) shared and writable? The
// service's proof that a partition entry naming pid was written by that process.
bool ProcessMapsFileWritable(const std::string& proc_root, int pid, uint64_t dev, uint64_t ino);

// The shim's view: its partition (read-write), its gates (read-only, once the service made
// them) and D/service (read-only). Move-only in spirit: not copyable.
class SuspendShimBoard {
 public:
  SuspendShimBoard() = default;
  ~SuspendShimBoard();
  SuspendShimBoard(const SuspendShimBoard&) = delete;
  SuspendShimBoard& operator=(const SuspendShimBoard&) = delete;

  // Opens the board at path and this process's partition in it: `partition` (a container's,
  // from GSLICE_SUSPEND_PARTITION), or nullptr/"" for uid-<euid>, made when missing. When that
  // name is taken by something the caller may not trust (another owner, a symbolic link, a
  // directory), the user's fallback uid-<euid>.X is joined or made instead, and notice() says
  // so. Holds the partition's presence byte until the process ends. Never creates the board
  // itself. False with *error (and errno) when the board is missing, untrusted or of another
  // version.
  bool Open(const char* path, const char* partition, std::string* error);
  bool is_open() const { return part_ != nullptr; }
  const char* partition_name() const { return name_; }
  // After Open: why the fallback partition is used (the taken name and who holds it), for the
  // log; empty when the partition is the usual one.
  const std::string& notice() const { return notice_; }
  SuspendPartitionLayout* partition() const { return part_; }
  const SuspendGatesLayout* gates() const { return gates_; }
  const SuspendServiceHeader* service() const { return service_; }

  // Claims an entry for the caller (pid, start_time: the caller's own, in its namespace): the
  // one it already owns, else a free one or one whose owner is dead. CAS, then the entry's
  // lock byte, reset, publish. nullptr when the partition is full.
  SuspendShimEntry* Claim(uint32_t pid, uint64_t start_time);
  // The live entry of pid in pid namespace pid_ns, or nullptr.
  SuspendShimEntry* Find(uint64_t pid_ns, uint32_t pid) const;
  // Is the entry's owner alive (lock byte and, in our namespace, its pid)? Free: false.
  bool OwnerAlive(const SuspendShimEntry& e) const;
  // Frees entries whose owner is dead; returns how many.
  int Reap();
  int IndexOf(const SuspendShimEntry& e) const { return static_cast<int>(&e - part_->entries); }

  // Maps the gates file when the service has made it (true once mapped).
  bool Attach();
  bool attached() const { return gates_ != nullptr; }
  // The word a gated call of entry e loads: its gate once attached, else D/service's attach word.
  const std::atomic<uint32_t>* GateWord(const SuspendShimEntry& e) const;
  // The gates entry paired with e, or nullptr before Attach.
  const SuspendGateEntry* GateOf(const SuspendShimEntry& e) const;

  // Is a suspend service serving the board (its pid set, its heartbeat fresh)?
  bool ServiceAlive() const;
  // Bumps the partition's doorbell and wakes the service.
  void RingDoorbell();

 private:
  void Close();
  SuspendPartitionLayout* part_ = nullptr;
  const SuspendGatesLayout* gates_ = nullptr;
  const SuspendServiceHeader* service_ = nullptr;
  int dir_fd_ = -1;
  int part_fd_ = -1;   // holds this process's lock bytes (open file description locks)
  int probe_fd_ = -1;  // a second open file: F_OFD_GETLK through it sees part_fd_'s locks too
  uint64_t part_dev_ = 0, part_ino_ = 0;
  uid_t board_owner_ = 0;
  char name_[kSuspendPartitionNameMax + 1] = {};
  std::string notice_;
};

bool ServiceHeaderAlive(const SuspendServiceHeader* h);

// The service's view (and `gslice move`'s, as root): every partition, read with pread, and
// their gates, mapped read-write.
class SuspendServiceBoard {
 public:
  struct Partition {
    std::string name;
    bool pod = false;        // in pods/ (else shim/)
    int fd = -1;             // read-only: pread and lock probes
    uint64_t dev = 0, ino = 0;
    uid_t uid = 0;           // the file's owner
    SuspendGatesLayout* gates = nullptr;
    // Copies of entries [0, count) (count: the owner's high_water) as of the last Refresh.
    std::unique_ptr<SuspendShimEntry[]> entries;
    int count = 0;
    uint32_t doorbell = 0;
  };
  // An entry: (partition, index) and the owner word it had when read.
  struct Ref {
    int part = -1;
    int index = -1;
    uint64_t owner = 0;
  };

  SuspendServiceBoard() = default;
  ~SuspendServiceBoard();
  SuspendServiceBoard(const SuspendServiceBoard&) = delete;
  SuspendServiceBoard& operator=(const SuspendServiceBoard&) = delete;

  // The service: makes the board when missing (CreateSuspendBoard) and makes gates files for
  // new partitions. `gslice move` (manage = false): opens what is there, makes nothing.
  bool Open(const char* path, bool manage, std::string* error);
  bool is_open() const { return service_ != nullptr; }
  SuspendServiceHeader* header() const { return service_; }

  // Looks for new partitions (when a folder changed, at most every 100 ms unless forced),
  // makes or maps their gates, and reads every partition's entries. The service (manage) also
  // removes names taken in shim/ (a uid-N[.X] not owned by N) and logs who took them.
  void Refresh(bool force_scan = false);
  // The service (manage): forgets partitions whose file is gone, and removes fallback
  // partitions (uid-N.X) that no process holds, with their gates. True when it forgot any:
  // then every Ref taken before is void (indices moved). Never called by Refresh, so Refs
  // stay valid between two Prune calls.
  bool Prune();
  std::vector<Partition>& partitions() { return parts_; }
  const SuspendShimEntry& Entry(const Ref& r) const { return parts_[r.part].entries[r.index]; }
  SuspendGateEntry* Gate(const Ref& r) const;
  // Is the entry's owner (as last read) alive?
  bool Alive(const Ref& r) const;
  // Live entries as last read.
  std::vector<Ref> LiveEntries() const;
  // Rereads one entry (a pending memory request: its fields again, after its seq).
  bool Reread(const Ref& r, SuspendShimEntry* out) const;
  // The sum of the partitions' doorbells, read now.
  uint64_t Doorbells() const;

  // Makes the gates entry speak to r.owner (resetting it if it spoke to an earlier owner).
  void Own(const Ref& r);
  // Closes or opens r's gate (after Own) and wakes its waiters.
  void SetGate(const Ref& r, bool closed);
  // Keeps D/service's attach word closed while a live entry of a partition with gates has
  // not attached.
  void UpdateAttach();

  // Marks the board as served by this process, renews the heartbeat, and unmarks it.
  void SetService();
  void Heartbeat();
  void ClearService();
  bool ServiceAlive() const { return ServiceHeaderAlive(service_); }
  // Wakes a service sleeping in WaitForWork (Stop).
  void WakeService();
  // Sleeps until a shim rings or timeout_ms passes.
  void WaitForWork(uint32_t seen_wake, int timeout_ms);

 private:
  void Close();
  void Scan(int dir_fd, bool pod);
  bool AddPartition(int dir_fd, const char* name, bool pod);
  // shim/NAME is a uid-N[.X] not owned by N: remove it (see "Taken names").
  void RemoveTakenName(const char* name, uid_t named_uid);
  void DropPartition(size_t i);
  void RemoveOrphanGates();
  SuspendGatesLayout* MapGates(const Partition& p);
  void ReadPartition(Partition& p);

  SuspendServiceHeader* service_ = nullptr;
  int dir_fd_ = -1, shim_fd_ = -1, pods_fd_ = -1, gates_fd_ = -1;
  uid_t owner_ = 0;
  bool manage_ = false;
  int64_t last_scan_ns_ = 0;
  int64_t shim_mtime_ns_ = -1, pods_mtime_ns_ = -1;
  bool rescan_ = false;  // a taken name is not removed yet: look again at the next Refresh
  std::vector<Partition> parts_;
  // Files already logged as taken names left in place or as partitions not served (by
  // device and inode), so a scan does not repeat the line.
  std::set<std::pair<uint64_t, uint64_t>> logged_;
};

// Futex helpers on shared (non-private) words; the word may be mapped read-only.
// Waits while *word == expected, at most timeout_ms (<0: no limit). Spurious returns allowed.
void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
void FutexWakeAll(const std::atomic<uint32_t>* word);

}  // namespace gslice
