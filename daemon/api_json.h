// The API's objects in JSON (docs/api.md): encoders for what it answers, and decoders for
// what POST, PUT and PATCH take, with their range checks.
//
// A decoder either returns what the body says, exactly, or a 400 Status whose message names
// the field, what was wrong and what to write instead; it never clamps, rounds or wraps a
// number, and unknown fields are refused. Pure: no registry, no I/O.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "history.h"
#include "registry.h"
#include "status.h"
#include "store.h"

namespace gslice {

// Encoders.
nlohmann::json ToJson(const GpuView& g);
nlohmann::json ToJson(const Slice& s);
// A slice with its usage now; `gpus` gives each of its GPUs' index.
nlohmann::json ToJson(const SliceView& v, const std::vector<GpuView>& gpus);
nlohmann::json ToJson(const Project& p);
nlohmann::json ToJson(const ProjectView& v);
nlohmann::json ToJson(const User& u);
nlohmann::json ToJson(const HistorySample& s);
nlohmann::json ToJson(const Store::Event& e);

// A request body: a JSON object, or 400.
Result<nlohmann::json> ParseBody(const std::string& body);
// 400 naming the first field of `body` not in `known`, and the known ones.
Status CheckFields(const nlohmann::json& body, std::initializer_list<const char*> known);
// `field` of `body` if it is there and not null; 400 if it is not a string.
Status ReadString(const nlohmann::json& body, const char* field, std::string* out);

// POST /v1/slices.
Result<SliceRequest> ParseSliceRequest(const nlohmann::json& body);
// PATCH /v1/slices/NAME.
Result<SliceChange> ParseSliceChange(const nlohmann::json& body);
// POST /v1/projects (`name_from_path` empty) and PUT /v1/projects/NAME.
Result<Project> ParseProject(const nlohmann::json& body, const std::string& name_from_path);
// POST /v1/users: the name to register.
Result<std::string> ParseUserName(const nlohmann::json& body);
// POST /v1/slices/NAME/trace: how many seconds to record.
Result<int> ParseTraceSeconds(const nlohmann::json& body);

}  // namespace gslice
