// The driver's private tables (cuGetExportTable), answered on the client (export_tables.cc):
// what the rest of the client tells them. Their context-local storage follows the contexts:
// a context's values go with it, their destructors run.
#pragma once

#include <cuda.h>

namespace gslice::remote {

void ReleaseContextStorage(CUcontext ctx);
void ReleasePrimaryContextStorage(CUdevice dev);
void RememberPrimaryContext(CUdevice dev, CUcontext ctx);

}  // namespace gslice::remote
