// Catch2's implementation, compiled once (~25 s of CPU) for every test executable: the plain
// main (catch_main.cpp) and the MPI one (mpi_test_main.cpp) only call run_catch_session.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.h"

namespace omnibal::test {

int run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }

}  // namespace omnibal::test
