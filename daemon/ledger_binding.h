// Which NodeLedger gsliced uses: the node ledger in shared memory when this build has it,
// else an in-process one (slices are registered but nothing enforces them).
#pragma once

#include <memory>
#include <string>

#include "node_ledger.h"

namespace gslice {

Result<std::unique_ptr<NodeLedger>> OpenNodeLedger(const std::string& path);

}  // namespace gslice
