// Catch2 main for tests run under mpiexec: MPI lives for the whole session, every rank runs the
// same test cases in the same order, and the exit code is non-zero on a rank that failed.
// Compiled once (omnibal_mpi_test_main) for every multi-rank test executable; the Catch2
// implementation is catch_session.cpp.
#include "catch_session.h"
#include "comm/mpi_runtime.h"

int main(int argc, char** argv) {
  omnibal::comm::MpiRuntime mpi(&argc, &argv);
  return omnibal::test::run_catch_session(argc, argv);
}
