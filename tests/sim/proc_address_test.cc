// cuGetProcAddress: names and versions to entry points, the per-thread flag, errors, and
// agreement with the library's export list.
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <set>

#include "sim_test.h"

namespace gslice::test {
namespace {

using ProcAddressTest = SimTest;

void* Exported(const char* symbol) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void* p = lib != nullptr ? dlsym(lib, symbol) : nullptr;
  if (lib != nullptr) dlclose(lib);
  return p;
}

void* Resolve(const char* name, int version, cuuint64_t flags, CUresult* r = nullptr,
              CUdriverProcAddressQueryResult* status = nullptr) {
  void* fn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult st;
  CUresult res = cuGetProcAddress(name, &fn, version, flags, &st);
  if (r != nullptr) *r = res;
  if (status != nullptr) *status = st;
  return fn;
}

TEST_F(ProcAddressTest, ResolvesTheVersionedEntryPoints) {
  EXPECT_EQ(Resolve("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_DEFAULT), Exported("cuMemAlloc_v2"));
  EXPECT_EQ(Resolve("cuCtxCreate", 13000, 0), Exported("cuCtxCreate_v4"));
  EXPECT_EQ(Resolve("cuCtxCreate", 12000, 0), Exported("cuCtxCreate_v3"));
  EXPECT_EQ(Resolve("cuCtxCreate", 3020, 0), Exported("cuCtxCreate_v2"));
  EXPECT_EQ(Resolve("cuGetProcAddress", 12000, 0), Exported("cuGetProcAddress_v2"));
  EXPECT_EQ(Resolve("cuDeviceGetUuid", 11040, 0), Exported("cuDeviceGetUuid_v2"));
  EXPECT_EQ(Resolve("cuCheckpointProcessLock", 12080, 0), Exported("cuCheckpointProcessLock"));
  CUresult r;
  CUdriverProcAddressQueryResult st;
  // Versions before 3.2 get the first cuCtxCreate, as from the driver.
  EXPECT_NE(Resolve("cuCtxCreate", 2000, 0, &r, &st), nullptr);
  EXPECT_CU(CUDA_SUCCESS, r);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
  // An entry point newer than the version asked for is not handed out.
  EXPECT_EQ(Resolve("cuCheckpointProcessLock", 12000, 0, &r, &st), nullptr);
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, r);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(Resolve("cuNoSuchFunction", 13000, 0, &r, &st), nullptr);
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, r);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  Resolve("cuInit", 13000, 0x100, &r);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, r);
}

TEST_F(ProcAddressTest, PerThreadFlagSelectsThePerThreadVariants) {
  const auto pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const auto legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  EXPECT_EQ(Resolve("cuStreamSynchronize", 13000, pt), Exported("cuStreamSynchronize_ptsz"));
  EXPECT_EQ(Resolve("cuStreamSynchronize", 13000, legacy), Exported("cuStreamSynchronize"));
  EXPECT_EQ(Resolve("cuMemcpyHtoD", 13000, pt), Exported("cuMemcpyHtoD_v2_ptds"));
  EXPECT_EQ(Resolve("cuLaunchKernel", 13000, pt), Exported("cuLaunchKernel_ptsz"));
  EXPECT_EQ(Resolve("cuMemAlloc", 13000, pt), Exported("cuMemAlloc_v2"));  // no stream: same
}

TEST_F(ProcAddressTest, PerThreadDefaultStreamIsItsOwnStream) {
  using Sync = CUresult (*)(CUstream);
  using Busy = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void**, void**);
  auto launch_pt = reinterpret_cast<Busy>(
      Resolve("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  auto query_pt = reinterpret_cast<Sync>(
      Resolve("cuStreamQuery", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  ASSERT_NE(launch_pt, nullptr);
  ASSERT_NE(query_pt, nullptr);
  uint64_t us = 150000;
  void* args[] = {&us};
  CHECK_CU(launch_pt(busy_, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
  EXPECT_CU(CUDA_ERROR_NOT_READY, query_pt(nullptr));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(CU_STREAM_PER_THREAD));
  CHECK_CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  EXPECT_CU(CUDA_SUCCESS, query_pt(nullptr));
}

TEST_F(ProcAddressTest, EveryExportIsReachableThroughGetProcAddress) {
  // The library's export list, read off the mapped file.
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        std::string name = info->dlpi_name;
        if (name.size() >= 12 && name.compare(name.size() - 12, 12, "libcuda.so.1") == 0) {
          *static_cast<std::string*>(out) = name;
        }
        return 0;
      },
      &path);
  ASSERT_FALSE(path.empty());
  FILE* nm = popen(("nm -D --defined-only " + path).c_str(), "r");
  ASSERT_NE(nm, nullptr);
  std::set<std::string> exports;
  char line[512];
  while (std::fgets(line, sizeof line, nm) != nullptr) {
    char addr[64], type[8], name[256];
    if (std::sscanf(line, "%63s %7s %255s", addr, type, name) == 3 && name[0] == 'c') {
      exports.insert(name);
    }
  }
  pclose(nm);
  ASSERT_GT(exports.size(), 100u);
  const int versions[] = {2000, 2010, 2020, 3000, 3020, 4000, 4010, 5000, 5050, 6000, 6050, 7000,
                          9000, 9020, 10000, 10020, 11000, 11020, 11030, 11040, 11060, 12000, 12030, 12050, 12080, 13000};
  std::set<void*> reachable;
  for (const std::string& e : exports) {
    std::string base = e;
    for (const char* sfx : {"_ptsz", "_ptds"}) {
      if (base.size() > 5 && base.compare(base.size() - 5, 5, sfx) == 0) base.resize(base.size() - 5);
    }
    if (base.size() > 3 && base[base.size() - 3] == '_' && base[base.size() - 2] == 'v') {
      base.resize(base.size() - 3);
    }
    for (int v : versions) {
      for (cuuint64_t f : {CU_GET_PROC_ADDRESS_LEGACY_STREAM, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}) {
        void* fn = nullptr;
        if (cuGetProcAddress(base.c_str(), &fn, v, f, nullptr) == CUDA_SUCCESS) reachable.insert(fn);
      }
    }
  }
  for (const std::string& e : exports) {
    EXPECT_TRUE(reachable.count(Exported(e.c_str())) != 0) << e << " is exported but not listed";
  }
}

}  // namespace
}  // namespace gslice::test
