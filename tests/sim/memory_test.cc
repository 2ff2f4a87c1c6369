// Every allocation path, capacity accounting, out of memory, copies and fills by content.
#include <cstring>
#include <vector>

#include "sim_test.h"

namespace gslice::test {
namespace {

using MemoryTest = SimTest;

TEST_F(MemoryTest, AllocationIsChargedAndFreeGivesItBack) {
  const size_t before = FreeMemory();
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 100 * kMiB));
  EXPECT_EQ(FreeMemory(), before - 100 * kMiB);
  CUdeviceptr base;
  size_t size;
  CHECK_CU(cuMemGetAddressRange(&base, &size, p + 5));
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 100 * kMiB);
  CHECK_CU(cuMemFree(p));
  EXPECT_EQ(FreeMemory(), before);
}

TEST_F(MemoryTest, OutOfMemoryAtCapacity) {
  const size_t before = FreeMemory();
  CUdeviceptr big;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&big, 2048 * kMiB));
  std::vector<CUdeviceptr> blocks;
  CUresult r = CUDA_SUCCESS;
  while (r == CUDA_SUCCESS && blocks.size() < 100) {
    CUdeviceptr p;
    r = cuMemAlloc(&p, 128 * kMiB);
    if (r == CUDA_SUCCESS) blocks.push_back(p);
  }
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, r);
  EXPECT_EQ(blocks.size(), before / (128 * kMiB));
  EXPECT_LT(FreeMemory(), 128 * kMiB);
  for (CUdeviceptr p : blocks) CHECK_CU(cuMemFree(p));
  EXPECT_EQ(FreeMemory(), before);
}

TEST_F(MemoryTest, InvalidArguments) {
  CUdeviceptr p;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(&p, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(nullptr, 16));
  EXPECT_CU(CUDA_SUCCESS, cuMemFree(0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(0x1234));
  size_t f = 0;
  EXPECT_CU(CUDA_SUCCESS, cuMemGetInfo(&f, nullptr));  // as the driver: either output may be null
  EXPECT_GT(f, 0u);
  CHECK_CU(cuMemAlloc(&p, 4096));
  CHECK_CU(cuMemFree(p));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(p));  // double free
}

TEST_F(MemoryTest, CopiesAndFillsRoundTrip) {
  const size_t n = 1 << 16;
  std::vector<uint32_t> src(n), dst(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint32_t>(i * 2654435761u);
  CUdeviceptr a, b;
  CHECK_CU(cuMemAlloc(&a, n * 4));
  CHECK_CU(cuMemAlloc(&b, n * 4));
  CHECK_CU(cuMemcpyHtoD(a, src.data(), n * 4));
  CHECK_CU(cuMemcpyDtoD(b, a, n * 4));
  CHECK_CU(cuMemcpyDtoH(dst.data(), b, n * 4));
  EXPECT_EQ(src, dst);

  CHECK_CU(cuMemsetD32(a, 0xdeadbeef, n));
  CHECK_CU(cuMemsetD8(a, 0x11, 8));
  CHECK_CU(cuMemsetD16(a + 8, 0x2233, 2));
  CHECK_CU(cuMemcpyDtoH(dst.data(), a, n * 4));
  EXPECT_EQ(dst[0], 0x11111111u);
  EXPECT_EQ(dst[1], 0x11111111u);
  EXPECT_EQ(dst[2], 0x22332233u);
  EXPECT_EQ(dst[3], 0xdeadbeefu);
  EXPECT_EQ(dst[n - 1], 0xdeadbeefu);

  // Async variants on a stream, then the fill kernel.
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuMemcpyHtoDAsync(b, src.data(), n * 4, s));
  CHECK_CU(cuMemsetD32Async(a, 7, n, s));
  CHECK_CU(LaunchFill(fill_, a + 4 * 16, 0xabcdef01, 16, s));
  CHECK_CU(cuMemcpyDtoDAsync(b, a, 4 * 64, s));
  CHECK_CU(cuMemcpyDtoHAsync(dst.data(), b, n * 4, s));
  CHECK_CU(cuStreamSynchronize(s));
  EXPECT_EQ(dst[15], 7u);
  EXPECT_EQ(dst[16], 0xabcdef01u);
  EXPECT_EQ(dst[31], 0xabcdef01u);
  EXPECT_EQ(dst[32], 7u);
  EXPECT_EQ(dst[64], src[64]);
  CHECK_CU(cuStreamDestroy(s));

  // Device pointers are checked: out of bounds is an invalid value, not a crash.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(a + n * 4 - 4, src.data(), 8));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(dst.data(), 0x10, 4));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD32(a + 1, 0, 1));
  CHECK_CU(cuMemFree(a));
  CHECK_CU(cuMemFree(b));
}

TEST_F(MemoryTest, FillOutsideAllocationFaultsTheContext) {
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 4096));
  CHECK_CU(LaunchFill(fill_, p, 1, 4096, nullptr));  // 16 KiB into a 4 KiB buffer
  EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxSynchronize());
  EXPECT_CU(CUDA_ERROR_ILLEGAL_ADDRESS, LaunchBusy(busy_, 1, nullptr));
  // Only a reset recovers, as on a GPU.
  CHECK_CU(cuDevicePrimaryCtxReset(dev_));
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx_, dev_));
  CHECK_CU(cuCtxSetCurrent(ctx_));
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(LoadTestKernels(&module_, &busy_, &fill_));
}

TEST_F(MemoryTest, PitchManagedAndHostMemory) {
  const size_t before = FreeMemory();
  CUdeviceptr p;
  size_t pitch = 0;
  CHECK_CU(cuMemAllocPitch(&p, &pitch, 1000, 100, 4));
  EXPECT_GE(pitch, 1000u);
  EXPECT_EQ(pitch % 512, 0u);
  EXPECT_FREE(before - ((pitch * 100 + 4095) / 4096 * 4096), 2 * kMiB);
  CHECK_CU(cuMemFree(p));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch(&p, &pitch, 1000, 100, 3));

  CUdeviceptr m;
  CHECK_CU(cuMemAllocManaged(&m, 64 * kMiB, CU_MEM_ATTACH_GLOBAL));
  // The sim charges managed memory when allocated; a real driver when first touched.
  if (OnSim()) {
    EXPECT_EQ(FreeMemory(), before - 64 * kMiB);
  }
  reinterpret_cast<uint32_t*>(m)[10] = 42;  // host access to managed memory
  uint32_t v = 0;
  CHECK_CU(cuMemcpyDtoH(&v, m + 40, 4));
  EXPECT_EQ(v, 42u);
  CHECK_CU(cuMemFree(m));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAllocManaged(&m, 64, 0x7));

  void* h = nullptr;
  CHECK_CU(cuMemAllocHost(&h, 32 * kMiB));
  if (OnSim()) {
    EXPECT_EQ(FreeMemory(), before);  // host memory is not device memory
  }
  CUdeviceptr hd;
  CHECK_CU(cuMemHostGetDevicePointer(&hd, h, 0));
  EXPECT_EQ(hd, reinterpret_cast<CUdeviceptr>(h));
  CHECK_CU(cuMemsetD8(hd, 5, 16));
  EXPECT_EQ(static_cast<unsigned char*>(h)[15], 5);
  CHECK_CU(cuMemFreeHost(h));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(h));

  std::vector<char> buf(8192);
  CHECK_CU(cuMemHostRegister(buf.data(), buf.size(), 0));
  EXPECT_CU(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cuMemHostRegister(buf.data(), 16, 0));
  CHECK_CU(cuMemHostUnregister(buf.data()));
  EXPECT_CU(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(buf.data()));
}

TEST_F(MemoryTest, StreamOrderedAllocationAndPools) {
  const size_t before = FreeMemory();
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, 0));
  CUmemoryPool pool;
  CHECK_CU(cuDeviceGetDefaultMemPool(&pool, dev_));
  CUmemoryPool current;
  CHECK_CU(cuDeviceGetMemPool(&current, dev_));
  EXPECT_EQ(pool, current);

  CUdeviceptr p;
  CHECK_CU(cuMemAllocAsync(&p, 48 * kMiB, s));
  CHECK_CU(cuMemsetD32Async(p, 9, 16, s));
  uint32_t v = 0;
  CHECK_CU(cuMemcpyDtoHAsync(&v, p + 60, 4, s));
  CHECK_CU(cuMemFreeAsync(p, s));
  CHECK_CU(cuStreamSynchronize(s));
  EXPECT_EQ(v, 9u);
  cuuint64_t used = 1, reserved = 1;
  CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_EQ(used, 0u);
  EXPECT_EQ(reserved, 0u);  // threshold 0: released at the synchronisation
  EXPECT_EQ(FreeMemory(), before);

  // A release threshold keeps freed memory reserved for reuse until trimmed.
  cuuint64_t threshold = 256 * kMiB;
  CHECK_CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  CHECK_CU(cuMemAllocAsync(&p, 64 * kMiB, s));
  CHECK_CU(cuMemFreeAsync(p, s));
  CHECK_CU(cuStreamSynchronize(s));
  CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_GE(reserved, 64 * kMiB);
  if (OnSim()) {
    EXPECT_EQ(reserved, 64 * kMiB);
  }
  EXPECT_FREE(before - reserved, 32 * kMiB);  // a real pool reserves in chunks
  CUdeviceptr again;
  CHECK_CU(cuMemAllocAsync(&again, 64 * kMiB, s));
  EXPECT_EQ(again, p);  // reused
  CHECK_CU(cuMemFreeAsync(again, s));
  CHECK_CU(cuStreamSynchronize(s));
  CHECK_CU(cuMemPoolTrimTo(pool, 0));
  EXPECT_FREE(before, 2 * kMiB);
  threshold = 0;
  CHECK_CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));

  // An explicit pool.
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool mine;
  CHECK_CU(cuMemPoolCreate(&mine, &props));
  CHECK_CU(cuMemAllocFromPoolAsync(&p, 10 * kMiB, mine, s));
  CHECK_CU(cuStreamSynchronize(s));
  CHECK_CU(cuMemPoolGetAttribute(mine, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  EXPECT_EQ(used, 10 * kMiB);
  cuuint64_t mine_reserved = 0;
  CHECK_CU(cuMemPoolGetAttribute(mine, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &mine_reserved));
  EXPECT_FREE(before - (OnSim() ? 10 * kMiB : mine_reserved), 32 * kMiB);
  CUdeviceptr too_big;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY,
            cuMemAllocFromPoolAsync(&too_big, TotalMemory() + 64 * kMiB, mine, s));
  CHECK_CU(cuMemFreeAsync(p, s));
  CHECK_CU(cuStreamSynchronize(s));
  CHECK_CU(cuMemPoolDestroy(mine));
  EXPECT_FREE(before, 2 * kMiB);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemPoolDestroy(pool));  // the default pool stays
  props.location.id = 9;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemPoolCreate(&mine, &props));
  CHECK_CU(cuStreamDestroy(s));
}

TEST_F(MemoryTest, VirtualMemoryManagement) {
  const size_t before = FreeMemory();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT_EQ(gran, 2 * kMiB);

  CUmemGenericAllocationHandle h;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, gran + 1, &prop, 0));
  const size_t beyond = (TotalMemory() / gran + 1) * gran;  // more than the device has
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(&h, beyond, &prop, 0));
  CHECK_CU(cuMemCreate(&h, 2 * gran, &prop, 0));
  EXPECT_FREE(before - 2 * gran, gran);

  CUdeviceptr va;
  CHECK_CU(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
  EXPECT_EQ(va % gran, 0u);
  // The same physical memory mapped twice shows the same bytes at both addresses.
  CHECK_CU(cuMemMap(va, 2 * gran, 0, h, 0));
  CHECK_CU(cuMemMap(va + 2 * gran, 2 * gran, 0, h, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemMap(va, 2 * gran, 0, h, 0));  // already mapped
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK_CU(cuMemSetAccess(va, 4 * gran, &access, 1));
  CHECK_CU(cuMemsetD32(va + 4, 0x5a5a5a5a, 4));
  uint32_t v = 0;
  CHECK_CU(cuMemcpyDtoH(&v, va + 2 * gran + 8, 4));
  EXPECT_EQ(v, 0x5a5a5a5au);
  CHECK_CU(LaunchFill(fill_, va + 3 * gran, 77, gran / 4, nullptr));
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuMemcpyDtoH(&v, va + gran + 100 * 4, 4));
  EXPECT_EQ(v, 77u);

  // Releasing the handle keeps the memory while mapped; unmapping frees it.
  CHECK_CU(cuMemRelease(h));
  EXPECT_FREE(before - 2 * gran, gran);
  CHECK_CU(cuMemUnmap(va, 4 * gran));
  EXPECT_FREE(before, gran);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(&v, va, 4));  // no longer accessible
  CHECK_CU(cuMemAddressFree(va, 4 * gran));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemRelease(h));
}

TEST_F(MemoryTest, ArraysAreCharged) {
  const size_t before = FreeMemory();
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = 1024;
  d.Height = 1024;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 4;
  CUarray a;
  CHECK_CU(cuArrayCreate(&a, &d));
  EXPECT_FREE(before - 16 * kMiB, 2 * kMiB);
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = 256;
  d3.Height = 256;
  d3.Depth = 16;
  d3.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  d3.NumChannels = 1;
  CUarray a3;
  CHECK_CU(cuArray3DCreate(&a3, &d3));
  EXPECT_FREE(before - 17 * kMiB, 2 * kMiB);
  CUmipmappedArray mm;
  CHECK_CU(cuMipmappedArrayCreate(&mm, &d3, 2));
  EXPECT_LT(FreeMemory(), before - 17 * kMiB);
  CHECK_CU(cuMipmappedArrayDestroy(mm));
  CHECK_CU(cuArrayDestroy(a3));
  CHECK_CU(cuArrayDestroy(a));  // (a destroyed array's handle is not used again: undefined)
  EXPECT_FREE(before, 2 * kMiB);
  d.NumChannels = 3;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuArrayCreate(&a, &d));
}

TEST_F(MemoryTest, PointerAttributes) {
  CUdeviceptr p, m;
  CHECK_CU(cuMemAlloc(&p, 8192));
  CHECK_CU(cuMemAllocManaged(&m, 8192, CU_MEM_ATTACH_GLOBAL));
  void* h;
  CHECK_CU(cuMemAllocHost(&h, 8192));
  unsigned type = 0, managed = 9;
  CUcontext c = nullptr;
  CUdeviceptr start = 0;
  size_t size = 0;
  int ordinal = -1;
  CHECK_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 100));
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  CHECK_CU(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, p));
  EXPECT_EQ(c, ctx_);
  CHECK_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 100));
  EXPECT_EQ(start, p);
  CHECK_CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 100));
  EXPECT_EQ(size, 8192u);
  CHECK_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
  EXPECT_EQ(ordinal, 0);
  CHECK_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
  EXPECT_EQ(managed, 1u);
  CHECK_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
  EXPECT_EQ(managed, 0u);
  CHECK_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(h)));
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_HOST));
  int stack_value = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(&stack_value)));
  CHECK_CU(cuMemFreeHost(h));
  CHECK_CU(cuMemFree(m));
  CHECK_CU(cuMemFree(p));
}

TEST_F(MemoryTest, DestroyingAContextFreesItsMemory) {
  const size_t before = FreeMemory();
  CUcontext c;
  CHECK_CU(cuCtxCreate(&c, nullptr, 0, 0));
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 200 * kMiB));
  CHECK_CU(cuCtxDestroy(c));
  CHECK_CU(cuCtxSetCurrent(ctx_));
  EXPECT_EQ(FreeMemory(), before);
}

}  // namespace
}  // namespace gslice::test
