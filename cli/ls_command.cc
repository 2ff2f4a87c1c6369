// gslice ls: the node's GPUs and slices, as gsliced knows them.
#include <map>
#include <nlohmann/json.hpp>

#include "daemon_commands.h"

namespace gslice::cli {

const char kLsSummary[] = "list GPUs and slices (from gsliced)";

namespace {

constexpr const char kLsHelp[] = R"(usage: gslice ls [--json] [--socket PATH]

Lists the node's GPUs (memory in use, what guaranteed slices reserve, utilisation, and
whether they are shared through MPS, for which uid, or time-sliced, and why) and every
slice: its user and project, class, protection level (guaranteed slices: the fraction of
their solo speed opportunistic work must leave them), state, GPUs, memory used of its
limit, compute share, sharing (mps or time-sliced) and how many processes run in it. A
slice time-sliced on a GPU that serves MPS is named under the table with the reason.
Where gsliced's slice_reads is owner, callers who are not admins see only their own slices
and the GPUs' totals.

States: running (processes at work), idle (no process attached), throttled (opportunistic
work held back while guaranteed work runs), suspending, suspended, resuming, failed.
Remote slices (gslice-remoted's workers, docs/remote.md) are named under the table with
their client and state: attached (the worker holds the GPU) or suspended (idle, moved to
host memory; the client's next call resumes it).

  --json          print gsliced's answer (GET /v1/node) as JSON, for scripts
  --socket PATH   gsliced's socket (default $GSLICE_SOCKET or /run/gsliced/gsliced.sock);
                  GSLICE_DAEMON=host:port and GSLICE_TOKEN reach it over TCP instead

examples:
  gslice ls
  gslice ls --json | jq '.slices[] | select(.user == "alice") | .name'
)";

std::string Or(const nlohmann::json& v, const std::string& fallback) {
  return v.is_string() && !v.get<std::string>().empty() ? v.get<std::string>() : fallback;
}

uint64_t U64(const nlohmann::json& v) { return v.is_number_unsigned() ? v.get<uint64_t>() : 0; }

}  // namespace

void PrintNode(FILE* out, const std::string& node_json, bool with_processes) {
  using nlohmann::json;
  json node = json::parse(node_json, nullptr, false);
  if (!node.is_object()) {
    std::fprintf(out, "(gsliced sent something that is not JSON)\n");
    return;
  }
  std::map<std::string, std::string> index_of;
  std::vector<std::vector<std::string>> gpus = {
      {"GPU", "NAME", "MEMORY USED", "GUARANTEED MEM", "GUARANTEED COMPUTE", "UTIL", "SLICES", "SHARING", "UUID"}};
  std::vector<std::string> why_gpu;  // how each GPU shares, under the table
  for (const json& g : node["gpus"]) {
    std::string index = std::to_string(g.value("index", 0));
    index_of[Or(g["uuid"], "")] = index;
    const json& sharing = g["sharing"];
    std::string how = "-";
    if (sharing.is_object()) {
      const bool mps = Or(sharing["substrate"], "") == "mps";
      how = !mps ? "time-sliced"
            : sharing["mps_uid"].is_number_integer()
                ? "MPS (uid " + std::to_string(sharing["mps_uid"].get<int64_t>()) +
                      (Or(sharing["mps_class"], "any") == "any" ? "" : ", " + Or(sharing["mps_class"], "")) + ")"
            : sharing.value("mps_uid_hidden", false) ? "MPS (another uid)"  // slice_reads = owner
                : "MPS (free)";
      why_gpu.push_back("  GPU " + index + ": " + Or(sharing["why"], "?") +
                        (mps ? "; " + Or(sharing["mps_uid_why"], "") : std::string()));
    }
    gpus.push_back({index, Or(g["name"], "?"),
                    Bytes(U64(g["memory_used_bytes"])) + " / " + Bytes(U64(g["memory_total_bytes"])),
                    Bytes(U64(g["guaranteed_memory_bytes"])), Percent(g.value("guaranteed_compute", 0.0)),
                    g["utilization"].is_number() ? Percent(g["utilization"].get<double>()) : "-",
                    std::to_string(g.value("slices", 0)), how, Or(g["uuid"], "?")});
  }
  PrintTable(out, gpus);
  for (const std::string& line : why_gpu) std::fprintf(out, "%s\n", line.c_str());
  std::fprintf(out, "\n");
  if (node["slices"].empty()) {
    std::fprintf(out, "no slices: create one with `gslice create NAME --gpus 0 --memory 8GiB`\n");
    return;
  }
  std::vector<std::vector<std::string>> slices = {
      {"SLICE", "USER", "PROJECT", "CLASS", "PROTECT", "STATE", "GPUS", "MEMORY USED", "COMPUTE", "SHARING", "PROCS"}};
  std::vector<std::string> why_slice;  // slices time-sliced on a GPU that serves MPS
  std::vector<std::vector<std::string>> procs = {{"PID", "SLICE", "GPU", "MEMORY"}};
  for (const json& s : node["slices"]) {
    std::string gpu_list, share, sharing;
    for (const json& g : s["gpus"]) {
      std::string uuid = Or(g["uuid"], "?");
      gpu_list += (gpu_list.empty() ? "" : ",") + (index_of.count(uuid) ? index_of[uuid] : uuid);
      double c = g.value("compute_share", 0.0);
      share += (share.empty() ? "" : ",") + (c > 0 ? Percent(c) : "-");
      const std::string how = Or(g["sharing"], "-");
      sharing += (sharing.empty() ? "" : ",") + how;
      bool gpu_serves = false;
      for (const json& gpu : node["gpus"]) {
        gpu_serves = gpu_serves || (Or(gpu["uuid"], "") == uuid && gpu["sharing"].is_object() &&
                                    Or(gpu["sharing"]["substrate"], "") == "mps");
      }
      if (how == "time-sliced" && gpu_serves) {
        why_slice.push_back("  " + Or(s["name"], "?") + ": time-sliced on GPU " +
                            (index_of.count(uuid) ? index_of[uuid] : uuid) + ": " + Or(g["sharing_why"], "?"));
      }
    }
    std::string compute = share;
    if (s["compute_used"].is_number()) compute = Percent(s["compute_used"].get<double>()) + " of " + share;
    std::string protect = "-";  // opportunistic slices have no level
    if (s["protect"].is_number()) {
      char level[32];
      std::snprintf(level, sizeof level, "%g", s["protect"].get<double>());
      protect = level;
    }
    slices.push_back({Or(s["name"], "?"), Or(s["user"], "?"), Or(s["project"], "?"), Or(s["class"], "?"), protect,
                      Or(s["activity"], Or(s["state"], "?")), gpu_list,
                      Bytes(U64(s["memory_used_bytes"])) + " / " + Bytes(U64(s["memory_limit_bytes"])), compute,
                      sharing, std::to_string(s["processes"].size())});
    for (const json& p : s["processes"]) {
      std::string uuid = Or(p["gpu"], "-");
      procs.push_back({std::to_string(p.value("pid", 0)), Or(s["name"], "?"),
                       index_of.count(uuid) ? index_of[uuid] : uuid, Bytes(U64(p["memory_used_bytes"]))});
    }
  }
  PrintTable(out, slices);
  for (const std::string& line : why_slice) std::fprintf(out, "%s\n", line.c_str());
  // Remote slices (the slices of gslice-remoted's workers): whom they serve, and whether the
  // worker holds the GPU or was suspended to host memory until the client's next call.
  for (const json& s : node["slices"]) {
    if (s["remote"].is_object()) {
      std::fprintf(out, "  %s: remote, client %s, %s\n", Or(s["name"], "?").c_str(),
                   Or(s["remote"]["client"], "?").c_str(), Or(s["remote"]["state"], "?").c_str());
    }
  }
  // The last failed state change of a slice, under the table.
  for (const json& s : node["slices"]) {
    if (!Or(s["last_error"], "").empty()) {
      std::fprintf(out, "  %s: %s\n", Or(s["name"], "?").c_str(), Or(s["last_error"], "").c_str());
    }
  }
  if (with_processes) {
    std::fprintf(out, "\n");
    if (procs.size() == 1) {
      std::fprintf(out, "no processes in any slice\n");
    } else {
      PrintTable(out, procs);
    }
  }
}

int LsCommand(int argc, char** argv) {
  CommonFlags flags;
  std::vector<std::string> rest;
  if (!ParseCommonFlags("ls", argc, argv, &flags, &rest)) return 2;
  if (flags.help) {
    std::fputs(kLsHelp, stdout);
    return 0;
  }
  if (!rest.empty()) {
    std::fprintf(stderr, "gslice ls: unexpected argument '%s'; see gslice ls --help\n", rest[0].c_str());
    return 2;
  }
  DaemonReply reply;
  if (!CallDaemon("ls", flags, "GET", "/v1/node", "", &reply)) return 1;
  if (flags.json) {
    std::fputs(reply.body.c_str(), stdout);
    return 0;
  }
  PrintNode(stdout, reply.body, false);
  return 0;
}

}  // namespace gslice::cli
