#include "comm/job_guard.h"

#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>

namespace omnibal::comm {

void abort_job(const std::string& message, int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi_up = initialized && !finalized;
  int rank = -1;
  if (mpi_up) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fflush(stdout);
  // One fprintf per line so lines of different ranks do not interleave mid-line.
  if (rank >= 0) std::fprintf(stderr, "[rank %d] %s\n", rank, message.c_str());
  else std::fprintf(stderr, "[rank ?] %s\n", message.c_str());
  std::fflush(stderr);
  // mpirun answers MPI_Abort with SIGTERM to every rank, this one included, and SIGKILLs only
  // after odls_base_sigkill_timeout: with the graceful-stop handler still installed this rank
  // would sit out that timeout. Restore the default action first.
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  if (mpi_up) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

int run_guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    abort_job(e.what());
  } catch (...) {
    abort_job("unknown exception (not derived from std::exception)");
  }
}

}  // namespace omnibal::comm
