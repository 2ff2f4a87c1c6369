/* A stand-in for the real libnvidia-ml.so.1 in nvml_table_log.sh's self-test: a few
 * exports and one private table (size header, three slots, one data word) whose slots take
 * stack and floating-point arguments, so the logger's forwarders and trampolines are
 * checked to pass both through. Built with -DFAKE_CUDA it is a libcuda.so.1 instead: the
 * same table behind cuGetExportTable, under a UUID starting 69a28e9f. */
#include <string.h>

#ifdef FAKE_CUDA
#define P(name) cuFake_##name
#define TABLE_FN cuGetExportTable
#define UUID0 0x69, 0xa2, 0x8e, 0x9f
#else
#define P(name) nvml##name
#define TABLE_FN nvmlInternalGetExportTable
#define UUID0 0x6c, 0x3e, 0xfe, 0xc4
#endif

static int g_data = 42;

int P(Init_v2)(void) { return 0; }
int P(Shutdown)(void) { return 0; }
int P(DeviceGetCount_v2)(unsigned *n) {
  *n = 2;
  return 0;
}
/* Floating-point arguments and result through a plain forwarder. It calls an export of
 * its own, as a library may: that call must stay inside this library (not show in the
 * log as the caller's). */
double P(FakeScale)(double x, float y, int k) {
  if (P(Init_v2)() != 0) return -1;
  return x * y + k;
}
/* Two stack arguments through a plain forwarder. */
long P(FakeSum8)(long a, long b, long c, long d, long e, long f, long g, long h) {
  return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}
int *P(FakeDataPtr)(void) { return &g_data; }

static long slot1(long a, long b, long c, long d, long e, long f, long g, long h) {
  return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}
static int slot2(double x, int *out, float y, char *name, unsigned len) {
  *out = (int)(x * y);
  strncpy(name, "fake-gpu", len);
  return 7;
}
static double slot3(double a, double b) { return a - b; }

static const void *g_table[5] = {(const void *)(5 * 8), (const void *)slot1, (const void *)slot2,
                                 (const void *)slot3, (const void *)&g_data};
static const unsigned char g_uuid[16] = {UUID0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

int TABLE_FN(const void **table, const void *uuid) {
  if (!table || !uuid) return 2;
  if (memcmp(uuid, g_uuid, 16) != 0) return 13;
  *table = g_table;
  return 0;
}

#ifdef FAKE_CUDA
/* Entry points by name, as the driver's cuGetProcAddress hands them out. */
int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                        void *status) {
  (void)version, (void)flags, (void)status;
  if (!symbol || !pfn) return 1;
  if (strcmp(symbol, "cuGetExportTable") == 0) *pfn = (void *)cuGetExportTable;
  else if (strcmp(symbol, "cuGetProcAddress") == 0) *pfn = (void *)cuGetProcAddress_v2;
  else return 500;
  return 0;
}
#endif
