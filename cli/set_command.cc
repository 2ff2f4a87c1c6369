// gslice set: changes a slice while its programs run (PATCH /v1/slices/NAME).
#include <nlohmann/json.hpp>

#include "daemon_commands.h"
#include "gslice/units.h"

namespace gslice::cli {

const char kSetSummary[] = "change a slice's memory, compute or class while it runs (gsliced)";

namespace {

constexpr const char kSetHelp[] = R"(usage: gslice set NAME [--memory SIZE[,SIZE...]] [--cap N%] [--share N%]
                       [--class C] [--protect F] [--idle-timeout T] [--make-room] [--json]
                       [--socket PATH]

Changes slice NAME in place; its running programs keep running. gsliced admits the change
like a create (guaranteed memory and compute on each GPU, the project's quotas) and refuses
it with what is free. A new memory limit reaches the programs at once: their next
allocation, cuMemGetInfo, NVML query or nvidia-smi sees it. A limit below what the slice
holds is refused with what it holds, and nothing changes, unless --make-room: then gsliced
suspends the slice (its GPU memory moves to host memory), applies the limit and says so;
`gslice resume NAME` brings it back.

  --memory SIZE[,...]  memory per GPU: one size for all, or one per GPU in the slice's order
  --cap N%             hard compute cap on each GPU (none: no cap); --compute, its old
                       name, still works in this release, with a warning
  --share N%           guaranteed compute share on each GPU (none: no guarantee)
  --class C            guaranteed or opportunistic
  --protect F          a guaranteed slice's protection level, 0.5 to 1 (0.9 or 90%): the
                       fraction of its solo speed opportunistic work must leave it
  --idle-timeout T     suspend after T without GPU work (30m, 2h, 600s; never or 0: never)
  --make-room          suspend the slice when it holds more than a new, smaller limit
  --json               print the changed slice as JSON
  --socket PATH        gsliced's socket (default $GSLICE_SOCKET or /run/gsliced/gsliced.sock)

A new compute cap, share, class or protection level reaches the running programs within a
second: their launch gates read the slice's policy from the node ledger every 10 ms
(docs/compute.md). New programs start with it.

examples:
  gslice set train --memory 16GiB
  gslice set train --memory 4GiB --make-room
  gslice set scratch --cap 30% --class opportunistic
  gslice set serve --protect 0.9
)";

// The flags that take a value, and the request field each sets.
struct ValueFlag {
  const char* flag;
  const char* field;
  const char* renamed_to = nullptr;  // an old spelling, accepted for one release with a warning
};
constexpr ValueFlag kValueFlags[] = {
    {"--memory", "memory"},
    {"--cap", "compute_cap"},
    {"--share", "compute_share"},
    {"--class", "class"},
    {"--idle-timeout", "idle_timeout_s"},
    {"--protect", "protect"},
    {"--compute", "compute_cap", "--cap"},
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "gslice set: %s\n", message.c_str());
  return 2;
}

// "30%" -> 0.3; "none" -> 0.
bool Fraction(const std::string& text, double* out, std::string* error) {
  if (text == "none") {
    *out = 0;
    return true;
  }
  ParsedPercent p = ParsePercent(text);
  if (!p.ok || p.fraction > 1) {
    *error = p.ok ? "at most 100%" : p.error;
    return false;
  }
  *out = p.fraction;
  return true;
}

}  // namespace

int SetCommand(int argc, char** argv) {
  CommonFlags flags;
  std::vector<std::string> rest;
  if (!ParseCommonFlags("set", argc, argv, &flags, &rest)) return 2;
  if (flags.help) {
    std::fputs(kSetHelp, stdout);
    return 0;
  }
  std::string name;
  nlohmann::json body = nlohmann::json::object();
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    if (a == "--make-room") {
      body["make_room"] = true;
      continue;
    }
    const ValueFlag* flag = nullptr;
    for (const ValueFlag& f : kValueFlags) {
      if (a == f.flag) flag = &f;
    }
    if (flag == nullptr) {
      if (a.rfind("-", 0) == 0) return Fail("unknown option '" + a + "'; see gslice set --help");
      if (!name.empty()) return Fail("one slice at a time ('" + name + "' and '" + a + "')");
      name = a;
      continue;
    }
    if (flag->renamed_to != nullptr) {
      std::fprintf(stderr, "gslice set: %s is now %s (the hard compute cap); %s goes in the next release\n", flag->flag,
                   flag->renamed_to, flag->flag);
    }
    if (i + 1 >= rest.size()) return Fail(std::string(flag->flag) + " needs a value; see gslice set --help");
    const std::string& v = rest[++i];
    const std::string field = flag->field;
    std::string error;
    if (field == "memory") {
      nlohmann::json sizes = nlohmann::json::array();
      for (const std::string& item : SplitComma(v)) {
        ParsedSize size = ParseSize(item);
        if (!size.ok || size.bytes == 0) {
          return Fail("--memory " + item + ": " + (size.ok ? "must be more than 0" : size.error) +
                      "; write e.g. 8GiB or 512MiB");
        }
        sizes.push_back(size.bytes);
      }
      body["memory"] = sizes;
    } else if (field == "compute_cap" || field == "compute_share") {
      double fraction = 0;
      if (!Fraction(v, &fraction, &error)) return Fail(std::string(flag->flag) + " " + v + ": " + error + "; write e.g. 30%");
      body[field] = fraction;
    } else if (field == "class") {
      if (v != "guaranteed" && v != "opportunistic") return Fail("--class " + v + ": use guaranteed or opportunistic");
      body["class"] = v;
    } else if (field == "protect") {
      ParsedProtect level = ParseProtect(v);
      if (!level.ok) return Fail("--protect " + v + ": " + level.error);
      body["protect"] = level.permille / 1000.0;
    } else if (field == "idle_timeout_s") {
      int64_t seconds = 0;
      if (!ParseIdleTimeout(v, &seconds)) return Fail("--idle-timeout " + v + ": write e.g. 30m, 2h, 600s or never");
      body["idle_timeout_s"] = seconds;
    }
  }
  if (name.empty()) return Fail("name the slice to change, e.g. gslice set train --memory 16GiB (`gslice ls` lists them)");
  if (name.find_first_of("/?%#") != std::string::npos) return Fail("'" + name + "' is not a slice name");
  if (body.empty() || (body.size() == 1 && body.contains("make_room"))) {
    return Fail("nothing to change: give --memory, --cap, --share, --class, --protect or --idle-timeout");
  }
  DaemonReply reply;
  if (!CallDaemon("set", flags, "PATCH", "/v1/slices/" + name, body.dump(), &reply)) return 1;
  if (flags.json) {
    std::fputs(reply.body.c_str(), stdout);
    return 0;
  }
  auto slice = nlohmann::json::parse(reply.body, nullptr, false);
  if (slice.is_object() && slice.contains("note")) std::printf("%s\n", slice["note"].get<std::string>().c_str());
  std::string limits;
  if (slice.is_object() && slice["gpus"].is_array()) {
    for (const auto& g : slice["gpus"]) {
      limits += (limits.empty() ? "" : ", ") + Bytes(g.value("memory_limit_bytes", uint64_t{0}));
    }
  }
  std::printf("slice %s: %s, memory %s\n", name.c_str(),
              slice.is_object() ? slice.value("class", std::string("?")).c_str() : "?", limits.c_str());
  return 0;
}

}  // namespace gslice::cli
