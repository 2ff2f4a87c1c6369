// The dashboard's static files (daemon/web/), embedded in gsliced at build time by
// embed_web.cmake: the page needs nothing from outside the daemon.
#pragma once

#include <cstddef>
#include <string_view>

namespace gslice {

struct WebAsset {
  const char* path;          // "/app.js"
  const char* content_type;  // "text/javascript; charset=utf-8"
  const unsigned char* data;
  size_t size;
};

// The asset served at `path` ("/" is "/index.html"), or nullptr.
const WebAsset* FindWebAsset(std::string_view path);

}  // namespace gslice
