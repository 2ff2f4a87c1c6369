#include "call.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "attach.h"
#include "call_stats.h"
#include "context_stack.h"
#include "gslice/clock.h"
#include "gslice/options.h"
#include "kept_answers.h"
#include "log.h"
#include "pointer_answers.h"
#include "transport.h"
#include "worker_attach.h"

namespace gslice::remote {

using shim::Log;
using shim::LogLevel;

namespace {

// Answers the client keeps (calls.def: cached, cached=GROUP, cached=GROUP(PARAM)), keyed by
// opcode and arguments (the request without its prefix) and, for a group's calls, the current
// context; indexed by the handle PARAM names (kept_answers.h). Slot 0 holds the answers of
// `cached` calls for the process's life, slot 1 + g those of group g until a call that drops
// them (calls.def: drops=GROUP, drops=GROUP(PARAM)). Never freed: calls may come during exit.
// More answers than kMaxCached in one slot: the slot is emptied; more related kernels and
// functions than that: every per-handle drop drops its group.
constexpr size_t kMaxCached = 1 << 16;

KeptAnswers& AnswerStore() {
  static KeptAnswers* const kept = new KeptAnswers(kCacheGroupCount, kMaxCached, kMaxCached);
  return *kept;
}

// What a thread keeps between its calls: copies of kept answers in front of AnswerStore (read
// without its lock) and the last call's request buffer (a call then allocates nothing). Made
// on the thread's first call, freed when it exits.
constexpr size_t kRequestReserve = 256;
constexpr size_t kMaxSpareRequest = 64 * 1024;
}  // namespace

struct ThreadState {
  AnswerCopies copies;
  std::vector<uint8_t> spare_request;
  NotCudaMemory::ThreadMark queued_mapping;  // pointer_answers.h: queued calls that may map memory
};

namespace {

static_assert(sizeof(Call) > 0 && AnswerCopies::kReplyBytes == 48, "Call::copied_reply_ holds a copy's reply");
__thread ThreadState* t_state = nullptr;
pthread_once_t g_state_once = PTHREAD_ONCE_INIT;
pthread_key_t g_state_key;

void FreeThreadState(void* state) {
  delete static_cast<ThreadState*>(state);
  t_state = nullptr;  // a later call during the thread's exit makes a new one
}

ThreadState& State() {
  if (t_state == nullptr) {
    pthread_once(&g_state_once, [] { pthread_key_create(&g_state_key, FreeThreadState); });
    t_state = new ThreadState();
    pthread_setspecific(g_state_key, t_state);
  }
  return *t_state;
}

size_t CacheSlot(uint32_t op) {
  const uint32_t group = kOpCacheGroup[op];
  return group == 0 ? 0 : 1 + static_cast<size_t>(__builtin_ctz(group));
}

// The bytes of the request prefix an answer is keyed by. The prefix is the context (its first
// 8 bytes) and the lane: a group's answers depend on the context, a `cached` call's on
// neither, and no answer on the lane (threads share them).
size_t KeyedPrefixBytes(uint32_t op) { return kOpCacheGroup[op] != 0 ? sizeof(uint64_t) : 0; }

std::string CacheKey(uint32_t op, const Writer& request) {
  const char* const bytes = reinterpret_cast<const char*>(request.buffer().data());
  std::string key(reinterpret_cast<const char*>(&op), sizeof op);
  key.append(bytes, KeyedPrefixBytes(op));
  key.append(bytes + kRequestPrefixSize, request.size() - kRequestPrefixSize);
  return key;
}

// Forgets what op may change (calls.def: drops=): whole groups, and its handle's answers in
// the groups it drops per handle.
void DropCached(uint32_t op, uint64_t handle) {
  if (kOpDrops[op] != 0) AnswerStore().DropGroups(kOpDrops[op]);
  if (kOpDropsByHandle[op] != 0) AnswerStore().DropHandle(kOpDropsByHandle[op], handle);
}

// GSLICE_REMOTE_WAIT=1: async calls are waited for like the others (their errors then come
// from the call itself).
bool WaitForEveryCall() {
  static const bool wait = [] {
    const char* v = OptionValue(Option::RemoteWait);
    return v[0] != '\0' && strcmp(v, "0") != 0;
  }();
  return wait;
}

}  // namespace

Call::Call(uint32_t op) : state_(&State()), op_(op), not_cuda_generation_(NotCudaGeneration()) {
  std::vector<uint8_t>& buffer = request_.buffer();
  buffer.swap(state_->spare_request);
  if (buffer.capacity() < kRequestReserve) buffer.reserve(kRequestReserve);
  EncodeRequestPrefix(RequestPrefix{.context = reinterpret_cast<uintptr_t>(CurrentContext()), .lane = Lane()},
                      &request_);
}

Call::~Call() {
  std::vector<uint8_t>& buffer = request_.buffer();
  if (state_->spare_request.capacity() == 0 && buffer.capacity() <= kMaxSpareRequest) {
    buffer.clear();
    state_->spare_request.swap(buffer);
  }
}

void Call::AnsweredFromCopy(const uint8_t* reply, size_t size) {
  memcpy(copied_reply_, reply, size);
  reader_ = Reader(copied_reply_, size);
}

bool Call::AnsweredFromCache() {
  Kept kept;
  return FromCache(&kept);
}

bool Call::FromCache(Kept* kept) {
  if (!kOpCached[op_] && kOpCacheGroup[op_] == 0) return false;
  kept->slot = CacheSlot(op_);
  // The thread's copy first (CacheKey's bytes: the context for a group's calls, the arguments).
  const uint8_t* const bytes = request_.buffer().data();
  const size_t head = KeyedPrefixBytes(op_);
  size_t copied = 0;
  if (const uint8_t* reply = state_->copies.Find(op_, cache_handle_, bytes, head, bytes + kRequestPrefixSize,
                                                 request_.size() - kRequestPrefixSize,
                                                 AnswerStore().Generation(kept->slot), &copied)) {
    AnsweredFromCopy(reply, copied);
  } else {
    kept->key = CacheKey(op_, request_);
    if (!AnswerStore().LookUp(kept->slot, cache_handle_, kept->key, &reply_buffer_, &kept->generation)) return false;
    state_->copies.Put(op_, cache_handle_, bytes, head, bytes + kRequestPrefixSize, request_.size() - kRequestPrefixSize,
                       kept->generation, reply_buffer_.data(), reply_buffer_.size());
    reader_ = Reader(reply_buffer_.data(), reply_buffer_.size());
  }
  Log(LogLevel::kDebug, "remote: %s answered from the client's cache", kOpNames[op_]);
  int32_t value = 0;
  reader_.Get(&value);  // kept only when it held CUDA_SUCCESS
  answered_ = true;
  CountCall(kCachedCall, op_);
  mode_ = CallMode::kCached;
  return true;
}

CUresult Call::Run() {
  if (!ClientTracing()) return Forward();
  const int64_t start = MonotonicNs();
  const CUresult result = Forward();
  RecordCall(op_, mode_, seq_, Lane(), start, MonotonicNs());
  return result;
}

CUresult Call::Forward() {
  // One key and one look: a miss leaves the key and the generation for keeping the answer.
  const bool keeps = kOpCached[op_] || kOpCacheGroup[op_] != 0;
  Kept kept;
  if (keeps && FromCache(&kept)) return CUDA_SUCCESS;
  if (AnswersWithoutSlice(op_) && !HoldsWorker()) {
    // Before the process holds its worker, the probe answers (attach.h).
    CUresult failed = CUDA_SUCCESS;
    switch (AskProbe(op_, request_, &reply_buffer_, &failed)) {
      case ProbeAsked::kFailed: return failed;
      case ProbeAsked::kAnswered:
        mode_ = CallMode::kProbe;
        return Answered(keeps ? &kept : nullptr);
      case ProbeAsked::kAttached: break;
    }
  }
  if (const CUresult attached = EnsureAttached(); attached != CUDA_SUCCESS) return attached;
  // Before it leaves and again once answered: an answer of the group read in between would
  // be stale (the generation keeps it from being kept).
  DropCached(op_, cache_handle_);
  const bool queued = kOpAsync[op_] && !wait_ && !WaitForEveryCall();
  // The same for the addresses kept as not CUDA memory, if this call may map memory.
  BeforeSending(op_, queued, &state_->queued_mapping);
  if (queued) {
    // Not waited for: its driver error, if any, comes with the next synchronisation.
    const CUresult result = Send(op_, request_, nullptr, &seq_);
    CountCall(kAsyncCall, op_);
    if (result == CUDA_SUCCESS) {
      reader_ = Reader();
      answered_ = true;
      mode_ = CallMode::kAsync;
    }
    return result;
  }
  Waiter waiter;
  waiter.reply = &reply_buffer_;
  CountCall(kRoundTrip, op_);
  CUresult result = Send(op_, request_, &waiter, &seq_, kOpAsync[op_] ? kWaitBit : 0);
  if (result == CUDA_SUCCESS) result = Receive(op_, &waiter);
  DropCached(op_, cache_handle_);
  AfterAnswer(op_, result == CUDA_SUCCESS, &state_->queued_mapping);
  if (result != CUDA_SUCCESS) return result;
  if (waiter.header.op != (op_ | kReplyBit)) {
    return Fail(kLostResult, std::string("the server's answer to ") + kOpNames[op_] + " is not for it");
  }
  mode_ = CallMode::kRoundTrip;
  return Answered(keeps ? &kept : nullptr);
}

CUresult Call::RunTogether(Call* const* calls, size_t n, CUresult* results) {
  for (size_t i = 0; i < n; ++i) results[i] = kLostResult;
  if (n == 0) return CUDA_SUCCESS;
  if (const CUresult attached = EnsureAttached(); attached != CUDA_SUCCESS) {
    for (size_t i = 0; i < n; ++i) results[i] = attached;
    return attached;
  }
  // Registered with the transport until answered: sized once, never moved.
  std::vector<Waiter> waiters(n);
  size_t sent = 0;
  CUresult failure = CUDA_SUCCESS;
  for (; sent < n; ++sent) {
    Call& c = *calls[sent];
    DropCached(c.op_, c.cache_handle_);
    BeforeSending(c.op_, false, &c.state_->queued_mapping);
    waiters[sent].reply = &c.reply_buffer_;
    failure = Send(c.op_, c.request_, &waiters[sent], &c.seq_);
    if (failure != CUDA_SUCCESS) break;
  }
  CountCall(kRoundTrip, calls[0]->op_);
  for (size_t i = 0; i < sent; ++i) {
    Call& c = *calls[i];
    CUresult r = Receive(c.op_, &waiters[i]);
    if (r == CUDA_SUCCESS && waiters[i].header.op != (c.op_ | kReplyBit)) {
      r = Fail(kLostResult, std::string("the server's answer to ") + kOpNames[c.op_] + " is not for it");
    }
    AfterAnswer(c.op_, r == CUDA_SUCCESS, &c.state_->queued_mapping);
    if (r == CUDA_SUCCESS) {
      c.mode_ = CallMode::kRoundTrip;
      r = c.Answered(nullptr);
    }
    results[i] = r;
  }
  for (size_t i = sent; i < n; ++i) results[i] = failure;
  return failure != CUDA_SUCCESS ? failure : ConnectionFailure();
}

CUresult Call::Answered(Kept* kept) {
  reader_ = Reader(reply_buffer_.data(), reply_buffer_.size());
  int32_t value = 0;
  if (!reader_.Get(&value)) {
    return Fail(kLostResult, std::string("the server's answer to ") + kOpNames[op_] + " is empty");
  }
  const CUresult result = static_cast<CUresult>(value);
  answered_ = true;
  if (kept != nullptr && result == CUDA_SUCCESS) {
    const uint8_t* const bytes = request_.buffer().data();
    state_->copies.Put(op_, cache_handle_, bytes, KeyedPrefixBytes(op_),
                       bytes + kRequestPrefixSize, request_.size() - kRequestPrefixSize, kept->generation,
                       reply_buffer_.data(), reply_buffer_.size());
    AnswerStore().Keep(kept->slot, kept->generation, cache_handle_, std::move(kept->key), reply_buffer_);
  }
  return result;
}

CUresult Call::Malformed() {
  return Fail(kLostResult, std::string("the server's answer to ") + kOpNames[op_] + " is malformed");
}

void RelateKernelFunction(CUkernel kernel, CUfunction function) {
  AnswerStore().Relate(HandleBits(kernel), HandleBits(function));
}

void NoteLibraryModule(CUmodule module) { AnswerStore().NoteLibraryModule(HandleBits(module)); }

void NoteModuleFunction(CUmodule module, CUfunction function) {
  AnswerStore().NoteModuleFunction(HandleBits(module), HandleBits(function));
}

}  // namespace gslice::remote
