// Catch2 main for tests run under mpiexec: MPI lives for the whole session, every rank runs the
// same test cases in the same order, and the exit code is non-zero on a rank that failed.
#define CATCH_CONFIG_RUNNER
#include "comm/mpi_runtime.h"

#include <catch2/catch.hpp>

int main(int argc, char** argv) {
  omnibal::comm::MpiRuntime mpi(&argc, &argv);
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv)) return rc;
  return session.run();
}
