/* A stand-in for nvidia-smi in nvml_table_log.sh's self-test: loads libnvidia-ml.so.1 as
 * nvidia-smi does (by soname; $NVML_REAL when none is on the search path), calls plain
 * exports and the private table's slots, does the same with libcuda.so.1 ($CUDA_REAL) and
 * its cuGetExportTable, and exits 0 only when every result is right. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                             \
  do {                                                       \
    if (!(c)) {                                              \
      fprintf(stderr, "fake_smi: check failed: %s\n", #c);   \
      return 1;                                              \
    }                                                        \
  } while (0)

static int check(const char *soname, const char *env, const char *prefix, const char *table_fn,
                 unsigned char u0, unsigned char u1, unsigned char u2, unsigned char u3) {
  char name[64];
  /* RTLD_GLOBAL: the library's symbols enter the global scope, as for a program linked
   * against it, the case in which a logger's forwarders could capture the real library's
   * calls to itself. */
  void *h = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
  if (!h && getenv(env)) h = dlopen(getenv(env), RTLD_NOW | RTLD_GLOBAL);
  CHECK(h);
#define SYM(s) (snprintf(name, sizeof name, "%s%s", prefix, s), dlsym(h, name))
  int (*init)(void) = (int (*)(void))SYM("Init_v2");
  int (*count)(unsigned *) = (int (*)(unsigned *))SYM("DeviceGetCount_v2");
  double (*scale)(double, float, int) = (double (*)(double, float, int))SYM("FakeScale");
  long (*sum8)(long, long, long, long, long, long, long, long) =
      (long (*)(long, long, long, long, long, long, long, long))SYM("FakeSum8");
  int *(*data)(void) = (int *(*)(void))SYM("FakeDataPtr");
  int (*get)(const void **, const void *) = (int (*)(const void **, const void *))dlsym(h, table_fn);
  CHECK(init && count && scale && sum8 && data && get);
  CHECK(init() == 0);
  unsigned n = 0;
  CHECK(count(&n) == 0 && n == 2);
  CHECK(scale(1.5, 4.0f, 3) == 9.0);
  CHECK(sum8(1, 1, 1, 1, 1, 1, 1, 100) == 1 + 2 + 3 + 4 + 5 + 6 + 7 + 800);

  const unsigned char uuid[16] = {u0, u1, u2, u3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  static const unsigned char other[16] = {0xd4, 0x08, 0x20, 0x55};
  const void **t = NULL;
  CHECK(get((const void **)&t, other) == 13);
  CHECK(get((const void **)&t, uuid) == 0 && t);
  CHECK((unsigned long)t[0] == 40);      /* size header kept */
  CHECK(t[4] == (const void *)data());   /* data word kept */
  long (*s1)(long, long, long, long, long, long, long, long) =
      (long (*)(long, long, long, long, long, long, long, long))t[1];
  /* Twice: a logger that logs only a slot's first calls counts the rest. */
  for (int i = 0; i < 2; ++i) CHECK(s1(1, 2, 3, 4, 5, 6, 7, 8) == 1 + 4 + 9 + 16 + 25 + 36 + 49 + 64);
  int out = 0;
  char gpu[32] = "";
  int (*s2)(double, int *, float, char *, unsigned) = (int (*)(double, int *, float, char *, unsigned))t[2];
  CHECK(s2(2.5, &out, 4.0f, gpu, sizeof gpu) == 7 && out == 10 && strcmp(gpu, "fake-gpu") == 0);
  double (*s3)(double, double) = (double (*)(double, double))t[3];
  CHECK(s3(10.25, 0.125) == 10.125);
  /* The driver's lookup must lead to the same table as dlsym does. */
  int (*gpa)(const char *, void **, int, unsigned long long, void *) =
      (int (*)(const char *, void **, int, unsigned long long, void *))dlsym(h, "cuGetProcAddress_v2");
  if (gpa) {
    void *fn = NULL;
    CHECK(gpa("cuGetExportTable", &fn, 13000, 0, NULL) == 0 && fn);
    const void **t2 = NULL;
    CHECK(((int (*)(const void **, const void *))fn)((const void **)&t2, uuid) == 0 && t2 == t);
  }
  return 0;
}

int main(void) {
  if (check("libnvidia-ml.so.1", "NVML_REAL", "nvml", "nvmlInternalGetExportTable", 0x6c, 0x3e,
            0xfe, 0xc4) != 0)
    return 1;
  if (check("libcuda.so.1", "CUDA_REAL", "cuFake_", "cuGetExportTable", 0x69, 0xa2, 0x8e, 0x9f) != 0)
    return 1;
  printf("fake_smi: all checks passed\n");
  return 0;
}
