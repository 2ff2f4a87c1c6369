# Writes OUTPUT, a C++ file holding every file in WEB_DIR as a byte array and the
# FindWebAsset() table over them. Run at build time (see daemon/CMakeLists.txt).
file(GLOB assets RELATIVE ${WEB_DIR} ${WEB_DIR}/*)
list(SORT assets)
set(arrays "")
set(table "")
set(n 0)
foreach(asset ${assets})
  file(READ ${WEB_DIR}/${asset} hex HEX)
  string(LENGTH "${hex}" hex_len)
  math(EXPR size "${hex_len} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND arrays "const unsigned char kAsset${n}[] = {${bytes} 0};\n")
  if(asset MATCHES "\\.html$")
    set(type "text/html; charset=utf-8")
  elseif(asset MATCHES "\\.js$")
    set(type "text/javascript; charset=utf-8")
  elseif(asset MATCHES "\\.css$")
    set(type "text/css; charset=utf-8")
  elseif(asset MATCHES "\\.svg$")
    set(type "image/svg+xml")
  else()
    set(type "application/octet-stream")
  endif()
  string(APPEND table "    {\"/${asset}\", \"${type}\", kAsset${n}, ${size}},\n")
  math(EXPR n "${n} + 1")
endforeach()
file(WRITE ${OUTPUT}.tmp "// Generated from daemon/web by embed_web.cmake. Do not edit.
#include \"web_assets.h\"

namespace gslice {
namespace {
${arrays}
const WebAsset kAssets[] = {
${table}};
}  // namespace

const WebAsset* FindWebAsset(std::string_view path) {
  if (path == \"/\") path = \"/index.html\";
  for (const WebAsset& a : kAssets) {
    if (path == a.path) return &a;
  }
  return nullptr;
}

}  // namespace gslice
")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
