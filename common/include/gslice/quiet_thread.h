// A detached helper thread inside somebody else's process (the shim, the forwarding client):
// it blocks every signal, so that none the application meant for its own threads is delivered
// to it. libc only; the caller's signal mask is as it was afterwards.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace gslice {

// pthread_create's result (0: started).
inline int StartQuietThread(void* (*fn)(void*), void* arg) {
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const int rc = pthread_create(&thread, &attr, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  return rc;
}

}  // namespace gslice
