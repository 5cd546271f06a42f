// A decision only rank 0 can make (taking the run directory's lock, reading a file once), made
// collective: rank 0 runs it and every rank learns whether it failed. Without this, an error on
// rank 0 alone ends the job only through MPI_Abort, while the other ranks sit in their next
// collective, and none of them can say why. Not for work whose result the other ranks need (send
// that yourself); only the outcome, success or rank 0's message, travels.
#pragma once

#include <functional>
#include <string>

#include "comm/communicator.h"

namespace omnibal::comm {

/// Runs `body` on group rank 0 of `group` and broadcasts its outcome. When `body` throws, rank 0
/// rethrows its exception and every other rank throws omnibal::Error("<what> failed on rank 0:
/// <rank 0's message>"), so the whole job ends with the same reason at once. Collective over
/// `group`: every rank calls it (two broadcasts under the watchdog; `what` names them).
void run_on_root(Communicator& group, const std::function<void()>& body, const std::string& what);

}  // namespace omnibal::comm
