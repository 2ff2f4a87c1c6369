// A program built against the CUDA toolkit's own runtime (libcudart), run through the
// forwarding client against a server on the simulated driver: cudart starts only when the
// client answers its entry-point lookups and the driver's private tables as the driver does.
// No kernels (the simulated driver runs no fatbins). Prints one line per step and "cudart
// done" when every result was as expected; exits 1 at the first wrong one.
//
//   gslice_cudart_probe [runtime|cublas|sgemm]
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <vector>

namespace {

int Fail(const char* what, cudaError_t e) {
  printf("%s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return 1;
}

#define CHECK(call)                                  \
  do {                                               \
    const cudaError_t e_ = (call);                   \
    if (e_ != cudaSuccess) return Fail(#call, e_);   \
  } while (0)

#define EXPECT(cond)                                 \
  do {                                               \
    if (!(cond)) {                                   \
      printf("wrong: %s\n", #cond);                  \
      return 1;                                      \
    }                                                \
  } while (0)

int Runtime() {
  int runtime = 0, driver = 0, count = 0;
  CHECK(cudaRuntimeGetVersion(&runtime));
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaGetDeviceCount(&count));
  EXPECT(count >= 1);
  printf("devices %d\n", count);

  cudaDeviceProp prop;
  memset(&prop, 0, sizeof prop);
  CHECK(cudaGetDeviceProperties(&prop, 0));
  EXPECT(prop.name[0] != '\0' && prop.totalGlobalMem > 0 && prop.major > 0 && prop.multiProcessorCount > 0);
  printf("device 0: %s, compute %d.%d\n", prop.name, prop.major, prop.minor);
  CHECK(cudaSetDevice(0));

  // Copies both ways and a memset, checked byte for byte.
  const size_t n = 1 << 20;
  std::vector<unsigned char> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);
  void* dev = nullptr;
  CHECK(cudaMalloc(&dev, n));
  EXPECT(dev != nullptr);
  CHECK(cudaMemcpy(dev, host.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(back.data(), dev, n, cudaMemcpyDeviceToHost));
  EXPECT(memcmp(host.data(), back.data(), n) == 0);
  CHECK(cudaMemset(dev, 0x5a, n / 2));
  CHECK(cudaMemcpy(back.data(), dev, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) EXPECT(back[i] == (i < n / 2 ? 0x5a : host[i]));
  void* dev2 = nullptr;
  CHECK(cudaMalloc(&dev2, n));
  CHECK(cudaMemcpy(dev2, dev, n, cudaMemcpyDeviceToDevice));
  printf("copies and memset ok\n");

  // A stream, asynchronous copies and memset on it, events around them.
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start, stream));
  CHECK(cudaMemsetAsync(dev2, 0x11, n, stream));
  CHECK(cudaMemcpyAsync(dev2, host.data(), 4096, cudaMemcpyHostToDevice, stream));
  CHECK(cudaEventRecord(stop, stream));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(cudaEventQuery(stop) == cudaSuccess);
  EXPECT(cudaStreamQuery(stream) == cudaSuccess);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  EXPECT(ms >= 0);
  CHECK(cudaMemcpy(back.data(), dev2, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) EXPECT(back[i] == (i < 4096 ? host[i] : 0x11));
  printf("stream and events ok\n");

  size_t free_bytes = 0, total_bytes = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  EXPECT(total_bytes > 0 && free_bytes <= total_bytes);

  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(dev2));
  CHECK(cudaFree(dev));
  CHECK(cudaDeviceSynchronize());
  EXPECT(cudaGetLastError() == cudaSuccess);
  printf("cudart done\n");
  return 0;
}

// cublasCreate/cublasDestroy through libcublas from the toolkit, loaded at run time (the
// program does not link it): cuBLAS runs its own handshake with the driver's tables.
int Cublas() {
  void* lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    printf("no libcublas: %s\n", dlerror());
    return 2;
  }
  using Create = int (*)(void**);
  using Destroy = int (*)(void*);
  auto create = reinterpret_cast<Create>(dlsym(lib, "cublasCreate_v2"));
  auto destroy = reinterpret_cast<Destroy>(dlsym(lib, "cublasDestroy_v2"));
  EXPECT(create != nullptr && destroy != nullptr);
  void* handle = nullptr;
  const int created = create(&handle);
  printf("cublasCreate: %d\n", created);
  if (created != 0) return 1;
  const int destroyed = destroy(handle);
  printf("cublasDestroy: %d\n", destroyed);
  if (destroyed != 0) return 1;
  printf("cublas done\n");
  return 0;
}

// One float32 matrix product through cuBLAS (cublasSgemm, which cuBLAS hands to cuBLASLt):
// cuBLASLt fetches its own private tables and calls through them while it picks and loads a
// kernel. Prints cublasSgemm's status and the runtime's error after the product: on a real GPU
// both are 0 and C is checked; on the simulated driver, which runs no fatbin kernels, the launch
// itself fails (a status other than CUBLAS_STATUS_NOT_SUPPORTED, 15, which is what a missing
// table gives).
int Sgemm() {
  void* lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    printf("no libcublas: %s\n", dlerror());
    return 2;
  }
  using Create = int (*)(void**);
  using Destroy = int (*)(void*);
  using SgemmFn = int (*)(void*, int, int, int, int, int, const float*, const float*, int, const float*, int,
                        const float*, float*, int);
  auto create = reinterpret_cast<Create>(dlsym(lib, "cublasCreate_v2"));
  auto destroy = reinterpret_cast<Destroy>(dlsym(lib, "cublasDestroy_v2"));
  auto sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cublasSgemm_v2"));
  EXPECT(create != nullptr && destroy != nullptr && sgemm != nullptr);
  void* handle = nullptr;
  const int created = create(&handle);
  printf("cublasCreate: %d\n", created);
  if (created != 0) return 1;

  // C = A * B, column-major, A = 1 everywhere, B = 2 everywhere: every element of C is 2n.
  const int n = 64;
  std::vector<float> a(n * n, 1.0f), b(n * n, 2.0f), c(n * n, -1.0f);
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&da), a.size() * sizeof(float)));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&db), b.size() * sizeof(float)));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&dc), c.size() * sizeof(float)));
  CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  const float alpha = 1.0f, beta = 0.0f;
  const int status = sgemm(handle, 0, 0, n, n, n, &alpha, da, n, db, n, &beta, dc, n);
  printf("cublasSgemm: %d\n", status);
  const cudaError_t after = cudaDeviceSynchronize();
  printf("after the product: %s\n", cudaGetErrorName(after));
  bool right = false;
  if (status == 0 && after == cudaSuccess) {
    CHECK(cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
    right = true;
    for (float x : c) right = right && x == 2.0f * n;
    printf("product %s\n", right ? "right" : "wrong");
  }
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  printf("cublasDestroy: %d\n", destroy(handle));
  printf("sgemm done\n");
  return status == 0 && !right ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  const char* mode = argc > 1 ? argv[1] : "runtime";
  if (strcmp(mode, "runtime") == 0) return Runtime();
  if (strcmp(mode, "cublas") == 0) return Cublas();
  if (strcmp(mode, "sgemm") == 0) return Sgemm();
  fprintf(stderr, "usage: gslice_cudart_probe [runtime|cublas|sgemm]\n");
  return 2;
}
