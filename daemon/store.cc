#include "store.h"

#include <sqlite3.h>

#include <ctime>
#include <filesystem>
#include <utility>

namespace gslice {
namespace {

// Migration N moves the schema from version N to N+1. Append only; never edit one that
// has shipped.
constexpr const char* kMigrations[] = {
    // 0 -> 1: the first schema.
    R"sql(
    CREATE TABLE projects (
      name TEXT PRIMARY KEY,
      memory_quota_bytes INTEGER NOT NULL DEFAULT 0,
      compute_quota REAL NOT NULL DEFAULT 0,
      priority INTEGER NOT NULL DEFAULT 0,
      created_at INTEGER NOT NULL
    );
    CREATE TABLE users (
      name TEXT PRIMARY KEY,
      created_at INTEGER NOT NULL
    );
    CREATE TABLE slices (
      name TEXT PRIMARY KEY,
      user TEXT NOT NULL,
      project TEXT NOT NULL,
      class TEXT NOT NULL,
      state TEXT NOT NULL,
      origin TEXT NOT NULL,
      created_at INTEGER NOT NULL
    );
    CREATE TABLE slice_gpus (
      slice TEXT NOT NULL REFERENCES slices(name) ON DELETE CASCADE,
      gpu_uuid TEXT NOT NULL,
      memory_limit_bytes INTEGER NOT NULL,
      compute_share REAL NOT NULL,
      PRIMARY KEY (slice, gpu_uuid)
    );
    CREATE TABLE events (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      time INTEGER NOT NULL,
      slice TEXT NOT NULL,
      kind TEXT NOT NULL,
      detail TEXT NOT NULL
    );
    )sql",
    // 1 -> 2: Kubernetes labels, idle reclaim and the reason of the last failed transition.
    R"sql(
    ALTER TABLE slices ADD COLUMN pod TEXT NOT NULL DEFAULT '';
    ALTER TABLE slices ADD COLUMN pod_namespace TEXT NOT NULL DEFAULT '';
    ALTER TABLE slices ADD COLUMN idle_timeout_s INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE slices ADD COLUMN last_error TEXT NOT NULL DEFAULT '';
    )sql",
    // 2 -> 3: who owns a slice: the caller's uid as the kernel told gsliced (-1: not known,
    // e.g. slices created before owners were recorded, by a token caller, or adopted).
    R"sql(
    ALTER TABLE slices ADD COLUMN owner_uid INTEGER NOT NULL DEFAULT -1;
    )sql",
    // 3 -> 4: a guaranteed slice's protection level, in thousandths of its solo speed (0: the
    // default, which every slice stored before had).
    R"sql(
    ALTER TABLE slices ADD COLUMN protect_permille INTEGER NOT NULL DEFAULT 0;
    )sql",
    // 4 -> 5: a slice's compute cap per GPU (0: none), which `gslice set --cap` changes.
    R"sql(
    ALTER TABLE slice_gpus ADD COLUMN compute_cap REAL NOT NULL DEFAULT 0;
    )sql",
    // 5 -> 6: the client a remote slice serves (gslice-remoted's workers; '': a local slice).
    R"sql(
    ALTER TABLE slices ADD COLUMN remote_client TEXT NOT NULL DEFAULT '';
    )sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

// A prepared statement that finalizes itself.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool prepared() const { return rc_ == SQLITE_OK; }
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  int Step() { return sqlite3_step(stmt_); }
  std::string Text(int col) {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  double Real(int col) { return sqlite3_column_double(stmt_, col); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

Status DbError(sqlite3* db, const std::string& what) {
  return Status::Internal("database: " + what + ": " + sqlite3_errmsg(db));
}

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace

int Store::CurrentSchemaVersion() { return kSchemaVersion; }

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::exists(parent, ec)) {
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return Status::Internal("database " + path + ": cannot create " + parent.string() + ": " +
                              ec.message());
    }
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return Status::Internal("database " + path + ": " + msg +
                            " (set `database` in the config to a writable path)");
  }
  std::unique_ptr<Store> store(new Store(db));
  sqlite3_busy_timeout(db, 5000);
  for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
                             "PRAGMA foreign_keys=ON"}) {
    Status s = store->Exec(pragma);
    if (!s.ok()) return Status::Internal("database " + path + ": " + s.message());
  }
  Status s = store->Migrate();
  if (!s.ok()) return Status::Internal("database " + path + ": " + s.message());
  return store;
}

Store::~Store() { sqlite3_close(db_); }

Status Store::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Status::Internal(msg);
  }
  return Status::Ok();
}

Status Store::Migrate() {
  Stmt version(db_, "PRAGMA user_version");
  if (!version.prepared() || version.Step() != SQLITE_ROW) return DbError(db_, "user_version");
  int current = static_cast<int>(version.Int(0));
  if (current > kSchemaVersion) {
    return Status::Internal("schema version " + std::to_string(current) +
                            " is newer than this gsliced understands (" +
                            std::to_string(kSchemaVersion) + "): run a newer gsliced");
  }
  for (int v = current; v < kSchemaVersion; ++v) {
    std::string sql = std::string("BEGIN IMMEDIATE;") + kMigrations[v] +
                      "PRAGMA user_version=" + std::to_string(v + 1) + ";COMMIT;";
    Status s = Exec(sql.c_str());
    if (!s.ok()) {
      Exec("ROLLBACK");
      return Status::Internal("migration to schema version " + std::to_string(v + 1) +
                              " failed: " + s.message());
    }
  }
  schema_version_ = kSchemaVersion;
  if (current == 0) {
    // Every node has a project to put slices in.
    Project def;
    def.name = "default";
    return PutProject(def);
  }
  return Status::Ok();
}

namespace {

// A row that gsliced did not write as it stands (edited by hand, or damaged): loading stops
// with what is wrong and where, rather than running with a value no request could set.
Status BadRow(const std::string& what, const std::string& name, const std::string& problem) {
  return Status::Internal("database: " + what + " '" + name + "': " + problem +
                          "; gsliced never writes such a row: correct or delete it (sqlite3) and start again");
}

Status CheckName(const char* what, const std::string& row, const char* field, const std::string& value) {
  if (Status s = ValidateName(field, value); !s.ok()) return BadRow(what, row, s.message());
  return Status::Ok();
}

std::string OutOfRange(const char* field, const std::string& value, const std::string& range) {
  return std::string(field) + " " + value + " is out of range (" + range + ")";
}

}  // namespace

Result<std::vector<Slice>> Store::LoadSlices() {
  std::vector<Slice> out;
  Stmt q(db_,
         "SELECT name, user, project, class, state, origin, created_at, pod, pod_namespace, "
         "idle_timeout_s, last_error, owner_uid, protect_permille, remote_client FROM slices ORDER BY created_at, name");
  if (!q.prepared()) return DbError(db_, "load slices");
  while (q.Step() == SQLITE_ROW) {
    Slice s;
    s.name = q.Text(0);
    s.user = q.Text(1);
    s.project = q.Text(2);
    if (Status st = CheckName("slice", s.name, "slice", s.name); !st.ok()) return st;
    if (Status st = CheckName("slice", s.name, "user", s.user); !st.ok()) return st;
    if (Status st = CheckName("slice", s.name, "project", s.project); !st.ok()) return st;
    const std::optional<SliceClass> cls = ParseSliceClass(q.Text(3));
    if (!cls) return BadRow("slice", s.name, "class '" + q.Text(3) + "' is unknown");
    s.slice_class = *cls;
    if (!ParseSliceState(q.Text(4), &s.state)) return BadRow("slice", s.name, "state '" + q.Text(4) + "' is unknown");
    s.origin = q.Text(5);
    s.created_at = q.Int(6);
    s.pod = q.Text(7);
    s.pod_namespace = q.Text(8);
    s.idle_timeout_s = q.Int(9);
    if (s.idle_timeout_s < 0 || s.idle_timeout_s > kMaxIdleTimeoutS) {
      return BadRow("slice", s.name,
                    OutOfRange("idle_timeout_s", std::to_string(s.idle_timeout_s), "0.." + std::to_string(kMaxIdleTimeoutS)));
    }
    s.last_error = q.Text(10);
    s.owner_uid = q.Int(11);
    if (s.owner_uid < -1 || s.owner_uid > kMaxUid) s.owner_uid = -1;  // not a uid: unknown
    const int64_t protect = q.Int(12);
    if (protect < 0 || protect > kProtectMaxPermille || !ValidProtectPermille(static_cast<uint32_t>(protect))) {
      return BadRow("slice", s.name,
                    OutOfRange("protect_permille", std::to_string(protect),
                               "0 (the default) or " + std::to_string(kProtectMinPermille) + ".." +
                                   std::to_string(kProtectMaxPermille)));
    }
    s.protect_permille = static_cast<uint32_t>(protect);
    s.remote_client = q.Text(13);
    out.push_back(std::move(s));
  }
  Stmt g(db_,
         "SELECT slice, gpu_uuid, memory_limit_bytes, compute_share, compute_cap FROM slice_gpus "
         "ORDER BY slice, rowid");
  if (!g.prepared()) return DbError(db_, "load slice GPUs");
  while (g.Step() == SQLITE_ROW) {
    std::string slice = g.Text(0);
    const int64_t limit = g.Int(2);
    const double share = g.Real(3);
    if (limit < 0 || static_cast<uint64_t>(limit) > kMaxSizeBytes) {
      return BadRow("slice", slice, OutOfRange("memory_limit_bytes", std::to_string(limit), "0..1 EiB"));
    }
    if (!(share >= 0 && share <= 1)) {
      return BadRow("slice", slice, OutOfRange("compute_share", std::to_string(share), "0..1"));
    }
    const double cap = g.Real(4);
    if (!(cap >= 0 && cap <= 1)) {
      return BadRow("slice", slice, OutOfRange("compute_cap", std::to_string(cap), "0..1"));
    }
    for (Slice& s : out) {
      if (s.name == slice) {
        s.gpus.push_back(SliceGpu{g.Text(1), static_cast<uint64_t>(limit), share, cap});
        break;
      }
    }
  }
  return out;
}

Store::Transaction::Transaction(Transaction&& other) noexcept
    : store_(other.store_), begun_(std::move(other.begun_)) {
  other.store_ = nullptr;
}

Store::Transaction::~Transaction() {
  if (store_ != nullptr && begun_.ok()) store_->Exec("ROLLBACK");
}

Status Store::Transaction::Commit() {
  if (!begun_.ok()) return begun_;
  if (store_ == nullptr) return Status::Internal("database: transaction already ended");
  Store* store = std::exchange(store_, nullptr);
  if (Status s = store->Exec("COMMIT"); !s.ok()) {
    store->Exec("ROLLBACK");  // a failed COMMIT may leave the transaction open
    return Status::Internal("database: commit: " + s.message());
  }
  return Status::Ok();
}

Store::Transaction Store::Begin() {
  Status s = Exec("BEGIN IMMEDIATE");
  if (!s.ok()) s = Status::Internal("database: begin: " + s.message());
  return Transaction(this, std::move(s));
}

Status Store::PutSlice(const Slice& s) {
  // A savepoint, not BEGIN: it nests inside a Transaction and is one on its own.
  if (Status st = Exec("SAVEPOINT put_slice"); !st.ok()) return st;
  auto fail = [&](const std::string& what) {
    Status st = DbError(db_, what);
    Exec("ROLLBACK TO put_slice; RELEASE put_slice");
    return st;
  };
  {
    Stmt del(db_, "DELETE FROM slice_gpus WHERE slice = ?1");
    del.Bind(1, s.name);
    if (!del.prepared() || del.Step() != SQLITE_DONE) return fail("save slice");
  }
  {
    Stmt ins(db_,
             "INSERT OR REPLACE INTO slices (name, user, project, class, state, origin, created_at, "
             "pod, pod_namespace, idle_timeout_s, last_error, owner_uid, protect_permille, remote_client) "
             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
    ins.Bind(1, s.name);
    ins.Bind(2, s.user);
    ins.Bind(3, s.project);
    ins.Bind(4, std::string(ToString(s.slice_class)));
    ins.Bind(5, std::string(ToString(s.state)));
    ins.Bind(6, s.origin);
    ins.Bind(7, s.created_at ? s.created_at : Now());
    ins.Bind(8, s.pod);
    ins.Bind(9, s.pod_namespace);
    ins.Bind(10, s.idle_timeout_s);
    ins.Bind(11, s.last_error);
    ins.Bind(12, s.owner_uid);
    ins.Bind(13, static_cast<int64_t>(s.protect_permille));
    ins.Bind(14, s.remote_client);
    if (!ins.prepared() || ins.Step() != SQLITE_DONE) return fail("save slice");
  }
  for (const SliceGpu& g : s.gpus) {
    Stmt ins(db_,
             "INSERT INTO slice_gpus (slice, gpu_uuid, memory_limit_bytes, compute_share, compute_cap) "
             "VALUES (?1, ?2, ?3, ?4, ?5)");
    ins.Bind(1, s.name);
    ins.Bind(2, g.uuid);
    ins.Bind(3, static_cast<int64_t>(g.memory_limit));
    ins.Bind(4, g.compute_share);
    ins.Bind(5, g.compute_cap);
    if (!ins.prepared() || ins.Step() != SQLITE_DONE) return fail("save slice GPU");
  }
  if (Status st = Exec("RELEASE put_slice"); !st.ok()) return fail("save slice");
  return Status::Ok();
}

Status Store::DeleteSlice(const std::string& name) {
  Stmt del(db_, "DELETE FROM slices WHERE name = ?1");
  del.Bind(1, name);
  if (!del.prepared() || del.Step() != SQLITE_DONE) return DbError(db_, "delete slice");
  return Status::Ok();
}

Result<std::vector<Project>> Store::LoadProjects() {
  std::vector<Project> out;
  Stmt q(db_,
         "SELECT name, memory_quota_bytes, compute_quota, priority, created_at FROM projects "
         "ORDER BY name");
  if (!q.prepared()) return DbError(db_, "load projects");
  while (q.Step() == SQLITE_ROW) {
    Project p;
    p.name = q.Text(0);
    if (Status st = CheckName("project", p.name, "project", p.name); !st.ok()) return st;
    const int64_t memory_quota = q.Int(1);
    if (memory_quota < 0 || static_cast<uint64_t>(memory_quota) > kMaxSizeBytes) {
      return BadRow("project", p.name, OutOfRange("memory_quota_bytes", std::to_string(memory_quota), "0..1 EiB"));
    }
    p.memory_quota = static_cast<uint64_t>(memory_quota);
    p.compute_quota = q.Real(2);
    if (!(p.compute_quota >= 0 && p.compute_quota <= kMaxComputeQuotaGpus)) {
      return BadRow("project", p.name, OutOfRange("compute_quota", std::to_string(p.compute_quota), "0..4096 GPUs"));
    }
    const int64_t priority = q.Int(3);
    if (priority < -kMaxProjectPriority || priority > kMaxProjectPriority) {
      return BadRow("project", p.name, OutOfRange("priority", std::to_string(priority), "-1000000..1000000"));
    }
    p.priority = static_cast<int>(priority);
    p.created_at = q.Int(4);
    out.push_back(std::move(p));
  }
  return out;
}

Status Store::PutProject(const Project& p) {
  Stmt ins(db_,
           "INSERT OR REPLACE INTO projects (name, memory_quota_bytes, compute_quota, priority, "
           "created_at) VALUES (?1, ?2, ?3, ?4, ?5)");
  ins.Bind(1, p.name);
  ins.Bind(2, static_cast<int64_t>(p.memory_quota));
  ins.Bind(3, p.compute_quota);
  ins.Bind(4, static_cast<int64_t>(p.priority));
  ins.Bind(5, p.created_at ? p.created_at : Now());
  if (!ins.prepared() || ins.Step() != SQLITE_DONE) return DbError(db_, "save project");
  return Status::Ok();
}

Status Store::DeleteProject(const std::string& name) {
  Stmt del(db_, "DELETE FROM projects WHERE name = ?1");
  del.Bind(1, name);
  if (!del.prepared() || del.Step() != SQLITE_DONE) return DbError(db_, "delete project");
  return Status::Ok();
}

Result<std::vector<User>> Store::LoadUsers() {
  std::vector<User> out;
  Stmt q(db_, "SELECT name, created_at FROM users ORDER BY name");
  if (!q.prepared()) return DbError(db_, "load users");
  while (q.Step() == SQLITE_ROW) {
    User u{q.Text(0), q.Int(1)};
    if (Status st = CheckName("user", u.name, "user", u.name); !st.ok()) return st;
    out.push_back(std::move(u));
  }
  return out;
}

Status Store::PutUser(const User& u) {
  Stmt ins(db_, "INSERT OR IGNORE INTO users (name, created_at) VALUES (?1, ?2)");
  ins.Bind(1, u.name);
  ins.Bind(2, u.created_at ? u.created_at : Now());
  if (!ins.prepared() || ins.Step() != SQLITE_DONE) return DbError(db_, "save user");
  return Status::Ok();
}

Status Store::RecordEvent(const std::string& slice, const std::string& kind,
                          const std::string& detail) {
  Stmt ins(db_, "INSERT INTO events (time, slice, kind, detail) VALUES (?1, ?2, ?3, ?4)");
  ins.Bind(1, Now());
  ins.Bind(2, slice);
  ins.Bind(3, kind);
  ins.Bind(4, detail);
  if (!ins.prepared() || ins.Step() != SQLITE_DONE) return DbError(db_, "record event");
  return Status::Ok();
}

Result<std::vector<Store::Event>> Store::RecentEvents(int limit) {
  std::vector<Event> out;
  Stmt q(db_, "SELECT id, time, slice, kind, detail FROM events ORDER BY id DESC LIMIT ?1");
  q.Bind(1, static_cast<int64_t>(limit));
  if (!q.prepared()) return DbError(db_, "load events");
  while (q.Step() == SQLITE_ROW) out.push_back(Event{q.Int(0), q.Int(1), q.Text(2), q.Text(3), q.Text(4)});
  return out;
}

}  // namespace gslice
