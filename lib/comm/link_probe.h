// The all-reduce link of one group as a cost model takes it (partition::TpLink,
// partition::all_reduce_seconds: calls * latency + 2 (n-1)/n * bytes / bandwidth), timed through
// the Communicator: the latency from small all-reduces, the bus bandwidth from large ones. Used by
// the trainer's start-up planner (the TP link) and scripts/bench/comm_bench.cpp (tp_bench.sh).
#pragma once

#include "comm/communicator.h"

namespace omnibal::comm {

/// One group's all-reduce costs.
struct AllReduceLink {
  double latency_s = 0;      ///< seconds per all-reduce of `small_bytes`
  double bus_bandwidth = 0;  ///< bytes/s: 2 (n-1)/n * large_bytes / (t_large - latency)
};

/// How to probe: calls and sizes of the two all-reduces.
struct LinkProbeOptions {
  int64_t small_bytes = 8;
  int small_calls = 50;
  int64_t large_bytes = 4 << 20;
  int large_calls = 5;
};

/// Collective over `group`: times in-place sum all-reduces of tensors made with `options`
/// (dtype and device; one warm-up call and a barrier before each timing). Throws omnibal::Error
/// when the group has fewer than 2 ranks.
AllReduceLink probe_all_reduce(Communicator& group, const torch::TensorOptions& options,
                               const LinkProbeOptions& probe = {});

}  // namespace omnibal::comm
