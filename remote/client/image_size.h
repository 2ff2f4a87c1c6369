// Module images handed to cuModuleLoadData & co, which the driver API passes without a size
// (image_size.cc): fatbin (and its wrapper), ELF cubin, PTX or other NUL-terminated text.
#pragma once

#include <cstdint>

namespace gslice::remote {

// The size of a module image. 0 when it cannot be told.
uint64_t ImageSize(const void* image);
// The bytes to ship for a module image: the image itself, or the fatbin a fatbin wrapper
// names (the worker's driver loads either alike). nullptr when a wrapper names none.
const void* ImageBytes(const void* image);

}  // namespace gslice::remote
