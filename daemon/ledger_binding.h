// Which NodeLedger gsliced uses: the node ledger in shared memory at `path`, or with
// path "none" an in-process one (a registry only: slices are admitted and shown, nothing
// enforces them; for control-plane tests and nodes without shims).
#pragma once

#include <memory>
#include <string>

#include "node_ledger.h"

namespace gslice {

Result<std::unique_ptr<NodeLedger>> OpenNodeLedger(const std::string& path);

}  // namespace gslice
