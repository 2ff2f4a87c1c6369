/* A stand-in for nvidia-smi in nvml_table_log.sh's self-test: loads libnvidia-ml.so.1 as
 * nvidia-smi does (by soname; $NVML_REAL when none is on the search path), calls plain
 * exports and the private table's slots, and exits 0 only when every result is right. */
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

int main(void) {
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!h && getenv("NVML_REAL")) h = dlopen(getenv("NVML_REAL"), RTLD_NOW);
  CHECK(h);
  int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
  int (*count)(unsigned *) = (int (*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2");
  double (*scale)(double, float, int) = (double (*)(double, float, int))dlsym(h, "nvmlFakeScale");
  long (*sum8)(long, long, long, long, long, long, long, long) =
      (long (*)(long, long, long, long, long, long, long, long))dlsym(h, "nvmlFakeSum8");
  int *(*data)(void) = (int *(*)(void))dlsym(h, "nvmlFakeDataPtr");
  int (*get)(const void **, const void *) =
      (int (*)(const void **, const void *))dlsym(h, "nvmlInternalGetExportTable");
  CHECK(init && count && scale && sum8 && data && get);
  CHECK(init() == 0);
  unsigned n = 0;
  CHECK(count(&n) == 0 && n == 2);
  CHECK(scale(1.5, 4.0f, 3) == 9.0);
  CHECK(sum8(1, 1, 1, 1, 1, 1, 1, 100) == 1 + 2 + 3 + 4 + 5 + 6 + 7 + 800);

  static const unsigned char uuid[16] = {0x6c, 0x3e, 0xfe, 0xc4, 1, 2, 3, 4,
                                         5,    6,    7,    8,    9, 10, 11, 12};
  static const unsigned char other[16] = {0x69, 0xa2, 0x8e, 0x9f};
  const void **t = NULL;
  CHECK(get((const void **)&t, other) == 13);
  CHECK(get((const void **)&t, uuid) == 0 && t);
  CHECK((unsigned long)t[0] == 40);      /* size header kept */
  CHECK(t[4] == (const void *)data());   /* data word kept */
  long (*s1)(long, long, long, long, long, long, long, long) =
      (long (*)(long, long, long, long, long, long, long, long))t[1];
  CHECK(s1(1, 2, 3, 4, 5, 6, 7, 8) == 1 + 4 + 9 + 16 + 25 + 36 + 49 + 64);
  int out = 0;
  char name[32] = "";
  int (*s2)(double, int *, float, char *, unsigned) = (int (*)(double, int *, float, char *, unsigned))t[2];
  CHECK(s2(2.5, &out, 4.0f, name, sizeof name) == 7 && out == 10 && strcmp(name, "fake-gpu") == 0);
  double (*s3)(double, double) = (double (*)(double, double))t[3];
  CHECK(s3(10.25, 0.125) == 10.125);
  printf("fake_smi: all checks passed\n");
  return 0;
}
