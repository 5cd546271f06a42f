// Ending the whole job on the first error. One silent rank hangs every collective, so a rank
// that fails prints "[rank r] <message>" to stderr, flushes, and calls MPI_Abort, which makes
// mpirun kill the other ranks (blocked in a receive or an all-reduce) and exit non-zero.
// Library code throws omnibal::Error; only apps call run_guarded()/abort_job().
#pragma once

#include <functional>
#include <string>

namespace omnibal::comm {

/// Prints "[rank r] <message>" (r = world rank, or "?" before MPI_Init) to stderr, flushes
/// stdout and stderr, then MPI_Abort(MPI_COMM_WORLD, exit_code); without MPI, _Exit(exit_code).
/// Callable from any thread as a last resort; prefer ErrorForwarder from background threads.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

/// Runs `body` (the app's work after MpiRuntime exists) and returns its exit code; any
/// exception becomes abort_job(e.what()). The shape of every omnibal main():
///   MpiRuntime mpi(&argc, &argv);  return run_guarded([&] { ...; return 0; });
int run_guarded(const std::function<int()>& body);

}  // namespace omnibal::comm
