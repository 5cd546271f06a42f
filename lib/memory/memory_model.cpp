#include "memory/memory_model.h"

#include <algorithm>

#include "core/error.h"
#include "schedule/one_f_one_b.h"

namespace omnibal::memory {

double kept_activation_bytes(const partition::UnitCostTable& table, int begin, int end,
                             const std::vector<bool>& recompute) {
  double kept = 0;
  for (int u = begin; u < end; ++u) {
    const auto& unit = table.units[u];
    const bool checkpointed = recompute[u] && unit.recomputable() && unit.trainable;
    kept += checkpointed ? table.checkpoint_bytes(u) : unit.activation_bytes;
  }
  return kept;
}

StageMemory stage_memory(const partition::UnitCostTable& table,
                         const partition::Partition& partition, int stage, int micro_batches,
                         const std::vector<bool>& recompute, const MemoryOptions& options) {
  OMNIBAL_CHECK(partition.units() == static_cast<int>(table.units.size()),
                "memory model: partition ", partition.to_string(), " covers ", partition.units(),
                " units, the table has ", table.units.size());
  OMNIBAL_CHECK(recompute.size() == table.units.size(), "memory model: ", recompute.size(),
                " recompute flags for ", table.units.size(), " units");
  OMNIBAL_CHECK(options.dp >= 1, "memory model: dp must be >= 1, got ", options.dp);
  OMNIBAL_CHECK(table.tp == options.tp, "memory model: the cost table is per rank of tp ", table.tp,
                ", the memory options have tp = ", options.tp,
                " (pass parallel.tp to trainer_memory_options; profile at the run's tp)");
  const int begin = partition.begin(stage), end = partition.end(stage);
  StageMemory mem;
  for (int u = begin; u < end; ++u) {
    const auto& unit = table.units[u];
    const double params = unit.parameter_bytes / options.weight_bytes_per_param;
    mem.weights += unit.parameter_bytes;
    if (!unit.trainable) continue;
    mem.gradients += params * options.grad_bytes_per_param;
    mem.optimizer += params * options.optimizer_bytes_per_param / (options.zero1 ? options.dp : 1);
    if (recompute[u] && unit.recomputable())
      mem.transient = std::max(mem.transient, unit.activation_bytes);
  }
  const int in_flight = schedule::in_flight_micro_batches(stage, partition.stages(), micro_batches);
  mem.activations = in_flight * kept_activation_bytes(table, begin, end, recompute);
  const double input = table.checkpoint_bytes(begin);
  const double output = table.units[end - 1].output_bytes;
  mem.buffers = 2 * (input + output) + options.workspace_bytes;
  return mem;
}

MemoryOptions trainer_memory_options(Precision precision, bool zero1, int dp, int tp) {
  OMNIBAL_CHECK(dp >= 1 && tp >= 1, "trainer memory options: dp and tp must be >= 1, got dp = ", dp,
                ", tp = ", tp);
  MemoryOptions m;
  m.dp = dp;
  m.tp = tp;
  m.zero1 = zero1;
  switch (precision) {
    case Precision::kFp32:
      m.weight_bytes_per_param = 4;
      m.grad_bytes_per_param = 4;
      m.optimizer_bytes_per_param = 8;
      break;
    case Precision::kBf16:
      m.weight_bytes_per_param = 2;
      m.grad_bytes_per_param = 4 + 2;
      m.optimizer_bytes_per_param = 12;
      break;
  }
  return m;
}

double default_budget_bytes(double device_memory_bytes) { return 0.92 * device_memory_bytes; }

}  // namespace omnibal::memory
