/* A measuring libnvidia-ml.so.1 (x86-64 Linux, libc + libdl only): put first on
 * LD_LIBRARY_PATH, it loads the real NVML by absolute path ($NVML_REAL), forwards every
 * export to it and logs, to the file $NVML_TABLE_LOG (appended; stderr when unset):
 *   C <name>                          every forwarded call, in order ($NVL_CALLS=once:
 *                                     each name's first call only)
 *   G nvml <uuid> rc=.. table=.. head=.. size_word=.. caller=<object>
 *                                     every nvmlInternalGetExportTable, with the table's
 *                                     raw first 16 bytes, its first word and who asked, then
 *   W nvml <uuid> words=.. wrapped=.. code_slots=..   the copy handed out
 *   T <pid>.n<seq> <uuid> slot=<i> a0..a5 s0 s1 x0 x1 caller=<object>+<offset>
 *                                     a call through a slot of such a table (integer
 *                                     argument registers, the first two stack words,
 *                                     the low halves of xmm0/xmm1, who called), then
 *   M <pid>.n<seq> a<k> before|after <ptr> <hex>   the bytes at each pointer-looking
 *                                     argument, before and after the call
 *   R <pid>.n<seq> <uuid> slot=<i> rax=.. rdx=.. xmm0=..   its result
 *   S <uuid> slot=<i> caller=<object> calls=<n> logged=<m>
 *                                     at exit: how often each object called each slot
 *
 * $NVL_SLOT_LOG_FIRST=N logs only the first N calls of each slot by each calling object in
 * full (T, M, R); later ones are only counted (S). Unset or 0: every call.
 * The table handed out is a copy of the real one: words that point into an executable
 * mapping (the slots) become logging trampolines, every other word (the size header, data
 * pointers) is kept as it is. $NVML_TABLE_PASSTHRU=1 hands out the real table instead;
 * $NVML_LOG_BYTES (default 64, at most 4096) sets how many bytes each M line shows.
 *
 * The forwarders themselves (one per export of the real library) are generated where the
 * real library is, by nvml_table_log.sh: an assembly stub per name that loads its index
 * into r11 and jumps to nvl_fwd_common below, and the name list nvl_fwd_names[].
 *
 * Contracts and risks:
 * - Forwarders touch no argument: all integer argument registers, rax (the vector count
 *   of variadic calls) and xmm0-7 are saved around the logging and restored, then the stub
 *   jumps to the real function, so stack arguments and the return are the real function's.
 * - Slot trampolines must regain control after the call, so they call the real slot from
 *   their own frame: integer and vector argument registers are passed on unchanged, and
 *   the caller's first 8 stack words are copied as stack arguments. A slot taking more
 *   than 8 stack words (e.g. a large struct by value) would see wrong values beyond them.
 *   rax, rdx, xmm0 and xmm1 are returned as the real slot left them (x87 st0 is not: a
 *   long double result would be lost).
 * - Memory is read with process_vm_readv on this process (or pread of /proc/self/mem
 *   where a seccomp filter refuses it), so a bad pointer is logged as unreadable, never
 *   dereferenced.
 * - A caller that checks the table's address against the real library (as CUDA's
 *   integrity table does) would notice the copy; run with NVML_TABLE_PASSTHRU=1 to tell
 *   that failure apart from a slot's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "nvml_table_logger: x86-64 only"
#endif

/* Built with -DNVL_CUDA the same logger is a libcuda.so.1 ($CUDA_REAL) whose hand-written
 * export is cuGetExportTable: it shows what NVML (or anything else in the process) asks of
 * the driver's private tables. There only the tables named in $NVL_WRAP_ONLY (UUID
 * prefixes, comma-separated; default 69a28e9f) are copied, because cudart checks the
 * addresses of others (the integrity table's hash binds them); the rest are logged and
 * handed out as they are. */
#ifdef NVL_CUDA
#define NVL_TABLE_FN cuGetExportTable
#define NVL_TABLE_FN_NAME "cuGetExportTable"
#define NVL_TAG "cuda"
#define NVL_SEQ "c" /* call ids: <pid>.c<seq> */
#define NVL_REAL_ENV "CUDA_REAL"
#define NVL_MISSING_RC 500 /* CUDA_ERROR_NOT_FOUND */
#define NVL_WRAP_DEFAULT "69a28e9f"
#else
#define NVL_TABLE_FN nvmlInternalGetExportTable
#define NVL_TABLE_FN_NAME "nvmlInternalGetExportTable"
#define NVL_TAG "nvml"
#define NVL_SEQ "n" /* call ids: <pid>.n<seq> */
#define NVL_REAL_ENV "NVML_REAL"
#define NVL_MISSING_RC 13 /* NVML_ERROR_FUNCTION_NOT_FOUND */
#define NVL_WRAP_DEFAULT ""
#endif

enum { kPool = 4096, kMaxWords = 2048, kMaxFwd = 8192 };

/* Generated next to the forwarders (nvml_table_log.sh); weak, so the logger also builds
 * on its own. Hidden, like every symbol of the logger's own: with two loggers in one
 * process (libnvidia-ml and libcuda), each must bind to its own list. */
extern const char *const nvl_fwd_names[] __attribute__((weak, visibility("hidden")));
extern const unsigned nvl_fwd_count __attribute__((weak, visibility("hidden")));

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void *g_real;
static int g_log_fd = 2;
static int g_mem_fd = -1;
static unsigned g_bytes = 64;
static int g_passthru;
static int g_calls_once;
static unsigned long g_slot_log_first;
static const char *g_wrap_only;
static const char *g_wrap_except;
static void *g_fwd_target[kMaxFwd];
static unsigned char g_fwd_logged[kMaxFwd];
static unsigned long g_seq;

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
  char buf[12288];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  /* One write per line: O_APPEND keeps lines of threads and processes whole. */
  ssize_t w = write(g_log_fd, buf, (size_t)n);
  (void)w;
}

static void init_once(void) {
  const char *path = getenv("NVML_TABLE_LOG");
  if (path && *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) g_log_fd = fd;
  }
  const char *b = getenv("NVML_LOG_BYTES");
  if (b && *b) {
    long v = strtol(b, NULL, 10);
    if (v > 0 && v <= 4096) g_bytes = (unsigned)v;
  }
  const char *p = getenv("NVML_TABLE_PASSTHRU");
  g_passthru = p && *p == '1';
  g_wrap_only = getenv("NVL_WRAP_ONLY");
  if (!g_wrap_only) g_wrap_only = NVL_WRAP_DEFAULT;
  g_wrap_except = getenv("NVL_WRAP_EXCEPT");
  const char *calls = getenv("NVL_CALLS");
  g_calls_once = calls && strcmp(calls, "once") == 0;
  const char *first = getenv("NVL_SLOT_LOG_FIRST");
  if (first && *first) g_slot_log_first = strtoul(first, NULL, 10);
  const char *real = getenv(NVL_REAL_ENV);
  if (!real || real[0] != '/') {
    log_line("E %s %s must name the real library by absolute path (got %s)", NVL_TAG,
             NVL_REAL_ENV, real ? real : "nothing");
    return;
  }
  /* RTLD_DEEPBIND: the real library's calls to its own exports bind to itself, not to
   * this logger's forwarders (which may come first in the global scope), so the log holds
   * the program's calls only and the real library's constructors never re-enter here. */
  g_real = dlopen(real, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!g_real) log_line("E %s dlopen %s: %s", NVL_TAG, real, dlerror());
  else log_line("I %s real %s pid=%d", NVL_TAG, real, (int)getpid());
}

static void ensure_init(void) { pthread_once(&g_once, init_once); }

/* Reads up to n bytes at addr without dereferencing it; returns the count read. */
static size_t safe_read(uintptr_t addr, void *out, size_t n) {
  struct iovec local = {.iov_base = out, .iov_len = n};
  struct iovec remote = {.iov_base = (void *)addr, .iov_len = n};
  ssize_t r = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (r > 0) return (size_t)r;
  if (r < 0 && (errno == EPERM || errno == ENOSYS)) {
    if (g_mem_fd < 0) g_mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    if (g_mem_fd >= 0) {
      ssize_t q = pread(g_mem_fd, out, n, (off_t)addr);
      if (q > 0) return (size_t)q;
    }
  }
  /* A range whose tail is unmapped: read what precedes the page end. */
  uintptr_t page_end = (addr | 4095) + 1;
  if (addr + n > page_end && page_end > addr) {
    remote.iov_len = local.iov_len = page_end - addr;
    r = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (r > 0) return (size_t)r;
  }
  return 0;
}

static int looks_like_pointer(uint64_t v) { return v >= 0x10000 && v < 0x800000000000ull; }

static void hex(char *out, const unsigned char *p, size_t n) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = d[p[i] >> 4];
    out[2 * i + 1] = d[p[i] & 15];
  }
  out[2 * n] = 0;
}

static void uuid_text(char *out, const unsigned char u[16]) {
  /* Bytes in memory order, dashed like the project's other traces (prefix = first 4). */
  snprintf(out, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
           u[13], u[14], u[15]);
}

static void log_mem(unsigned long seq, int arg, const char *when, uint64_t ptr) {
  unsigned char buf[4096];
  char text[8200];
  size_t got = safe_read((uintptr_t)ptr, buf, g_bytes);
  if (got == 0) {
    log_line("M %d." NVL_SEQ "%lu a%d %s 0x%llx unreadable", (int)getpid(), seq, arg, when,
             (unsigned long long)ptr);
    return;
  }
  hex(text, buf, got);
  log_line("M %d." NVL_SEQ "%lu a%d %s 0x%llx %s", (int)getpid(), seq, arg, when, (unsigned long long)ptr,
           text);
}

/* ---- plain forwarders ---------------------------------------------------------------- */

void *nvl_fwd_resolve(unsigned idx) __attribute__((used, visibility("hidden")));
void *nvl_fwd_resolve(unsigned idx) {
  ensure_init();
  if (!nvl_fwd_names || idx >= kMaxFwd || idx >= nvl_fwd_count) abort();
  const char *name = nvl_fwd_names[idx];
  void *fn = __atomic_load_n(&g_fwd_target[idx], __ATOMIC_ACQUIRE);
  if (!fn && g_real) {
    fn = dlsym(g_real, name);
    __atomic_store_n(&g_fwd_target[idx], fn, __ATOMIC_RELEASE);
  }
  if (!g_calls_once || !__atomic_exchange_n(&g_fwd_logged[idx], 1, __ATOMIC_RELAXED))
    log_line("C %s", name);
  if (!fn) {
    /* Every generated name is a defined export of the real library, so this means the
     * real library failed to load; there is nothing sensible to call. */
    log_line("E %s: no real function (%s not loaded)", name, NVL_REAL_ENV);
    _exit(86);
  }
  return fn;
}

/* Entered from a generated stub with r11 = the name's index and the caller's arguments
 * untouched. Stack at entry: return address, rsp = 8 mod 16. */
__asm__(
    ".text\n"
    ".globl nvl_fwd_common\n"
    ".hidden nvl_fwd_common\n"
    ".type nvl_fwd_common,@function\n"
    "nvl_fwd_common:\n"
    "  push %rdi\n push %rsi\n push %rdx\n push %rcx\n push %r8\n push %r9\n push %rax\n"
    "  sub $128, %rsp\n" /* 7 pushes + 128: rsp = 0 mod 16 for the call */
    "  movdqu %xmm0, 0(%rsp)\n movdqu %xmm1, 16(%rsp)\n movdqu %xmm2, 32(%rsp)\n"
    "  movdqu %xmm3, 48(%rsp)\n movdqu %xmm4, 64(%rsp)\n movdqu %xmm5, 80(%rsp)\n"
    "  movdqu %xmm6, 96(%rsp)\n movdqu %xmm7, 112(%rsp)\n"
    "  mov %r11d, %edi\n"
    "  call nvl_fwd_resolve\n"
    "  mov %rax, %r11\n"
    "  movdqu 0(%rsp), %xmm0\n movdqu 16(%rsp), %xmm1\n movdqu 32(%rsp), %xmm2\n"
    "  movdqu 48(%rsp), %xmm3\n movdqu 64(%rsp), %xmm4\n movdqu 80(%rsp), %xmm5\n"
    "  movdqu 96(%rsp), %xmm6\n movdqu 112(%rsp), %xmm7\n"
    "  add $128, %rsp\n"
    "  pop %rax\n pop %r9\n pop %r8\n pop %rcx\n pop %rdx\n pop %rsi\n pop %rdi\n"
    "  jmp *%r11\n"
    ".size nvl_fwd_common, .-nvl_fwd_common\n");

/* ---- export-table trampolines ------------------------------------------------------- */

/* The frame nvl_slot_common builds; offsets are fixed by the assembly below. */
struct slot_frame {
  uint64_t gp[6];       /* 0: rdi rsi rdx rcx r8 r9 */
  uint64_t rax;         /* 48 */
  uint64_t seq;         /* 56: set by nvl_slot_before for nvl_slot_after */
  uint8_t xmm[8][16];   /* 64 */
  uint64_t stack[8];    /* 192: the caller's first 8 stack words */
  uint64_t ret_rax;     /* 256 */
  uint64_t ret_rdx;     /* 264 */
  uint8_t ret_xmm0[16]; /* 272 */
  uint8_t ret_xmm1[16]; /* 288 */
  uint64_t caller;      /* 304: the return address */
  uint64_t pad;         /* 312 */
};
_Static_assert(sizeof(struct slot_frame) == 320, "slot_frame layout is the assembly's");

struct tramp {
  unsigned char uuid[16];
  unsigned slot;
  void *real;
};
static struct tramp g_tramp[kPool];
static unsigned g_tramp_used;

/* Calls of each trampoline by each calling object (the first kCallers objects; later ones
 * share the last row), for the S lines at exit and $NVL_SLOT_LOG_FIRST. */
enum { kCallers = 6 };
struct caller_count {
  const void *base;
  const char *name; /* dladdr's, valid while the object stays loaded */
  unsigned long calls;
};
static struct caller_count g_counts[kPool][kCallers];
static pthread_mutex_t g_count_mu = PTHREAD_MUTEX_INITIALIZER;

/* Counts this call; returns whether it is logged in full. */
static int count_call(unsigned k, const void *base, const char *name) {
  pthread_mutex_lock(&g_count_mu);
  struct caller_count *row = g_counts[k];
  int i = 0;
  while (i < kCallers - 1 && row[i].name && row[i].base != base) ++i;
  if (!row[i].name) row[i] = (struct caller_count){.base = base, .name = name};
  else if (row[i].base != base) row[i].name = "(more-callers)"; /* the last row, shared */
  unsigned long n = ++row[i].calls;
  pthread_mutex_unlock(&g_count_mu);
  return g_slot_log_first == 0 || n <= g_slot_log_first;
}

void *nvl_slot_before(unsigned k, struct slot_frame *f) __attribute__((used, visibility("hidden")));
void *nvl_slot_before(unsigned k, struct slot_frame *f) {
  const struct tramp *t = &g_tramp[k];
  Dl_info info;
  const char *who = "?";
  if (dladdr((void *)(uintptr_t)f->caller, &info) && info.dli_fname) {
    who = strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname;
  }
  if (!count_call(k, who[0] != '?' ? info.dli_fbase : NULL, who)) {
    f->seq = 0; /* counted, not logged */
    return t->real;
  }
  char u[40];
  uuid_text(u, t->uuid);
  unsigned long seq = __atomic_add_fetch(&g_seq, 1, __ATOMIC_RELAXED);
  f->seq = seq;
  uint64_t x0, x1;
  memcpy(&x0, f->xmm[0], 8);
  memcpy(&x1, f->xmm[1], 8);
  log_line("T %d." NVL_SEQ "%lu %s slot=%u tid=%ld a0=0x%llx a1=0x%llx a2=0x%llx a3=0x%llx a4=0x%llx "
           "a5=0x%llx s0=0x%llx s1=0x%llx x0=0x%llx x1=0x%llx caller=%s+0x%llx",
           (int)getpid(), seq, u, t->slot, (long)syscall(SYS_gettid),
           (unsigned long long)f->gp[0], (unsigned long long)f->gp[1],
           (unsigned long long)f->gp[2], (unsigned long long)f->gp[3],
           (unsigned long long)f->gp[4], (unsigned long long)f->gp[5],
           (unsigned long long)f->stack[0], (unsigned long long)f->stack[1],
           (unsigned long long)x0, (unsigned long long)x1, who,
           (unsigned long long)(f->caller - (uintptr_t)(who[0] != '?' ? info.dli_fbase : 0)));
  for (int i = 0; i < 6; ++i)
    if (looks_like_pointer(f->gp[i])) log_mem(seq, i, "before", f->gp[i]);
  return t->real;
}

void nvl_slot_after(unsigned k, struct slot_frame *f) __attribute__((used, visibility("hidden")));
void nvl_slot_after(unsigned k, struct slot_frame *f) {
  if (f->seq == 0) return;
  const struct tramp *t = &g_tramp[k];
  char u[40];
  uuid_text(u, t->uuid);
  for (int i = 0; i < 6; ++i)
    if (looks_like_pointer(f->gp[i])) log_mem(f->seq, i, "after", f->gp[i]);
  uint64_t x0;
  memcpy(&x0, f->ret_xmm0, 8);
  log_line("R %d." NVL_SEQ "%lu %s slot=%u rax=0x%llx (%d) rdx=0x%llx xmm0=0x%llx", (int)getpid(),
           (unsigned long)f->seq, u, t->slot, (unsigned long long)f->ret_rax,
           (int)(uint32_t)f->ret_rax, (unsigned long long)f->ret_rdx, (unsigned long long)x0);
}

/* Trampoline k sits at nvl_tramp_base + 16*k: r11d = k, then nvl_slot_common. */
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl nvl_tramp_base\n"
    ".hidden nvl_tramp_base\n"
    "nvl_tramp_base:\n"
    ".set nvl_k, 0\n"
    ".rept 4096\n"
    "  movl $nvl_k, %r11d\n"
    "  jmp nvl_slot_common\n"
    "  .p2align 4\n"
    "  .set nvl_k, nvl_k + 1\n"
    ".endr\n"
    "nvl_tramp_end:\n"
    "nvl_slot_common:\n"
    "  push %rbp\n"
    "  mov %rsp, %rbp\n" /* 8(rbp): return address; 16(rbp): caller's stack arguments */
    "  push %rbx\n push %r12\n"
    "  sub $320, %rsp\n" /* rsp = 0 mod 16 */
    "  mov %rdi, 0(%rsp)\n mov %rsi, 8(%rsp)\n mov %rdx, 16(%rsp)\n mov %rcx, 24(%rsp)\n"
    "  mov %r8, 32(%rsp)\n mov %r9, 40(%rsp)\n mov %rax, 48(%rsp)\n"
    "  movdqu %xmm0, 64(%rsp)\n movdqu %xmm1, 80(%rsp)\n movdqu %xmm2, 96(%rsp)\n"
    "  movdqu %xmm3, 112(%rsp)\n movdqu %xmm4, 128(%rsp)\n movdqu %xmm5, 144(%rsp)\n"
    "  movdqu %xmm6, 160(%rsp)\n movdqu %xmm7, 176(%rsp)\n"
    "  mov 16(%rbp), %r10\n mov %r10, 192(%rsp)\n mov 24(%rbp), %r10\n mov %r10, 200(%rsp)\n"
    "  mov 32(%rbp), %r10\n mov %r10, 208(%rsp)\n mov 40(%rbp), %r10\n mov %r10, 216(%rsp)\n"
    "  mov 48(%rbp), %r10\n mov %r10, 224(%rsp)\n mov 56(%rbp), %r10\n mov %r10, 232(%rsp)\n"
    "  mov 64(%rbp), %r10\n mov %r10, 240(%rsp)\n mov 72(%rbp), %r10\n mov %r10, 248(%rsp)\n"
    "  mov 8(%rbp), %r10\n mov %r10, 304(%rsp)\n"
    "  mov %r11d, %ebx\n"
    "  mov %rsp, %r12\n"
    "  mov %ebx, %edi\n mov %r12, %rsi\n"
    "  call nvl_slot_before\n"
    "  mov %rax, %r11\n"
    "  sub $64, %rsp\n"
    "  mov 192(%r12), %r10\n mov %r10, 0(%rsp)\n mov 200(%r12), %r10\n mov %r10, 8(%rsp)\n"
    "  mov 208(%r12), %r10\n mov %r10, 16(%rsp)\n mov 216(%r12), %r10\n mov %r10, 24(%rsp)\n"
    "  mov 224(%r12), %r10\n mov %r10, 32(%rsp)\n mov 232(%r12), %r10\n mov %r10, 40(%rsp)\n"
    "  mov 240(%r12), %r10\n mov %r10, 48(%rsp)\n mov 248(%r12), %r10\n mov %r10, 56(%rsp)\n"
    "  mov 0(%r12), %rdi\n mov 8(%r12), %rsi\n mov 16(%r12), %rdx\n mov 24(%r12), %rcx\n"
    "  mov 32(%r12), %r8\n mov 40(%r12), %r9\n mov 48(%r12), %rax\n"
    "  movdqu 64(%r12), %xmm0\n movdqu 80(%r12), %xmm1\n movdqu 96(%r12), %xmm2\n"
    "  movdqu 112(%r12), %xmm3\n movdqu 128(%r12), %xmm4\n movdqu 144(%r12), %xmm5\n"
    "  movdqu 160(%r12), %xmm6\n movdqu 176(%r12), %xmm7\n"
    "  call *%r11\n"
    "  add $64, %rsp\n"
    "  mov %rax, 256(%r12)\n mov %rdx, 264(%r12)\n"
    "  movdqu %xmm0, 272(%r12)\n movdqu %xmm1, 288(%r12)\n"
    "  mov %ebx, %edi\n mov %r12, %rsi\n"
    "  call nvl_slot_after\n"
    "  mov 256(%r12), %rax\n mov 264(%r12), %rdx\n"
    "  movdqu 272(%r12), %xmm0\n movdqu 288(%r12), %xmm1\n"
    "  lea -16(%rbp), %rsp\n"
    "  pop %r12\n pop %rbx\n pop %rbp\n"
    "  ret\n");

extern const char nvl_tramp_base[] __attribute__((visibility("hidden")));

/* Whether addr lies in an executable mapping of this process (read from /proc/self/maps
 * once per table handed out). */
struct range {
  uintptr_t lo, hi;
};
static size_t exec_ranges(struct range *out, size_t cap) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  static char buf[1 << 20];
  size_t len = 0;
  ssize_t r;
  while (len < sizeof buf - 1 && (r = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
    len += (size_t)r;
  close(fd);
  buf[len] = 0;
  size_t n = 0;
  for (char *line = buf; line && *line && n < cap;) {
    char *next = strchr(line, '\n');
    if (next) *next++ = 0;
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && perms[2] == 'x')
      out[n++] = (struct range){lo, hi};
    line = next;
  }
  return n;
}

struct wrapped {
  unsigned char uuid[16];
  const void *real_table;
  uint64_t *copy;
};
static struct wrapped g_wrapped[64];
static unsigned g_wrapped_n;

static const void *wrap_table(const unsigned char uuid[16], const void *table) {
  for (unsigned i = 0; i < g_wrapped_n; ++i)
    if (g_wrapped[i].real_table == table && !memcmp(g_wrapped[i].uuid, uuid, 16))
      return g_wrapped[i].copy;
  if (g_wrapped_n == sizeof g_wrapped / sizeof g_wrapped[0]) return NULL;

  char u[40];
  uuid_text(u, uuid);
  uint64_t head[2] = {0, 0};
  size_t got = safe_read((uintptr_t)table, head, sizeof head);
  /* A size header (bytes, as in CUDA's tables) gives the word count; without one, copy
   * the readable words up to kMaxWords and wrap those that point at code. */
  size_t words;
  int sized = got >= 8 && head[0] >= 16 && head[0] <= 8 * (uint64_t)kMaxWords && head[0] % 8 == 0;
  if (sized) {
    words = (size_t)(head[0] / 8);
  } else {
    words = 0;
    uint64_t w;
    while (words < kMaxWords && safe_read((uintptr_t)table + 8 * words, &w, 8) == 8) ++words;
  }
  uint64_t *copy = calloc(words ? words : 1, 8);
  if (!copy) return NULL;
  size_t readn = safe_read((uintptr_t)table, copy, 8 * words) / 8;
  static struct range ranges[4096];
  size_t nr = exec_ranges(ranges, 4096);
  unsigned wrapped = 0;
  char slots[8192];
  size_t sl = 0;
  slots[0] = 0;
  for (size_t i = 0; i < readn; ++i) {
    uint64_t v = copy[i];
    int code = 0;
    for (size_t r = 0; r < nr && !code; ++r) code = v >= ranges[r].lo && v < ranges[r].hi;
    if (!code) continue;
    if (g_tramp_used == kPool) break;
    unsigned k = g_tramp_used++;
    memcpy(g_tramp[k].uuid, uuid, 16);
    g_tramp[k].slot = (unsigned)i;
    g_tramp[k].real = (void *)(uintptr_t)v;
    copy[i] = (uint64_t)(uintptr_t)(nvl_tramp_base + 16 * (size_t)k);
    ++wrapped;
    if (sl < sizeof slots - 16) sl += (size_t)snprintf(slots + sl, sizeof slots - sl, "%zu,", i);
  }
  log_line("W %s %s words=%zu sized=%d read=%zu wrapped=%u code_slots=%s", NVL_TAG, u, words,
           sized, readn, wrapped, slots);
  g_wrapped[g_wrapped_n++] = (struct wrapped){.real_table = table, .copy = copy};
  memcpy(g_wrapped[g_wrapped_n - 1].uuid, uuid, 16);
  return copy;
}

/* Whether UUID text u starts with one of the comma-separated prefixes in list. */
static int listed(const char *list, const char *u) {
  for (const char *p = list; p && *p;) {
    size_t n = strcspn(p, ",");
    if (n > 0 && n <= 36 && strncmp(u, p, n) == 0) return 1;
    p += n;
    if (*p == ',') ++p;
  }
  return 0;
}

/* Whether the table with this UUID text is to be copied: listed in $NVL_WRAP_ONLY (all when
 * that is empty) and not in $NVL_WRAP_EXCEPT. */
static int wrap_wanted(const char *u) {
  if (listed(g_wrap_except, u)) return 0;
  return !g_wrap_only || !*g_wrap_only || listed(g_wrap_only, u);
}

/* At exit (or unload): the S lines, every slot's calls per calling object. */
__attribute__((destructor)) static void report_counts(void) {
  pthread_mutex_lock(&g_count_mu);
  for (unsigned k = 0; k < g_tramp_used && k < kPool; ++k) {
    char u[40];
    uuid_text(u, g_tramp[k].uuid);
    for (int i = 0; i < kCallers && g_counts[k][i].name; ++i) {
      const struct caller_count *c = &g_counts[k][i];
      unsigned long logged = g_slot_log_first && c->calls > g_slot_log_first ? g_slot_log_first : c->calls;
      log_line("S %s slot=%u caller=%s calls=%lu logged=%lu", u, g_tramp[k].slot, c->name, c->calls, logged);
    }
  }
  pthread_mutex_unlock(&g_count_mu);
}

#ifdef NVL_CUDA
/* cudart (and possibly NVML) take driver entry points from cuGetProcAddress rather than
 * dlsym: the real one would hand out the real cuGetExportTable and bypass the log. These
 * forward to the real cuGetProcAddress{,_v2} and swap the three entry points this logger
 * stands in for (cuGetExportTable and the two lookups themselves) for its own; every
 * other answer is the driver's. */
typedef int (*nvl_gpa_fn)(const char *, void **, int, unsigned long long);
typedef int (*nvl_gpa2_fn)(const char *, void **, int, unsigned long long, void *);
int cuGetExportTable(const void **, const void *);
int cuGetProcAddress(const char *, void **, int, unsigned long long);
int cuGetProcAddress_v2(const char *, void **, int, unsigned long long, void *);

static void swap_own(void **pfn) {
  static const char *const names[3] = {"cuGetExportTable", "cuGetProcAddress",
                                       "cuGetProcAddress_v2"};
  void *const own[3] = {(void *)cuGetExportTable, (void *)cuGetProcAddress,
                        (void *)cuGetProcAddress_v2};
  if (!pfn || !*pfn || !g_real) return;
  for (int i = 0; i < 3; ++i) {
    void *real = dlsym(g_real, names[i]);
    if (real && *pfn == real) {
      *pfn = own[i];
      return;
    }
  }
}

__attribute__((visibility("default"))) int cuGetProcAddress(const char *symbol, void **pfn,
                                                            int version,
                                                            unsigned long long flags) {
  ensure_init();
  log_line("C cuGetProcAddress %s", symbol ? symbol : "(null)");
  nvl_gpa_fn real = g_real ? (nvl_gpa_fn)dlsym(g_real, "cuGetProcAddress") : NULL;
  if (!real) return NVL_MISSING_RC;
  int rc = real(symbol, pfn, version, flags);
  if (rc == 0) swap_own(pfn);
  return rc;
}

__attribute__((visibility("default"))) int cuGetProcAddress_v2(const char *symbol, void **pfn,
                                                               int version,
                                                               unsigned long long flags,
                                                               void *status) {
  ensure_init();
  log_line("C cuGetProcAddress_v2 %s", symbol ? symbol : "(null)");
  nvl_gpa2_fn real = g_real ? (nvl_gpa2_fn)dlsym(g_real, "cuGetProcAddress_v2") : NULL;
  if (!real) return NVL_MISSING_RC;
  int rc = real(symbol, pfn, version, flags, status);
  if (rc == 0) swap_own(pfn);
  return rc;
}
#endif

__attribute__((visibility("default"))) int NVL_TABLE_FN(const void **ppExportTable,
                                                        const void *pExportTableId) {
  ensure_init();
  const void *ret = __builtin_return_address(0);
  log_line("C %s", NVL_TABLE_FN_NAME);
  int (*real)(const void **, const void *) =
      g_real ? (int (*)(const void **, const void *))dlsym(g_real, NVL_TABLE_FN_NAME) : NULL;
  if (!real) {
    log_line("E %s real %s missing", NVL_TAG, NVL_TABLE_FN_NAME);
    return NVL_MISSING_RC;
  }
  unsigned char uuid[16] = {0};
  int have_uuid = pExportTableId && safe_read((uintptr_t)pExportTableId, uuid, 16) == 16;
  int rc = real(ppExportTable, pExportTableId);
  char u[40];
  if (have_uuid) uuid_text(u, uuid);
  else snprintf(u, sizeof u, "unreadable(%p)", pExportTableId);
  const void *table = NULL;
  if (ppExportTable) safe_read((uintptr_t)ppExportTable, &table, sizeof table);
  unsigned char head[16] = {0};
  char headtext[40] = "-";
  if (table && safe_read((uintptr_t)table, head, 16) == 16) hex(headtext, head, 16);
  uint64_t size = 0;
  memcpy(&size, head, 8);
  Dl_info info;
  const char *who = "?";
  if (dladdr(ret, &info) && info.dli_fname)
    who = strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname;
  log_line("G %s %s rc=%d table=%p head=%s size_word=%llu caller=%s", NVL_TAG, u, rc, table, headtext,
           table ? (unsigned long long)size : 0ull, who);
  if (rc != 0 || !table || !have_uuid || g_passthru || !wrap_wanted(u)) return rc;
  pthread_mutex_lock(&g_mu);
  const void *copy = wrap_table(uuid, table);
  pthread_mutex_unlock(&g_mu);
  if (copy) *ppExportTable = copy;
  return rc;
}
