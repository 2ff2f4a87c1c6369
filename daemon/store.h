// The slice registry on disk: slices, users, projects and an event log in one SQLite
// database. The schema is versioned (PRAGMA user_version) and moved forward by the
// migrations in store.cc, each in its own transaction; a database written by a newer
// gsliced is refused rather than guessed at.
//
// REQUIRES: external synchronization (the Registry serialises every call).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model.h"
#include "status.h"

struct sqlite3;

namespace gslice {

class Store {
 public:
  // Opens (creating if needed) the database at `path` and migrates it to the current schema.
  static Result<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The schema version this build writes.
  static int CurrentSchemaVersion();
  int schema_version() const { return schema_version_; }

  // Groups changes: every Store call made while a Transaction is open lands with its
  // Commit() or not at all (destroying it uncommitted rolls back). One at a time; the calls
  // below are atomic on their own, inside a transaction or not. The registry opens one
  // around each change that also touches the node ledger, so that the ledger is changed
  // only once the database change is known to work (and undone when Commit() fails).
  class Transaction {
   public:
    Transaction(Transaction&& other) noexcept;
    Transaction& operator=(Transaction&&) = delete;
    ~Transaction();
    // Whether BEGIN worked; calls made when it did not are not grouped.
    const Status& status() const { return begun_; }
    Status Commit();

   private:
    friend class Store;
    Transaction(Store* store, Status begun) : store_(store), begun_(std::move(begun)) {}
    Store* store_;  // null once committed, rolled back or moved from
    Status begun_;
  };
  Transaction Begin();

  Result<std::vector<Slice>> LoadSlices();
  Status PutSlice(const Slice& slice);  // insert or replace, GPUs included
  Status DeleteSlice(const std::string& name);

  Result<std::vector<Project>> LoadProjects();
  Status PutProject(const Project& project);
  Status DeleteProject(const std::string& name);

  Result<std::vector<User>> LoadUsers();
  Status PutUser(const User& user);

  // Appends to the event log (what was asked of a slice and what came of it).
  Status RecordEvent(const std::string& slice, const std::string& kind, const std::string& detail);
  struct Event {
    int64_t id = 0;
    int64_t time = 0;
    std::string slice, kind, detail;
  };
  Result<std::vector<Event>> RecentEvents(int limit);

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Status Exec(const char* sql);
  Status Migrate();

  sqlite3* db_;
  int schema_version_ = 0;
};

}  // namespace gslice
