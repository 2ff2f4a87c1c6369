// The size of a module image handed to cuModuleLoadData & co, which the driver API passes
// without one: read from the image's own headers (fatbin, ELF) or its terminating NUL (PTX,
// the simulated driver's text images).
#include <string.h>

#include <cstdint>

#include "image_size.h"
#include "wire.h"

namespace gslice::remote {

namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50u;
constexpr uint32_t kFatbinWrapperMagic = 0x466243B1u;

// What nvcc emits for a program's fatbin (__fatBinC_Wrapper_t): it names the fatbin.
struct FatbinWrapper {
  uint32_t magic;
  uint32_t version;
  const void* data;
  const void* filename_or_fatbins;
};

template <typename T>
T At(const unsigned char* p, size_t offset) {
  T v;
  memcpy(&v, p + offset, sizeof v);
  return v;
}

uint64_t ElfSize(const unsigned char* p) {
  if (p[4] != 2) return 0;  // ELFCLASS64 only
  const uint64_t phoff = At<uint64_t>(p, 0x20), shoff = At<uint64_t>(p, 0x28);
  const uint16_t phentsize = At<uint16_t>(p, 0x36), phnum = At<uint16_t>(p, 0x38);
  const uint16_t shentsize = At<uint16_t>(p, 0x3A), shnum = At<uint16_t>(p, 0x3C);
  if (shoff > kMaxBuffer || phoff > kMaxBuffer || shentsize < 64) return 0;
  uint64_t end = 64;
  if (phnum != 0 && phoff + uint64_t{phnum} * phentsize > end) end = phoff + uint64_t{phnum} * phentsize;
  if (shnum != 0 && shoff + uint64_t{shnum} * shentsize > end) end = shoff + uint64_t{shnum} * shentsize;
  for (uint16_t i = 0; i < shnum; ++i) {
    const unsigned char* sh = p + shoff + uint64_t{i} * shentsize;
    const uint32_t type = At<uint32_t>(sh, 4);
    const uint64_t offset = At<uint64_t>(sh, 0x18), size = At<uint64_t>(sh, 0x20);
    if (type == 8 /* SHT_NOBITS */) continue;
    if (offset > kMaxBuffer || size > kMaxBuffer) return 0;
    if (offset + size > end) end = offset + size;
  }
  return end;
}

}  // namespace

const void* ImageBytes(const void* image) {
  FatbinWrapper w;
  memcpy(&w, image, sizeof w.magic);
  if (w.magic != kFatbinWrapperMagic) return image;
  memcpy(&w, image, sizeof w);
  return w.data;
}

uint64_t ImageSize(const void* image) {
  const auto* p = static_cast<const unsigned char*>(image);
  if (At<uint32_t>(p, 0) == kFatbinMagic) {
    const uint16_t header = At<uint16_t>(p, 6);
    const uint64_t body = At<uint64_t>(p, 8);
    if (body > kMaxBuffer) return 0;
    return header + body;
  }
  if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') return ElfSize(p);
  // Text: PTX or the simulated driver's images. A fatbin wrapper points at its fatbin instead
  // of holding it (ImageBytes unwraps it first).
  if (At<uint32_t>(p, 0) == kFatbinWrapperMagic) return 0;
  const size_t len = strnlen(static_cast<const char*>(image), kMaxBuffer);
  return len < kMaxBuffer ? len + 1 : 0;
}

}  // namespace gslice::remote
