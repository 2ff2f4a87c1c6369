// The driver's private-table slots the CUDA libraries call beyond cudart's start-up, answered by
// the forwarding client (remote/client/stream_keys.h, module_functions.h, export_tables.cc)
// against gslice-remoted on the simulated driver: cuBLASLt's per-stream buffers (tools context
// slots 51 and 39, reached from cuSOLVER), cuFFT's run-time-linked kernels (module functions
// slot 7), the compute cache NVRTC and nvJitLink ask for, and the caller an unanswered slot's
// log line names.
#include <unistd.h>

#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "remote_test_support.h"
#include "test_support.h"

namespace gslice::remote {
namespace {

using gslice::test::Child;
using shared::Remote;
using shared::Result;
using shared::RunProgram;

const std::string kProbe = GSLICE_TEST_PROBE;

std::string Prefix() { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-remote-libs"; }
std::string SocketPath() { return "/tmp/gslice-test-" + std::to_string(getpid()) + "-remoted-libs.sock"; }

class RemoteLibraryTables : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared::SetUpSimWorld(Prefix());
    server_ = shared::StartSimServer(SocketPath(), GSLICE_TEST_ASAN_RUNTIME);
    ASSERT_NE(server_->ReadUntil("gslice-remoted: listening on", 20000), "");
  }

  static void TearDownTestSuite() {
    shared::StopServer(&server_, SocketPath());
    shared::RemoveSimWorld(Prefix());
  }

  static std::string Address() { return "unix:" + SocketPath(); }

  static Child* server_;
};

Child* RemoteLibraryTables::server_ = nullptr;

// cuBLASLt finds a stream's buffer by the key slot 39 gives for the object slot 51 gives: the
// same stream the same key (its ID), two streams and two threads' per-thread streams different
// keys. Without them cuBLASLt fails the call, and cuSOLVER's SVD with it.
TEST_F(RemoteLibraryTables, AStreamsKeyIsItsIdAndNoOtherStreamsKey) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "library-tables"}));
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* line : {"stream keys: the same again: yes, the stream's ID: yes, another stream's differs: yes, "
                           "the NULL stream's the same again: yes\n",
                           "per-thread stream keys of two threads differ: yes\n",
                           "stream object into nothing: CUDA_ERROR_INVALID_VALUE\n",
                           "stream key into nothing: CUDA_ERROR_INVALID_VALUE\n"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

// cuFFT takes the one function of a module it linked at run time through slot 7: each of the
// module's functions handed to its callback, their count returned (cuFFT goes on only at 1); a
// module the worker does not know has none, and the log says why.
TEST_F(RemoteLibraryTables, AModulesFunctionsAreHandedToTheCallback) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "library-tables"}));
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* line : {"module functions size 792\n", "module functions: 2, the module's own: yes\n",
                           "functions of no module: 0\n",
                           "private table module functions (6e163fbe...) slot 7: cuModuleGetFunctionCount of module"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

// The compute cache is declined as NVRTC and nvJitLink expect of a driver without it (they
// compile without caching); a slot nobody answers is an error whose log line names the caller.
TEST_F(RemoteLibraryTables, TheComputeCacheIsDeclinedAndAnUnansweredSlotNamesItsCaller) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "library-tables"}), {"GSLICE_LOG=info"});
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* line : {"compute cache: CUDA_ERROR_NOT_FOUND, null\n",
                           "cuGetExportTable(da9151d3...): the driver's compute cache, which NVRTC and nvJitLink "
                           "compile without: CUDA_ERROR_NOT_FOUND to gslice_remote_probe",
                           "tools context slot 5: CUDA_ERROR_NOT_SUPPORTED\n",
                           "private table tools context (21318c60...) slot 5 is not answered: CUDA_ERROR_NOT_SUPPORTED "
                           "to gslice_remote_probe"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

// cudaMemcpyDefault's copies (cuMemcpy, cuMemcpyAsync): the client tells host memory from the
// worker's device memory and makes the typed copy, each way right; an address that is neither
// is refused. Without them CuPy's cupy.linalg stopped with cudaErrorNotSupported.
TEST_F(RemoteLibraryTables, CopiesOfUnifiedAddressesGoTheRightWay) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "unified-copies"}));
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* line : {"host to device and back: right\n", "device to device, to page-locked host: right\n",
                           "page-locked host to device and back: right\n", "host to host: right\n",
                           "into nothing: CUDA_ERROR_INVALID_VALUE\n",
                           "0x10 is neither memory of this process nor the worker's device memory"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

// A call the client does not forward names who made it too.
TEST_F(RemoteLibraryTables, ACallNotForwardedNamesItsCaller) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "unforwarded"}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("remote: cuMemAllocManaged is not forwarded (yet): CUDA_ERROR_NOT_SUPPORTED to "
                       "gslice_remote_probe\n"),
            std::string::npos)
      << r.out;
}

#ifdef GSLICE_TEST_CUDART_PROBE
// Through a library, the line names the library and the call of it the program made, past the
// library's own frames: cuBLAS's runtime (static inside libcublas) asks for cudart's f8cff951
// from cublasCreate.
TEST_F(RemoteLibraryTables, ARefusalNamesTheLibraryAndTheCallOfItThatReachedIt) {
  Result r = RunProgram(Remote(Address(), "1GiB", {GSLICE_TEST_CUDART_PROBE, "cublas"}),
                        {"GSLICE_LOG=info", "ASAN_OPTIONS=detect_leaks=0"});
  if (r.code == 2 && r.out.find("no libcublas") != std::string::npos) GTEST_SKIP() << r.out;
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(CUDA_ERROR_NOT_FOUND to libcublas\.so\.[0-9]+ \(in cublasCreate)")))
      << r.out;
}
#endif

}  // namespace
}  // namespace gslice::remote
