// gslice_remote_probe: a driver-API program the remote tests run twice - on the simulated
// driver directly and through the forwarding client against gslice-remoted --sim - and whose
// output must be the same. It prints only what the driver answers (no addresses, no times).
//
//   probe check         devices, contexts, memory, copies, memsets, streams, events,
//                       modules, libraries, launches (kernelParams and extra), entry points,
//                       memory pools, virtual memory management
//   probe alloc BYTES   prints the result of one cuMemAlloc of BYTES
//   probe hold BYTES    allocates, prints "held", waits for stdin to close
//   probe vmm BYTES     prints the result of one cuMemCreate of BYTES
//   probe busy MS       allocates 64 MiB, prints "busy", runs a kernel of MS ms, prints
//                       cuCtxSynchronize's result
//   probe unforwarded   prints the result of cuMemAllocManaged (not forwarded)
//   probe bigcopy BYTES copies BYTES to the device and back, plainly and on a stream
//   probe fork          allocates, forks a child that allocates and checks its own memory,
//                       then checks the parent's
//   probe repeat        asks for the same device attribute three times
//   probe deferred      launches a function that does not exist, synchronises twice
//   probe maps          prints every mapped file whose name holds "libcuda"
//   probe tables        the driver's private tables: size headers, context-local storage,
//                       the integrity hash's constant answers, an unknown UUID refused
//   probe graph         captures a memset and a launch on a stream, replays the graph, verifies
//   probe capture-copy  a host-to-device copy on a capturing stream: cuStreamEndCapture's result
//   probe graph-nodes   a graph built by hand (memset, kernel, copy, empty, child-graph and IF
//                       nodes) and by capture into it, launched, its nodes set, results verified
//   probe graph-host-copy  prints the result of a copy node naming host memory
//   probe pointer       pointer attributes of device, page-locked and plain host memory
//   probe callbacks     host functions and stream callbacks: their order and status
//   probe settings      context limits and cache config, function attributes, occupancy, stream
//                       attributes, event records with flags, globals: values and results
//   probe memops        stream write-value and wait-value operations
//   probe hostmap       prints cuMemHostGetDevicePointer's result on page-locked memory
//   probe staged        an asynchronous copy from pageable memory behind a long kernel: the
//                       call does not wait for the stream, the buffer may change right after
//                       it, and the copy has the bytes of the call
//   probe late-copy     device-to-host copies on a stream into page-locked memory behind a long
//                       kernel: not there when the call returns, there after the stream's
//                       synchronisation, and after an event query says done
//   probe hostshare [stats]  page-locked memory from cuMemHostAlloc used as the driver allows:
//                       its device pointer (a memset and a kernel write it, the host reads),
//                       asynchronous copies from and to it in stream order, a captured copy
//                       from it replayed; with "stats", how many of the copies were waited for
//   probe nvml          NVML (dlopen'ed): devices, names, memory, processes of a CUDA user
//   probe nvml-missing  prints an NVML call that is not forwarded
//   probe nvml-table    NVML's private table nvidia-smi asks for (nvmlInternalGetExportTable):
//                       its size, the bus id and process slots against the public calls, an
//                       unanswered slot, an unknown table
//   probe kept          answers the client keeps (a context's device, function attributes,
//                       limits, the primary context's state, capture status): each asked
//                       twice, then changed, and asked again: the driver's new answers
//   probe kept-sets     a set of one function's or kernel's attribute: its answers are the
//                       driver's new ones, another function's stay kept; through the client
//                       also "round trips: ..." lines (gslice_remote_stats)
//   probe lt-tables     cuBLASLt's tables: a context's number (tools context slot 4), the
//                       cuBLASLt data slot 4 declined
//   probe library-tables  the slots cuBLASLt's per-stream buffers and cuFFT call (a stream's
//                       object and key, a module's functions), the compute cache declined,
//                       an unanswered slot's caller named
//   probe unified-copies  cuMemcpy and cuMemcpyAsync (cudaMemcpyDefault) each way, bytes checked
//
// One file per concern beside this one (probe.h lists them).
#include <stdio.h>

#include <cstring>
#include <string_view>

#include "probe.h"

namespace {

struct Mode {
  const char* name;
  int (*run)(int argc, char** argv);
};

constexpr Mode kModes[] = {
    {"check", gslice::probe::Check},
    {"alloc", gslice::probe::Alloc},
    {"hold", gslice::probe::Alloc},
    {"vmm", gslice::probe::Vmm},
    {"busy", gslice::probe::Busy},
    {"bigcopy", gslice::probe::BigCopy},
    {"fork", gslice::probe::Fork},
    {"repeat", gslice::probe::Repeat},
    {"deferred", gslice::probe::Deferred},
    {"unforwarded", gslice::probe::Unforwarded},
    {"graph", gslice::probe::Graph},
    {"pointer", gslice::probe::Pointer},
    {"capture-copy", gslice::probe::CaptureCopy},
    {"graph-nodes", gslice::probe::GraphNodes},
    {"graph-host-copy", gslice::probe::GraphHostCopy},
    {"callbacks", gslice::probe::Callbacks},
    {"memops", gslice::probe::Memops},
    {"settings", gslice::probe::Settings},
    {"kept", gslice::probe::Kept},
    {"kept-sets", gslice::probe::KeptSets},
    {"nvml", gslice::probe::Nvml},
    {"nvml-cuda", gslice::probe::NvmlCuda},
    {"nvml-table", gslice::probe::NvmlTable},
    {"nvml-missing", gslice::probe::NvmlMissing},
    {"hostmap", gslice::probe::HostMap},
    {"hostshare", gslice::probe::HostShare},
    {"late-copy", gslice::probe::LateCopy},
    {"staged", gslice::probe::Staged},
    {"tables", gslice::probe::Tables},
    {"threads", gslice::probe::Threads},
    {"handoff", gslice::probe::Handoff},
    {"lt-tables", gslice::probe::LtTables},
    {"library-tables", gslice::probe::LibraryTables},
    {"unified-copies", gslice::probe::UnifiedCopies},
    {"maps", gslice::probe::Maps},
};

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  static char check[] = "check";
  char* fallback[] = {argv[0], check, nullptr};
  if (argc < 2) {  // no mode: check
    argc = 2;
    argv = fallback;
  }
  const std::string_view mode = argv[1];
  for (const Mode& m : kModes) {
    if (mode == m.name) return m.run(argc, argv);
  }
  return 2;
}
