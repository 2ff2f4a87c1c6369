// The commands that talk to gsliced (ls, top, create, delete, suspend, resume): their
// entry points for main.cc's table, and what they share (flags, output helpers).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "daemon_client.h"

namespace gslice::cli {

int LsCommand(int argc, char** argv);
int TopCommand(int argc, char** argv);
int CreateCommand(int argc, char** argv);
int DeleteCommand(int argc, char** argv);
int SuspendCommand(int argc, char** argv);
int ResumeCommand(int argc, char** argv);
int SetCommand(int argc, char** argv);
int TraceCommand(int argc, char** argv);
extern const char kLsSummary[];
extern const char kTopSummary[];
extern const char kCreateSummary[];
extern const char kDeleteSummary[];
extern const char kSuspendSummary[];
extern const char kResumeSummary[];
extern const char kSetSummary[];
extern const char kTraceSummary[];

// Flags every daemon command takes.
struct CommonFlags {
  std::string socket;  // --socket PATH
  bool json = false;   // --json
  bool help = false;   // --help / -h
};

// Takes the common flags out of argv; the rest (in order) goes to `rest`. Flags of the
// form --name=value are split. Returns false (and prints) on a missing value.
bool ParseCommonFlags(const char* command, int argc, char** argv, CommonFlags* flags,
                      std::vector<std::string>* rest);

// Calls gsliced; on failure prints "gslice <command>: <what to do>" and returns false.
// timeout_ms bounds the whole call (a recording takes as long as it records).
bool CallDaemon(const char* command, const CommonFlags& flags, const std::string& method,
                const std::string& path, const std::string& body, DaemonReply* reply, int timeout_ms = 10000);

// "a,b,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitComma(const std::string& s);

// An idle timeout as people write it: "30m", "2h", "600s", "600" (seconds); "never" or "0":
// never (0). At most 365 days. False when it is none of these.
bool ParseIdleTimeout(const std::string& text, int64_t* seconds);

// "8 GiB", "512 MiB"; "30%".
std::string Bytes(uint64_t bytes);
std::string Percent(double fraction);

// Prints rows as aligned columns (the first row is the header).
void PrintTable(FILE* out, const std::vector<std::vector<std::string>>& rows);

}  // namespace gslice::cli

namespace gslice::cli {
// Prints GET /v1/node's answer as tables: GPUs, slices, and (with_processes) processes.
void PrintNode(FILE* out, const std::string& node_json, bool with_processes);
}  // namespace gslice::cli
