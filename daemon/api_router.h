// The API (docs/api.md) as one table of routes — method, path pattern, who may call, handler
// — and the handlers, on the registry. Transport-independent: the listener
// (http_listener.h) turns HTTP into an ApiRequest and the ApiResponse back into HTTP, and
// tests call Handle directly.
//
// Before the table: the dashboard's static files are public (they hold no data), and on
// TCP every other request needs the bearer token. A path no route has is 404; a route's
// path with another method is 405 with the methods the table has for it (Allow); a name
// in the path that is not a valid name is 404; an admin route called by a non-admin is
// 403, before its body is read.
//
// What a caller reads of others' slices follows gsliced's slice_reads (config.h: SliceReads),
// route by route as the table declares (ReadScope). Under "owner" a caller who is not an admin
// reads only its own slices, and a route naming another's slice answers 404 in the words used
// for a slice that does not exist, before its body is read.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "registry.h"

namespace gslice {

// Requests answered, by HTTP status.
struct ApiCounters {
  void Count(int code) {
    std::lock_guard lock(mu);
    by_code[code]++;
  }
  std::map<int, uint64_t> ByCode() const {
    std::lock_guard lock(mu);
    return by_code;
  }
  mutable std::mutex mu;
  std::map<int, uint64_t> by_code;
};

// One request as the router sees it (transport-independent, so tests can call it directly).
struct ApiRequest {
  std::string method;
  std::string path;  // without the query
  std::map<std::string, std::string> query;
  std::string body;
  std::string authorization;  // the Authorization header
  bool over_tcp = false;
  // Who calls; the transport fills it in (peer credentials, or the token). The default
  // is nobody in particular: it changes nothing, and under slice_reads = owner reads no slice.
  Caller caller;
};

struct ApiResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string allow;  // for 405
};

// The API's error answer: `status` and {"error": message}.
ApiResponse ErrorResponse(int status, const std::string& message);

// What a route lets a caller who is not an admin read of slices that are not its own, under
// slice_reads = owner; under "open" every route shows everyone everything it reads. Every route
// declares one (a static_assert in api_router.cc), so a new route cannot leave it to chance.
enum class ReadScope {
  kUndeclared,  // never in the table
  kNoSlices,    // holds no slice, user, owner or process: health, projects' quotas and totals
  kFiltered,    // the caller's own slices, their events and history, its own user; GPUs as totals
  kOneSlice,    // names a slice ({slice}): another's answers 404, as one that does not exist
  kOwnAnswer,   // answers with what the caller itself made (a new slice)
  kAdmins,      // for admins only (403 to others): whole-node views, and the admin routes
};

// One route as the table declares it, for tests that walk the table.
struct RouteDeclaration {
  std::string_view method;
  std::string_view pattern;  // "/v1/slices/{slice}"
  ReadScope reads;
};
std::vector<RouteDeclaration> ApiRoutes();

class ApiRouter {
 public:
  // `trace_dir`: where slices' traces are (trace_files.h: TraceDir); empty: none are kept.
  // `slice_reads`: what callers who are not admins read of others' slices (config.h).
  ApiRouter(Registry* registry, std::string token, double start_time_seconds, std::string trace_dir = "",
            SliceReads slice_reads = SliceReads::kOpen)
      : registry_(registry), token_(std::move(token)), start_time_(start_time_seconds),
        trace_dir_(std::move(trace_dir)), slice_reads_(slice_reads) {}
  ApiResponse Handle(const ApiRequest& request);
  ApiCounters& counters() { return counters_; }
  // Whether a request for `path` over TCP with this Authorization header may go on; the
  // transport asks before reading the body. The dashboard's static files need no token.
  bool Authorized(const std::string& method, const std::string& path,
                  const std::string& authorization) const;
  // Whether this Authorization header carries the token (`Bearer <token>`).
  bool HoldsToken(const std::string& authorization) const;

 private:
  friend struct ApiHandlers;  // the routes' handlers (api_router.cc)

  ApiResponse Dispatch(const ApiRequest& request);
  // Whether the caller may read slice `name` (slice_reads): it exists, and it is the caller's
  // or the caller is an admin, or slice_reads is open.
  bool Sees(const std::string& name, const Caller& caller);
  // Serves GET `key` from the cache while the registry's generation is unchanged.
  ApiResponse Cached(const std::string& key, const std::function<ApiResponse()>& render);

  Registry* registry_;
  std::mutex cache_mu_;
  std::map<std::string, std::pair<uint64_t, ApiResponse>> cache_;
  std::string token_;
  double start_time_;
  std::string trace_dir_;
  SliceReads slice_reads_;
  // Traces being read into memory now: at most kTraceReadsAtOnce, so that a few callers
  // asking for large traces at once cannot take gsliced's memory.
  std::atomic<int> trace_reads_{0};
  ApiCounters counters_;
};

}  // namespace gslice
