#include "gslice/pid_namespace.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gslice {
namespace {

// Reads up to size-1 bytes of a small file, NUL-terminated. Returns the length, -1 on error.
ssize_t ReadSmallFile(const char* path, char* buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t total = 0;
  while (static_cast<size_t>(total) + 1 < size) {
    ssize_t n = read(fd, buf + total, size - 1 - static_cast<size_t>(total));
    if (n <= 0) break;
    total += n;
  }
  close(fd);
  buf[total] = '\0';
  return total;
}

bool ParseUint(const char* s, uint64_t* out) {
  if (*s < '0' || *s > '9') return false;
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') v = v * 10 + static_cast<uint64_t>(*s++ - '0');
  *out = v;
  return true;
}

}  // namespace

bool ReadProcStat(const char* stat_path, char* state, uint64_t* start_time) {
  char buf[1024];
  if (ReadSmallFile(stat_path, buf, sizeof buf) <= 0) return false;
  // The command name (field 2) may contain spaces and parentheses: parse after the last ')'.
  char* p = strrchr(buf, ')');
  if (p == nullptr || p[1] == '\0') return false;
  p += 2;  // field 3: state
  *state = *p;
  // Fields 3..22: skip 19 spaces to reach field 22.
  int field = 3;
  while (*p != '\0' && field < 22) {
    if (*p == ' ') ++field;
    ++p;
  }
  uint64_t v = 0;
  while (*p >= '0' && *p <= '9') v = v * 10 + static_cast<uint64_t>(*p++ - '0');
  *start_time = v;
  return true;
}

bool ReadInnermostPid(const char* status_path, uint32_t* pid) {
  char buf[4096];
  if (ReadSmallFile(status_path, buf, sizeof buf) <= 0) return false;
  const char* line = strstr(buf, "\nNSpid:");
  if (line == nullptr) return false;
  const char* p = line + 7;
  uint64_t last = 0;
  bool any = false;
  while (*p != '\0' && *p != '\n') {
    while (*p == ' ' || *p == '\t') ++p;
    uint64_t v = 0;
    if (!ParseUint(p, &v)) break;
    last = v;
    any = true;
    while (*p >= '0' && *p <= '9') ++p;
  }
  if (!any || last == 0 || last > UINT32_MAX) return false;
  *pid = static_cast<uint32_t>(last);
  return true;
}

uint64_t PidNamespaceAt(const char* ns_path) {
  char link[64];
  ssize_t n = readlink(ns_path, link, sizeof link - 1);
  if (n > 0) {
    link[n] = '\0';
    uint64_t v = 0;
    if (strncmp(link, "pid:[", 5) == 0 && ParseUint(link + 5, &v)) return v;
  }
  struct stat st;
  if (stat(ns_path, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

uint64_t SelfPidNamespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

}  // namespace gslice
