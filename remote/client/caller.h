// Who made a request the client cannot answer: the library that called and the public call of
// it that the program made, so that a refusal's log line says what the program asked for
// ("libcufft.so.12 (in cufftMakePlanMany)") rather than only which private slot was reached.
#pragma once

#include <cstddef>

namespace gslice::remote {

// Writes into out (NUL-terminated, at most size bytes) the object that called into the client
// and, when its frames can be walked, the outermost exported function of that object on the
// calling thread's stack (the library call the program made). "an unknown caller" when the
// stack cannot be read. For refusals and other rare paths: it walks the stack.
void DescribeCaller(char* out, size_t size);

}  // namespace gslice::remote
