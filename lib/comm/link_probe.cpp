#include "comm/link_probe.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace omnibal::comm {

AllReduceLink probe_all_reduce(Communicator& group, const torch::TensorOptions& options,
                               const LinkProbeOptions& probe) {
  const int n = group.size();
  OMNIBAL_CHECK(n >= 2, "probe_all_reduce: ", group.name(), " has ", n, " rank(s), expected >= 2");
  const auto seconds = [&](int64_t bytes, int calls) {
    torch::Tensor t =
        torch::ones({std::max<int64_t>(1, bytes / options.dtype().itemsize())}, options);
    group.all_reduce(t, ReduceOp::kSum, "link probe");  // warm-up
    group.barrier("link probe");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) group.all_reduce(t, ReduceOp::kSum, "link probe");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
  };
  AllReduceLink link;
  link.latency_s = seconds(probe.small_bytes, probe.small_calls);
  const double large = seconds(probe.large_bytes, probe.large_calls);
  link.bus_bandwidth =
      2.0 * (n - 1) / n * probe.large_bytes / std::max(large - link.latency_s, 1e-9);
  return link;
}

}  // namespace omnibal::comm
