// gslice trace: asks gsliced to record a timeline of a running slice's processes for a few
// seconds, and saves it (docs/trace.md).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "daemon_commands.h"
#include "gslice/atomic_file.h"

namespace gslice::cli {

const char kTraceSummary[] = "record a timeline of a running slice for a few seconds (gsliced)";

namespace {

constexpr const char kTraceHelp[] = R"(usage: gslice trace NAME [--seconds N] [-o FILE] [--socket PATH]

Records a timeline of slice NAME's processes for N seconds (default 10, at most 300) and saves
it: driver calls, GPU kernels and copies, NVTX ranges, compute gate waits, suspensions, GPU
utilisation and the slice's memory, as Chrome trace JSON. Open it in ui.perfetto.dev or
chrome://tracing, or on the slice's page of gsliced's dashboard, which shows the latest one.
The programs need no change; recording costs them little while it runs and nothing after
(docs/trace.md). Only the slice's owner or an admin may record it.

  --seconds N     how long to record (1 to 300; default 10)
  -o FILE         where to save it (default NAME.trace.json; - for stdout)
  --socket PATH   gsliced's socket (default $GSLICE_SOCKET or /run/gsliced/gsliced.sock)
)";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gslice trace: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int TraceCommand(int argc, char** argv) {
  CommonFlags flags;
  std::vector<std::string> rest;
  if (!ParseCommonFlags("trace", argc, argv, &flags, &rest)) return 2;
  if (flags.help) {
    std::fputs(kTraceHelp, stdout);
    return 0;
  }
  std::string name, out, seconds_arg = "10";
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    auto value = [&](const char* opt, std::string* v) -> int {  // 1 taken, 0 not this flag, -1 missing
      const size_t len = strlen(opt);
      if (a.size() > len && a.compare(0, len, opt) == 0 && a[len] == '=') {
        *v = a.substr(len + 1);
        return 1;
      }
      if (a != opt) return 0;
      if (i + 1 >= rest.size()) return -1;
      *v = rest[++i];
      return 1;
    };
    int r = value("--seconds", &seconds_arg);
    if (r < 0) return Fail("--seconds needs a value, e.g. --seconds 10");
    if (r > 0) continue;
    r = value("-o", &out);
    if (r == 0) r = value("--output", &out);
    if (r < 0) return Fail("-o needs a file, e.g. -o train.json");
    if (r > 0) continue;
    if (a.rfind("-", 0) == 0) return Fail("unknown flag " + a + " (see --help)");
    if (!name.empty()) return Fail("name one slice, e.g. gslice trace train --seconds 10");
    name = a;
  }
  if (name.empty()) return Fail("name one slice, e.g. gslice trace train --seconds 10 (`gslice ls` lists them)");
  if (name.find_first_of("/?%#") != std::string::npos) return Fail("'" + name + "' is not a slice name");
  char* end = nullptr;
  errno = 0;
  const long seconds = strtol(seconds_arg.c_str(), &end, 10);
  if (end == seconds_arg.c_str() || *end != '\0' || errno != 0 || seconds < 1 || seconds > 300) {
    return Fail("--seconds " + seconds_arg + ": a whole number of seconds from 1 to 300");
  }
  if (out.empty()) out = name + ".trace.json";
  std::fprintf(stderr, "gslice trace: recording slice %s for %ld s...\n", name.c_str(), seconds);
  DaemonReply reply;
  const nlohmann::json body = {{"seconds", seconds}};
  if (!CallDaemon("trace", flags, "POST", "/v1/slices/" + name + "/trace", body.dump(), &reply,
                  static_cast<int>(seconds + 30) * 1000)) {
    return 1;
  }
  const auto trace = nlohmann::json::parse(reply.body, nullptr, false);
  int64_t events = 0;
  int processes = 0;
  if (trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array()) {
    for (const auto& e : trace["traceEvents"]) events += e.value("ph", std::string()) != "M" ? 1 : 0;
    const auto& other = trace["otherData"]["gslice"];
    if (other.is_object() && other.contains("processes") && other["processes"].is_array()) {
      processes = static_cast<int>(other["processes"].size());
    }
  }
  if (out == "-") {
    std::fwrite(reply.body.data(), 1, reply.body.size(), stdout);
  } else {
    std::string error;
    if (!WriteFileAtomically(out, reply.body, 0666, &error)) {
      std::fprintf(stderr, "gslice trace: %s\n", error.c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "gslice trace: %lld events from %d process(es)%s%s\n", static_cast<long long>(events),
               processes, out == "-" ? "" : " written to ", out == "-" ? "" : out.c_str());
  if (processes == 0) {
    std::fprintf(stderr, "gslice trace: no process of slice %s made a driver call while recording\n", name.c_str());
  }
  return 0;
}

}  // namespace gslice::cli
