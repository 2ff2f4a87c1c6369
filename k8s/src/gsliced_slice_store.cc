// SliceStore on gsliced's HTTP API (docs/api.md), over its unix socket.
#include <sys/socket.h>

#include <httplib.h>

#include "gslice/k8s/dra_plugin.h"
#include "gslice/ledger.h"

namespace gslice::k8s {

using nlohmann::json;

namespace {

class GslicedSliceStore final : public SliceStore {
 public:
  GslicedSliceStore(std::string socket, std::string ledger) : socket_(std::move(socket)), ledger_(std::move(ledger)) {}

  std::string Create(const ClaimSlice& s, std::string* error) override {
    const std::string name = SliceNameFor(s.slice);
    json gpus = json::array();
    for (const GpuGrant& g : s.slice.container.gpus) {
      json e = {{"gpu", g.uuid}, {"memory", static_cast<uint64_t>(g.memory_mib) << 20}};
      if (g.compute_percent > 0) e["compute_share"] = g.compute_percent / 100.0;
      gpus.push_back(e);
    }
    // The pod is left out: gsliced learns it from the processes' cgroups, as for the device
    // plugin's slices, and then follows the pod's gslice.io/ annotations.
    json body = {{"name", name},
                 {"user", s.slice.namespace_name},
                 {"class", std::string(ToString(s.slice.slice_class))},
                 {"gpus", gpus},
                 {"origin", "api"},
                 {"idle_timeout_s", s.idle_timeout_s}};
    if (!s.slice.protect.empty()) {
      uint32_t permille = 0;
      if (!ParseProtectAnnotation(s.slice.protect, s.slice.slice_class, &permille, error)) return "";
      body["protect"] = permille / 1000.0;
    }
    httplib::Client cli(socket_);
    cli.set_address_family(AF_UNIX);
    cli.set_connection_timeout(5, 0);
    cli.set_read_timeout(30, 0);
    auto r = cli.Post("/v1/slices", body.dump(), "application/json");
    if (!r) {
      *error = "gsliced at " + socket_ + ": " + httplib::to_string(r.error()) + " (is gsliced running on the node?)";
      return "";
    }
    if (r->status != 201 && r->status != 200) {
      // 409 is both "does not fit" and "exists already": a slice of this name and user is
      // this claim's, made by an attempt that died before the claim was recorded.
      bool ours = false;
      if (r->status == 409) {
        auto got = cli.Get("/v1/slices/" + name);
        json b = got && got->status == 200 ? json::parse(got->body, nullptr, false) : json();
        ours = b.is_object() && b.value("user", "") == s.slice.namespace_name;
      }
      if (!ours) {
        json b = json::parse(r->body, nullptr, false);
        std::string msg = b.is_object() && b.contains("error") && b["error"].is_string()
                              ? b["error"].get<std::string>()
                              : r->body;
        *error = "gsliced refused it (HTTP " + std::to_string(r->status) + "): " + msg;
        return "";
      }
    }
    // The cap is set on the slice too (the container's GSLICE_COMPUTE says the same), so
    // `gslice ls` shows it and `gslice set` changes it.
    if (!s.slice.compute_cap.empty() && r->status != 409) {
      auto p = cli.Patch("/v1/slices/" + name, json{{"compute_cap", s.slice.compute_cap}}.dump(), "application/json");
      if (!p || p->status != 200) {
        *error = "gsliced did not take computeCap " + s.slice.compute_cap + ": " +
                 (p ? p->body : httplib::to_string(p.error()));
        std::string ignored;
        Delete(name, &ignored);
        return "";
      }
    }
    Ledger ledger;
    if (LedgerError e = ledger.Open(ledger_.c_str(), 2000, false); e != LedgerError::kOk) {
      *error = "node ledger " + ledger_ + ": " + LedgerErrorString(e) + ": " + ledger.detail();
      return "";
    }
    const int index = ledger.FindSlice(name.c_str());
    if (index < 0) {
      *error = "gsliced made slice " + name + " but it is not in the node ledger " + ledger_ +
               " (does gsliced use another ledger?)";
      return "";
    }
    // The usage file goes to the uid the claim's containers run as, so that they charge the
    // node ledger (gsliced keeps an entry's owner when it knows no account for the user).
    if (s.slice.run_as_user >= 0) {
      const LedgerSlice& e = ledger.limits()->slices[index];
      LedgerError u = ledger.writable() ? ledger.UpdateSlice(index, static_cast<gslice::SliceClass>(e.slice_class),
                                                             e.flags, static_cast<uint32_t>(s.slice.run_as_user),
                                                             e.protect_permille)
                                        : LedgerError::kNotPermitted;
      if (u != LedgerError::kOk) {
        *error = "cannot give slice " + name + " to uid " + std::to_string(s.slice.run_as_user) + " in " + ledger_ +
                 ": " + LedgerErrorString(u) + " (run gslice-dra-plugin as root)";
        std::string ignored;
        Delete(name, &ignored);
        return "";
      }
    }
    return ledger_ + "/slice-" + std::to_string(index);
  }

  bool Delete(const std::string& name, std::string* error) override {
    httplib::Client cli(socket_);
    cli.set_address_family(AF_UNIX);
    cli.set_connection_timeout(5, 0);
    cli.set_read_timeout(30, 0);
    auto r = cli.Delete("/v1/slices/" + name);
    if (!r) {
      *error = "gsliced at " + socket_ + ": " + httplib::to_string(r.error()) + " (is gsliced running on the node?)";
      return false;
    }
    if (r->status == 200 || r->status == 204 || r->status == 404) return true;
    *error = "gsliced refused to delete it (HTTP " + std::to_string(r->status) + "): " + r->body;
    return false;
  }

 private:
  const std::string socket_, ledger_;
};

}  // namespace

std::unique_ptr<SliceStore> MakeGslicedSliceStore(const std::string& socket, const std::string& ledger_path) {
  return std::make_unique<GslicedSliceStore>(socket, ledger_path);
}

}  // namespace gslice::k8s
