// The Catch2 session behind every test main (catch_main.cpp, mpi_test_main.cpp). Catch2 v2
// declares Catch::Session only where its implementation is compiled, so the mains call this.
#pragma once

namespace omnibal::test {

/// Catch::Session().run(argc, argv): applies the command line, runs the selected test cases,
/// returns the exit code (non-zero when a test failed or the command line was bad).
int run_catch_session(int argc, char** argv);

}  // namespace omnibal::test
