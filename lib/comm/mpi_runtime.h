// MPI start-up and shutdown for an omnibal process: MPI_Init_thread (MPI_THREAD_FUNNELED: only
// the main thread calls MPI; background threads forward errors through ErrorForwarder), the
// world rank and size, and the number of ranks on this node. Also sets the log prefix rank.
// It does not build sub-communicators (parallel_comms.h) or decide threads (thread_setup.h).
#pragma once

namespace omnibal::comm {

/// RAII owner of MPI's lifetime: one per process, created first thing in main().
class MpiRuntime {
 public:
  /// Initialises MPI (argc/argv may be null). Throws omnibal::Error when MPI is already
  /// initialised or cannot give MPI_THREAD_FUNNELED.
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();  ///< MPI_Finalize
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Ranks on this node (MPI_COMM_TYPE_SHARED), i.e. OMPI_COMM_WORLD_LOCAL_SIZE under mpirun.
  int local_size() const { return local_size_; }
  /// This rank's index among the ranks of its node.
  int local_rank() const { return local_rank_; }

 private:
  int rank_ = 0;
  int size_ = 1;
  int local_size_ = 1;
  int local_rank_ = 0;
};

}  // namespace omnibal::comm
