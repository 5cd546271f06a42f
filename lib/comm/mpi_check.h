// OMNIBAL_MPI_CHECK: turns an MPI return code into an omnibal::Error naming the call and MPI's
// error string. Communicators set MPI_ERRORS_RETURN so MPI reports errors instead of aborting
// without a message.
#pragma once

#include <mpi.h>

#include <string>

namespace omnibal::comm {
/// Throws omnibal::Error "<call> failed: <MPI error string>" when code != MPI_SUCCESS.
void check_mpi(int code, const char* call, const char* file, int line);
}  // namespace omnibal::comm

#define OMNIBAL_MPI_CHECK(call) ::omnibal::comm::check_mpi((call), #call, __FILE__, __LINE__)
