#include "comm/thread_setup.h"

#include "core/error.h"
#include "core/log.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>

namespace omnibal::comm {

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    parts.push_back(j == i ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ","));
}

std::string ThreadPlan::describe() const {
  const std::string source = from_config
                                 ? "runtime.threads"
                                 : fmt::format("{} cores / {} ranks on node", cores, local_ranks);
  return fmt::format("threads {} intra-op / {} inter-op ({}); bound to cpus {}", threads, interop,
                     source, affinity.empty() ? "?" : format_cpu_list(affinity));
}

ThreadPlan plan_threads(int requested, int cores, int local_ranks) {
  OMNIBAL_CHECK(requested >= 0, "runtime.threads: expected >= 0 (0 = auto), got ", requested);
  OMNIBAL_CHECK(cores >= 1, "thread plan: expected >= 1 core, got ", cores);
  OMNIBAL_CHECK(local_ranks >= 1, "thread plan: expected >= 1 rank on the node, got ", local_ranks);
  ThreadPlan plan;
  plan.cores = cores;
  plan.local_ranks = local_ranks;
  plan.from_config = requested > 0;
  plan.threads = requested > 0 ? requested : std::max(1, cores / local_ranks);
  // Inter-op parallelism is little used by a training step; one thread per rank avoids
  // oversubscribing the cores the intra-op pool already uses.
  plan.interop = 1;
  return plan;
}

std::vector<int> cpu_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

ThreadPlan configure_threads(int requested, int local_ranks) {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  ThreadPlan plan = plan_threads(requested, static_cast<int>(std::max(1L, online)), local_ranks);
  plan.affinity = cpu_affinity();
  torch::set_num_threads(plan.threads);
  // at::set_num_interop_threads throws once the pool exists; set it once per process.
  static std::once_flag interop_once;
  std::call_once(interop_once, [&] {
    try {
      at::set_num_interop_threads(plan.interop);
    } catch (const std::exception&) {
      // Already started by earlier torch work: keep the existing pool.
    }
  });
  plan.interop = at::get_num_interop_threads();
  // Every rank logs its own plan: bindings differ per rank ("[rank r]" names which).
  log_info_every_rank("{}", plan.describe());
  if (!plan.affinity.empty() && static_cast<int>(plan.affinity.size()) < plan.threads) {
    log_info_every_rank(
        "warning: {} threads but this rank is bound to {} cpu(s); launch with "
        "`mpirun --bind-to none` or set runtime.threads",
        plan.threads, plan.affinity.size());
  }
  return plan;
}

}  // namespace omnibal::comm
