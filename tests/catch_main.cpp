// The one Catch2 main shared by every single-process test executable (what CATCH_CONFIG_MAIN
// would generate; the implementation is catch_session.cpp).
#include "catch_session.h"

int main(int argc, char** argv) { return omnibal::test::run_catch_session(argc, argv); }
