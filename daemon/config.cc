#include "config.h"

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml.hpp>
#include <variant>

#include "gslice/units.h"
#include "model.h"
#include "mps_plan.h"

namespace gslice {
namespace {

// Octal permission bits written as a string ("0660"), so TOML's integer rules do not bite.
struct Mode {
  uint32_t DaemonConfig::*field;
};
// A byte size: an integer or a string like "64KiB", from min to max bytes.
struct Size {
  uint64_t DaemonConfig::*field;
  uint64_t min, max;
};
struct Integer {
  int64_t DaemonConfig::*field;
  int64_t min, max;
};

struct Option {
  const char* key;
  const char* default_toml;  // the default, as TOML
  const char* help;          // one or two lines for --print-config and the docs
  std::variant<std::string DaemonConfig::*, bool DaemonConfig::*, Integer, Size, Mode> field;
};

// The one table of gsliced options.
const Option kOptions[] = {
    {"socket", R"("/run/gsliced/gsliced.sock")",
     "Unix socket of the API. Its permissions decide who may call; gsliced knows each\n"
     "caller from the kernel (its uid), so users change only their own slices. An existing\n"
     "file there that is not a socket is refused, never removed.",
     &DaemonConfig::socket},
    {"socket_mode", R"("0660")", "Permission bits of the socket (octal, as a string).",
     Mode{&DaemonConfig::socket_mode}},
    {"socket_group", R"("")",
     "Group that owns the socket (e.g. \"gslice\"); empty keeps gsliced's group.",
     &DaemonConfig::socket_group},
    {"database", R"("/var/lib/gsliced/gsliced.db")",
     "SQLite database of slices, users and projects; its folder is created if missing.",
     &DaemonConfig::database},
    {"ledger", R"("")",
     "Node ledger directory (shared memory) the shims read limits from; gsliced must own\n"
     "it (docs/ledger.md). Empty: $GSLICE_LEDGER, else /dev/shm/gslice. \"none\": keep\n"
     "slices in gsliced only (nothing enforces them). The ledger holds at most 64 slices.",
     &DaemonConfig::ledger},
    {"suspend_board", R"("")",
     "Suspend board directory (shared memory) where gsliced and the shims agree on suspend\n"
     "and resume (docs/suspend.md); made if missing. Empty: $GSLICE_SUSPEND_BOARD, else\n"
     "/dev/shm/gslice-suspend. Programs read theirs from $GSLICE_SUSPEND_BOARD: keep both equal.",
     &DaemonConfig::suspend_board},
    {"nvml_library", R"("libnvidia-ml.so.1")",
     "NVML library gsliced dlopens to find the GPUs (a soname or a path). --sim: the\n"
     "simulated one.",
     &DaemonConfig::nvml_library},
    {"driver_library", R"("libcuda.so.1")",
     "CUDA driver gsliced dlopens to suspend and resume slices through its checkpoint API\n"
     "(a soname or a path). --sim: the simulated one.",
     &DaemonConfig::driver_library},
    {"tcp", R"("")",
     "Also serve the API on TCP, \"host:port\" (e.g. \"127.0.0.1:7470\"). Every request on\n"
     "TCP needs `Authorization: Bearer <token>`, except the dashboard's static files.",
     &DaemonConfig::tcp},
    {"tcp_allow_remote", "false",
     "Allow `tcp` to bind an address other than loopback (put TLS in front of it).",
     &DaemonConfig::tcp_allow_remote},
    {"token_file", R"("")",
     "File holding the bearer token for TCP (one line, 16+ characters, mode 0600). Whoever\n"
     "holds it is an admin (user \"token\").",
     &DaemonConfig::token_file},
    {"admin_group", R"("")",
     "Group whose members may change, suspend and delete every slice and manage projects\n"
     "(as root may); checked against the caller's supplementary groups. Empty: root only.",
     &DaemonConfig::admin_group},
    {"slice_reads", R"("open")",
     "What callers who are not admins may read of other users' slices: \"open\", everything\n"
     "(names, owners, projects, usage, processes, events); \"owner\", nothing: each sees its\n"
     "own slices, their events and history, and the GPUs' totals, another's slice answers 404\n"
     "as one that does not exist, and /metrics is for admins. Set \"owner\" where the socket\n"
     "serves users who must not see each other (socket_mode 0666, remote tenants).",
     &DaemonConfig::slice_reads},
    {"sample_interval_ms", "1000",
     "How often gsliced reads GPU and slice usage (metrics, dashboard), milliseconds.",
     Integer{&DaemonConfig::sample_interval_ms, 100, 60000}},
    {"history_seconds", "600", "How much usage history the dashboard's charts keep, seconds.",
     Integer{&DaemonConfig::history_seconds, 10, 86400}},
    {"api_threads", "256",
     "Connections each listener (unix socket, TCP) serves at once, each on its own thread.\n"
     "One more closes a connection that waits for a request (of the client holding the most;\n"
     "on TCP one without the token first), or is answered 503 when all are being answered.",
     Integer{&DaemonConfig::api_threads, 4, 4096}},
    {"api_connections_per_client", "128",
     "Connections one client may hold at once: a uid on the unix socket and on TCP from this\n"
     "machine (the owner of the peer's socket), an IP address on TCP from elsewhere. Further\n"
     "ones are answered 429 and closed, so no client takes every thread.",
     Integer{&DaemonConfig::api_connections_per_client, 1, 4096}},
    {"api_request_timeout_s", "10",
     "A connection's first request (headers and body) must arrive whole within this many\n"
     "seconds of the connection opening; slower connections are closed.",
     Integer{&DaemonConfig::api_request_timeout_s, 1, 3600}},
    {"api_idle_timeout_s", "30",
     "After an answer, the next request on the connection must arrive whole within this many\n"
     "seconds; and an answer the client does not read for this long is dropped.",
     Integer{&DaemonConfig::api_idle_timeout_s, 1, 3600}},
    {"max_body_bytes", R"("64KiB")",
     "Largest request body the API accepts, whatever its transfer encoding; larger gets 413\n"
     "(read and dropped, never kept, within the request's time). 1KiB to 64MiB.",
     Size{&DaemonConfig::max_body_bytes, 1024, 64ull << 20}},
    {"default_project", R"("default")",
     "Project of slices created without one; it always exists and has no quota.",
     &DaemonConfig::default_project},
    {"slices_per_user", "16",
     "Slices one user may hold in the node's slice table (the ledger's 64 entries, one per\n"
     "slice: the API's, `gslice run`'s and pods'), counting its slices deleted while their\n"
     "processes run on; more are refused (409). Admins' are not limited. 0: no limit.",
     Integer{&DaemonConfig::slices_per_user, 0, 64}},
    {"slices_per_project", "32",
     "Slices one project other than default_project may hold in the table, whoever owns\n"
     "them; more are refused (409), except admins' own. 0: no limit.",
     Integer{&DaemonConfig::slices_per_project, 0, 64}},
    {"slices_reserved_for_admins", "8",
     "Entries of the slice table kept for admins (root, admin_group): other users' new\n"
     "slices are refused (409) while no more than this many are free, so an admin can\n"
     "always create and run. 0: none.",
     Integer{&DaemonConfig::slices_reserved_for_admins, 0, 63}},
    {"mps", R"("off")",
     "Share GPUs through NVIDIA MPS (docs/compute.md): \"auto\" runs an MPS control daemon for\n"
     "each GPU in compute mode DEFAULT where mps_control exists, \"on\" also refuses to start\n"
     "without mps_control, \"off\" never runs one. On each GPU one uid at a time uses MPS; the\n"
     "slices of other uids there are time-sliced beside it. gsliced never changes compute modes.\n"
     "Off unless asked for: a fatal GPU fault of one program on an MPS server ends every program\n"
     "on that server, guaranteed ones included (docs/compute.md, \"Faults\").",
     &DaemonConfig::mps},
    {"mps_classes", R"("one")",
     "Which slices of a GPU's MPS uid share its server: \"one\" class at a time, picked with the\n"
     "uid (the class of its oldest slice there; its slices of the other class are time-sliced\n"
     "beside the server), or \"mixed\": both classes, so an opportunistic program's fatal fault\n"
     "ends the guaranteed work on that server too (docs/compute.md, \"Faults\").",
     &DaemonConfig::mps_classes},
    {"mps_control", R"("nvidia-cuda-mps-control")",
     "The MPS control program: a path, or a name looked up on $PATH.",
     &DaemonConfig::mps_control},
    {"mps_directory", R"("/run/gsliced/mps")",
     "Where each GPU's MPS pipe and log folders are made (<dir>/<GPU-uuid>/pipe and log), root's\n"
     "and not listable; only the uid using a GPU's MPS may reach its daemon.",
     &DaemonConfig::mps_directory},
    {"kubernetes.node", R"("")",
     "Kubernetes node gsliced runs on; empty: $NODE_NAME. With a node name, gsliced labels\n"
     "its GPU processes (metrics, API) with their pod, namespace and container; without\n"
     "one, it does not. See docs/kubernetes.md.",
     &DaemonConfig::kubernetes_node},
    {"kubernetes.apiserver", R"("")",
     "API server URL; empty: in-cluster ($KUBERNETES_SERVICE_HOST/PORT and the pod's\n"
     "service account token and CA).",
     &DaemonConfig::kubernetes_apiserver},
    {"kubernetes.token_file", R"("")",
     "Bearer token for kubernetes.apiserver, read before each request.",
     &DaemonConfig::kubernetes_token_file},
    {"kubernetes.ca_file", R"("")", "CA bundle for an https kubernetes.apiserver.",
     &DaemonConfig::kubernetes_ca_file},
    {"kubernetes.proc_root", R"("/proc")",
     "Where gsliced reads each process's cgroup (<proc_root>/<pid>/cgroup); it needs the\n"
     "host's PID namespace to see other pods' processes.",
     &DaemonConfig::kubernetes_proc_root},
    {"kubernetes.refresh_seconds", "60",
     "How often the node's pod list is read again while GPU processes run in pods.",
     Integer{&DaemonConfig::kubernetes_refresh_seconds, 1, 86400}},
    {"kubernetes.retry_seconds", "10",
     "A process whose pod is not in the list reads it again, at most this often (also the\n"
     "retry period while the API server does not answer).",
     Integer{&DaemonConfig::kubernetes_retry_seconds, 1, 3600}},
};

std::string TypeName(const toml::value& v) {
  std::ostringstream os;
  os << v.type();
  return os.str();
}

// Applies one TOML value to `config`; the message says what was expected.
Status ApplyValue(const Option& opt, const toml::value& v, DaemonConfig* config) {
  std::string key = opt.key;
  if (auto* s = std::get_if<std::string DaemonConfig::*>(&opt.field)) {
    if (!v.is_string()) return Status::BadRequest(key + ": expected a string, got " + TypeName(v));
    config->**s = v.as_string().str;
  } else if (auto* b = std::get_if<bool DaemonConfig::*>(&opt.field)) {
    if (!v.is_boolean()) return Status::BadRequest(key + ": expected true or false, got " + TypeName(v));
    config->**b = v.as_boolean();
  } else if (auto* i = std::get_if<Integer>(&opt.field)) {
    if (!v.is_integer() || v.as_integer() < i->min || v.as_integer() > i->max) {
      return Status::BadRequest(key + ": expected an integer from " + std::to_string(i->min) +
                                " to " + std::to_string(i->max));
    }
    config->*(i->field) = v.as_integer();
  } else if (auto* z = std::get_if<Size>(&opt.field)) {
    uint64_t bytes = 0;
    if (v.is_integer() && v.as_integer() >= 0) {
      bytes = static_cast<uint64_t>(v.as_integer());
    } else if (v.is_string()) {
      ParsedSize p = ParseSize(v.as_string().str);
      if (!p.ok) {
        return Status::BadRequest(key + ": '" + v.as_string().str + "' is not a size (" +
                                  p.error + "); write e.g. \"64KiB\"");
      }
      bytes = p.bytes;
    } else {
      return Status::BadRequest(key + ": expected a size like \"64KiB\" or a byte count");
    }
    if (bytes < z->min || bytes > z->max) {
      return Status::BadRequest(key + ": " + std::to_string(bytes) + " bytes is out of range: " +
                                "expected " + std::to_string(z->min) + " to " +
                                std::to_string(z->max) + " bytes");
    }
    config->*(z->field) = bytes;
  } else if (auto* m = std::get_if<Mode>(&opt.field)) {
    if (!v.is_string()) return Status::BadRequest(key + ": expected octal bits as a string, e.g. \"0660\"");
    const std::string& text = v.as_string().str;
    char* end = nullptr;
    unsigned long bits = std::strtoul(text.c_str(), &end, 8);
    if (text.empty() || *end != '\0' || bits > 0777) {
      return Status::BadRequest(key + ": '" + text + "' is not octal permission bits like \"0660\"");
    }
    config->*(m->field) = static_cast<uint32_t>(bits);
  }
  return Status::Ok();
}

const Option* FindOption(const std::string& key) {
  for (const Option& o : kOptions) {
    if (key == o.key) return &o;
  }
  return nullptr;
}

std::string KnownKeys() {
  std::string out;
  for (const Option& o : kOptions) out += (out.empty() ? "" : ", ") + std::string(o.key);
  return out;
}

// Applies every key of `table` ("<prefix><key>"); a table that is no option's value is a
// group of dotted keys ([kubernetes] node = ... is kubernetes.node).
Status ApplyTable(const std::string& path, const std::string& prefix, const toml::value& table,
                  DaemonConfig* config) {
  for (const auto& [name, value] : table.as_table()) {
    const std::string key = prefix + name;
    std::string where = path + ":" + std::to_string(value.location().line()) + ": ";
    const Option* opt = FindOption(key);
    if (opt == nullptr && value.is_table()) {
      if (Status s = ApplyTable(path, key + ".", value, config); !s.ok()) return s;
      continue;
    }
    if (opt == nullptr) {
      return Status::BadRequest(where + "unknown key '" + key + "'; known keys: " + KnownKeys());
    }
    Status s = ApplyValue(*opt, value, config);
    if (!s.ok()) return Status::BadRequest(where + s.message());
  }
  return Status::Ok();
}

}  // namespace

bool ParseSliceReads(std::string_view text, SliceReads* out) {
  if (text == "open") {
    *out = SliceReads::kOpen;
  } else if (text == "owner") {
    *out = SliceReads::kOwner;
  } else {
    return false;
  }
  return true;
}

DaemonConfig DefaultConfig() {
  DaemonConfig config;
  for (const Option& o : kOptions) {
    std::istringstream in(std::string("v = ") + o.default_toml + "\n");
    toml::value doc = toml::parse(in, "defaults");
    ApplyValue(o, doc.at("v"), &config);
  }
  return config;
}

Result<DaemonConfig> LoadConfigFile(const std::string& path, DaemonConfig config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::BadRequest(path + ": cannot read the config file");
  toml::value doc;
  try {
    doc = toml::parse(in, path);
  } catch (const std::exception& e) {
    return Status::BadRequest(path + ": not valid TOML:\n" + e.what());
  }
  if (!doc.is_table()) return Status::BadRequest(path + ": expected a TOML table");
  if (Status s = ApplyTable(path, "", doc, &config); !s.ok()) return s;
  return config;
}

Status ApplyOverride(const std::string& assignment, DaemonConfig* config) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos) {
    return Status::BadRequest("--set " + assignment + ": expected key=value");
  }
  std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  const Option* opt = FindOption(key);
  if (opt == nullptr) {
    return Status::BadRequest("--set: unknown key '" + key + "'; known keys: " + KnownKeys());
  }
  toml::value value;
  try {
    std::istringstream in("v = " + text + "\n");
    value = toml::parse(in, "--set").at("v");
  } catch (const std::exception&) {
    value = toml::value(text);  // a bare word: take it as a string
  }
  Status s = ApplyValue(*opt, value, config);
  if (!s.ok()) return Status::BadRequest("--set " + s.message());
  return Status::Ok();
}

Status ValidateConfig(const DaemonConfig& config) {
  if (config.socket.empty() && config.tcp.empty()) {
    return Status::BadRequest("neither socket nor tcp is set: gsliced would serve no one");
  }
  if (!config.tcp.empty()) {
    auto colon = config.tcp.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == config.tcp.size()) {
      return Status::BadRequest("tcp: '" + config.tcp + "' is not host:port, e.g. \"127.0.0.1:7470\"");
    }
    std::string host = config.tcp.substr(0, colon), port = config.tcp.substr(colon + 1);
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (*end != '\0' || p < 0 || p > 65535) {
      return Status::BadRequest("tcp: port '" + port + "' is not a number from 0 to 65535");
    }
    bool loopback = host == "127.0.0.1" || host == "localhost" || host == "::1" || host == "[::1]";
    if (!loopback && !config.tcp_allow_remote) {
      return Status::BadRequest("tcp: '" + host +
                                "' is not loopback; set tcp_allow_remote = true to serve it");
    }
    if (config.token_file.empty()) {
      return Status::BadRequest("tcp is set but token_file is not: TCP callers need a token");
    }
  }
  if (config.database.empty()) return Status::BadRequest("database: must name a file");
  if (Status s = ValidateName("project", config.default_project); !s.ok()) {
    return Status::BadRequest("default_project: " + s.message());
  }
  if (config.sample_interval_ms > config.history_seconds * 1000) {
    return Status::BadRequest("sample_interval_ms: " + std::to_string(config.sample_interval_ms) +
                              " is longer than history_seconds (" +
                              std::to_string(config.history_seconds) + " s)");
  }
  if (SliceReads reads; !ParseSliceReads(config.slice_reads, &reads)) {
    return Status::BadRequest("slice_reads: '" + config.slice_reads +
                              "' is not open (everyone reads every slice) or owner (users read only their own)");
  }
  if (MpsMode mode; !ParseMpsMode(config.mps, &mode)) {
    return Status::BadRequest("mps: '" + config.mps + "' is not auto, on or off");
  }
  if (MpsClasses classes; !ParseMpsClasses(config.mps_classes, &classes)) {
    return Status::BadRequest("mps_classes: '" + config.mps_classes +
                              "' is not one (each GPU's MPS serves one class of its uid) or mixed (both classes)");
  }
  if (config.mps != "off" && (config.mps_directory.empty() || config.mps_directory[0] != '/')) {
    return Status::BadRequest("mps_directory: '" + config.mps_directory + "' is not an absolute path, e.g. \"/run/gsliced/mps\"");
  }
  if (config.kubernetes_proc_root.empty()) {
    return Status::BadRequest("kubernetes.proc_root: must name a folder, e.g. \"/proc\"");
  }
  return Status::Ok();
}

namespace {

// A path whose folder exists, or whose nearest existing ancestor is a folder it can be made in.
Status CheckFolder(const char* key, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) return Status::Ok();
  for (fs::path d = dir; !d.empty(); d = d.parent_path()) {
    fs::file_status st = fs::status(d, ec);
    if (fs::exists(st)) {
      if (!fs::is_directory(st)) {
        return Status::BadRequest(std::string(key) + ": " + d.string() + " (in " + path +
                                  ") is not a folder");
      }
      return Status::Ok();
    }
    if (d == d.parent_path()) break;
  }
  return Status::BadRequest(std::string(key) + ": no folder of " + path + " exists");
}

Status CheckGroup(const char* key, const std::string& name) {
  if (name.empty()) return Status::Ok();
  struct group gr {};
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  int rc = getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr) {
    return Status::BadRequest(std::string(key) + ": no group named '" + name +
                              "' on this machine (getent group " + name + ")");
  }
  return Status::Ok();
}

}  // namespace

Status CheckSocketPath(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::BadRequest("socket: cannot look at " + path + ": " + std::strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Status::BadRequest("socket: " + path +
                              " exists and is not a socket; gsliced will not replace it: "
                              "remove it yourself or choose another path");
  }
  return Status::Ok();
}

Status CheckReferences(const DaemonConfig& config) {
  if (!config.socket.empty()) {
    if (Status s = CheckSocketPath(config.socket); !s.ok()) return s;
    if (Status s = CheckFolder("socket", config.socket); !s.ok()) return s;
  }
  if (Status s = CheckFolder("database", config.database); !s.ok()) return s;
  if (!config.ledger.empty() && config.ledger != "none") {
    if (Status s = CheckFolder("ledger", config.ledger); !s.ok()) return s;
  }
  if (!config.suspend_board.empty()) {
    if (Status s = CheckFolder("suspend_board", config.suspend_board); !s.ok()) return s;
  }
  if (Status s = CheckGroup("socket_group", config.socket_group); !s.ok()) return s;
  if (Status s = CheckGroup("admin_group", config.admin_group); !s.ok()) return s;
  if (!config.token_file.empty()) {
    if (auto t = ReadToken(config.token_file); !t.ok()) return t.status();
  }
  for (auto [key, file] : {std::pair{"kubernetes.token_file", &config.kubernetes_token_file},
                           {"kubernetes.ca_file", &config.kubernetes_ca_file}}) {
    if (!file->empty() && access(file->c_str(), R_OK) != 0) {
      return Status::BadRequest(std::string(key) + ": cannot read " + *file + ": " +
                                std::strerror(errno));
    }
  }
  return Status::Ok();
}

std::string DocumentedDefaults() {
  std::string out = "# gsliced configuration (TOML). Every option, at its default.\n";
  for (const Option& o : kOptions) {
    out += "\n";
    std::istringstream help(o.help);
    for (std::string line; std::getline(help, line);) out += "# " + line + "\n";
    out += std::string(o.key) + " = " + o.default_toml + "\n";
  }
  return out;
}

Result<std::string> ReadToken(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return Status::BadRequest("token_file " + path + ": cannot read it: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::BadRequest("token_file " + path + ": not a regular file");
  if (access(path.c_str(), R_OK) != 0) {
    return Status::BadRequest("token_file " + path + ": cannot read it: " + std::strerror(errno));
  }
  if (st.st_mode & 0077) {
    return Status::BadRequest("token_file " + path +
                              ": others may read it; chmod 600 " + path);
  }
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.size() < 16) {
    return Status::BadRequest("token_file " + path + ": the token is shorter than 16 characters");
  }
  return token;
}

}  // namespace gslice
