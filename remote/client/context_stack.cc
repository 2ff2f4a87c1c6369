#include "context_stack.h"

namespace gslice::remote {

namespace context_stack_detail {
__thread CUcontext t_stack[kStackDepth];
__thread int t_depth = 0;
}  // namespace context_stack_detail

using namespace context_stack_detail;

void SetCurrentContext(CUcontext ctx) {
  if (ctx == nullptr) {
    if (t_depth > 0) --t_depth;
  } else if (t_depth == 0) {
    t_stack[t_depth++] = ctx;
  } else {
    t_stack[t_depth - 1] = ctx;
  }
}

bool PushContext(CUcontext ctx) {
  if (t_depth == kStackDepth) return false;
  t_stack[t_depth++] = ctx;
  return true;
}

CUcontext PopContext() { return t_depth > 0 ? t_stack[--t_depth] : nullptr; }

void ForgetContext(CUcontext ctx) {
  int k = 0;
  for (int i = 0; i < t_depth; ++i)
    if (t_stack[i] != ctx) t_stack[k++] = t_stack[i];
  t_depth = k;
}

}  // namespace gslice::remote
