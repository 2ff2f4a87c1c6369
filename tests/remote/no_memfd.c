// Preloaded into a client in remote_shm_test: memfd_create fails as it does under a seccomp
// filter or on an old kernel, so the client's fallback to the socket is exercised.
#define _GNU_SOURCE
#include <errno.h>
#include <sys/mman.h>

int memfd_create(const char* name, unsigned int flags) {
  (void)name;
  (void)flags;
  errno = ENOSYS;
  return -1;
}
