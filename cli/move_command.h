// gslice move: restore a process on another GPU of the same type (docs/suspend.md).
#pragma once

namespace gslice::cli {

extern const char kMoveSummary[];
int MoveCommand(int argc, char** argv);

}  // namespace gslice::cli
