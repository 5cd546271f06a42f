// Threads per rank (docs/conventions.md): max(1, cores / ranks on this node), overridable by
// runtime.threads, applied to LibTorch's intra-op pool (torch::set_num_threads) and inter-op
// pool (at::set_num_interop_threads, which can be set only once per process, before any
// inter-op work) and logged with the CPU binding read by sched_getaffinity. The choice is a
// pure function (plan_threads) so it is tested without MPI or LibTorch state.
#pragma once

#include <string>
#include <vector>

namespace omnibal::comm {

/// The thread decision of one rank.
struct ThreadPlan {
  int threads = 1;            ///< intra-op threads
  int interop = 1;            ///< inter-op threads
  int cores = 1;              ///< online CPUs of the node
  int local_ranks = 1;        ///< ranks on this node
  bool from_config = false;   ///< runtime.threads overrode the default
  std::vector<int> affinity;  ///< CPUs this process may run on (sched_getaffinity)
  /// "threads 1 intra-op / 1 inter-op (2 cores / 2 ranks on node); bound to cpus 0-1".
  std::string describe() const;
};

/// requested > 0 wins; otherwise max(1, cores / local_ranks). Throws omnibal::Error when
/// cores < 1, local_ranks < 1 or requested < 0 ("runtime.threads: expected >= 0").
ThreadPlan plan_threads(int requested, int cores, int local_ranks);

/// CPUs in this process's affinity mask, ascending.
std::vector<int> cpu_affinity();
/// "0-3,8,10-11" compression of a CPU list.
std::string format_cpu_list(const std::vector<int>& cpus);

/// Plans with the node's online CPUs and `local_ranks`, reads the affinity, sets torch's
/// intra-op threads and (once per process) inter-op threads, logs the plan on every rank
/// ("[rank r] threads ...": bindings differ per rank) and warns when the affinity mask has
/// fewer CPUs than threads. Returns the plan.
ThreadPlan configure_threads(int requested, int local_ranks);

}  // namespace omnibal::comm
