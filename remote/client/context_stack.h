// The calling thread's context stack, with the driver's semantics: cuCtxSetCurrent replaces
// the top, push and pop, a created context is pushed, a destroyed one leaves every place it
// held. Its top goes with each request (wire.h: RequestPrefix.context). Per thread: no lock.
#pragma once

#include <cuda.h>

namespace gslice::remote {

namespace context_stack_detail {
inline constexpr int kStackDepth = 32;
// __thread: read on every call, with no initialisation wrapper.
extern __thread CUcontext t_stack[kStackDepth];
extern __thread int t_depth;
}  // namespace context_stack_detail

inline CUcontext CurrentContext() {
  using namespace context_stack_detail;
  return t_depth > 0 ? t_stack[t_depth - 1] : nullptr;
}
void SetCurrentContext(CUcontext ctx);
// False when the stack is full (kStackDepth).
bool PushContext(CUcontext ctx);
// nullptr when the stack is empty.
CUcontext PopContext();
// Removes a destroyed context from the calling thread's stack.
void ForgetContext(CUcontext ctx);

}  // namespace gslice::remote
