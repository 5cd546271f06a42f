#include "comm/mpi_runtime.h"

#include "comm/mpi_check.h"

#include "core/error.h"
#include "core/log.h"

#include <mpi.h>

namespace omnibal::comm {

void check_mpi(int code, const char* call, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  MPI_Error_string(code, text, &length);
  detail::throw_error(file, line, call, " failed: ", std::string(text, length), " (code ", code,
                      ")");
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  OMNIBAL_CHECK(!initialized, "MpiRuntime: MPI is already initialised (create one per process)");
  int provided = 0;
  OMNIBAL_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  OMNIBAL_CHECK(provided >= MPI_THREAD_FUNNELED,
                "MPI_Init_thread: MPI_THREAD_FUNNELED is not available (got level ", provided, ")");
  OMNIBAL_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  OMNIBAL_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  OMNIBAL_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm node;
  OMNIBAL_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  OMNIBAL_MPI_CHECK(MPI_Comm_size(node, &local_size_));
  OMNIBAL_MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  MPI_Comm_free(&node);
  set_log_rank(rank_, size_);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace omnibal::comm
