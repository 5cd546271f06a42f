#include "memory/memory_model.h"

#include <algorithm>

#include "core/error.h"
#include "schedule/one_f_one_b.h"
#include "schedule/schedules.h"

namespace omnibal::memory {

double kept_activation_bytes(const partition::UnitCostTable& table, int begin, int end,
                             const std::vector<bool>& recompute) {
  double kept = 0;
  for (int u = begin; u < end; ++u) {
    const auto& unit = table.units[u];
    kept += unit.checkpointed(recompute[u]) ? table.checkpoint_bytes(u) : unit.activation_bytes;
  }
  return kept;
}

double deferred_weight_bytes(const partition::UnitCostTable& table, int begin, int end) {
  double bytes = 0;
  for (int u = begin; u < end; ++u) bytes += table.units[u].deferred_weight_bytes();
  return bytes;
}

int ScheduleLayout::chunks_per_rank() const {
  return schedule::chunks_per_rank(schedule, virtual_stages);
}

int ScheduleLayout::virtual_stage(int chunk, int rank) const {
  return schedule::virtual_stage(chunk, rank, ranks, schedule::chunk_layout(schedule));
}

ScheduleLayout ScheduleLayout::of(PipelineSchedule schedule, int virtual_stages, int chunks,
                                  int micro_batches) {
  ScheduleLayout l;
  l.schedule = schedule;
  l.virtual_stages = virtual_stages;
  l.micro_batches = micro_batches;
  const int v = l.chunks_per_rank();
  OMNIBAL_CHECK(v >= 1 && chunks >= v && chunks % v == 0, "memory model: a split of ", chunks,
                " parts does not divide into pipeline ranks of ", v, " chunks (",
                choice_name(schedule), ")");
  l.ranks = chunks / v;
  return l;
}

std::vector<std::vector<InFlightState>> in_flight_states(const ScheduleLayout& l) {
  const int P = l.ranks, v = l.chunks_per_rank();
  const auto lists = schedule::build_schedule(l.schedule, P, l.micro_batches, v);
  std::vector<std::vector<InFlightState>> out(P);
  for (int s = 0; s < P; ++s) {
    InFlightState now{std::vector<int>(v, 0), std::vector<int>(v, 0)};
    std::vector<InFlightState> seen;
    for (const auto& ins : lists[s]) {
      const int c = ins.chunk;
      switch (ins.op) {
        case schedule::Op::Forward: ++now.graphs[c]; break;
        case schedule::Op::Backward:
          seen.push_back(now);
          --now.graphs[c];
          break;
        case schedule::Op::BackwardInput:
          seen.push_back(now);
          --now.graphs[c];
          ++now.deferred[c];
          seen.push_back(now);
          break;
        case schedule::Op::BackwardWeight: --now.deferred[c]; break;
        default: break;
      }
    }
    // Keep the states no other state dominates (ties: the first).
    auto dominates = [v](const InFlightState& a, const InFlightState& b) {
      for (int c = 0; c < v; ++c)
        if (a.graphs[c] < b.graphs[c] || a.deferred[c] < b.deferred[c]) return false;
      return true;
    };
    for (size_t i = 0; i < seen.size(); ++i) {
      bool keep = true;
      for (size_t j = 0; j < seen.size() && keep; ++j)
        if (j != i && dominates(seen[j], seen[i]) && (!(seen[j] == seen[i]) || j < i)) keep = false;
      if (keep) out[s].push_back(seen[i]);
    }
  }
  return out;
}

InFlightState peak_per_chunk(const std::vector<InFlightState>& states) {
  OMNIBAL_CHECK(!states.empty(), "memory model: no in-flight states");
  InFlightState peak = states[0];
  for (const auto& st : states)
    for (size_t c = 0; c < peak.graphs.size(); ++c) {
      peak.graphs[c] = std::max(peak.graphs[c], st.graphs[c]);
      peak.deferred[c] = std::max(peak.deferred[c], st.deferred[c]);
    }
  return peak;
}

namespace {

/// Adds the weights, gradients and optimizer state of `units` to `mem` as options.shard says,
/// and under kFull the gathered units in flight.
void add_model_state(const partition::UnitCostTable& table, const std::vector<int>& units,
                     const MemoryOptions& options, StageMemory& mem) {
  // Sums kept in the order and form of the unsharded accounting, so none and optimizer are
  // unchanged to the bit; full divides each unit's bytes by dp.
  const double optimizer_dp = options.shard == ShardMode::kNone ? 1 : options.dp;
  const double state_dp = options.shard == ShardMode::kFull ? options.dp : 1;
  for (int u : units) {
    const auto& unit = table.units[u];
    const double params = unit.parameter_bytes / options.weight_bytes_per_param;
    mem.weights += unit.parameter_bytes / state_dp;
    if (!unit.trainable) continue;
    mem.gradients += params * options.grad_bytes_per_param / state_dp;
    mem.optimizer += params * options.optimizer_bytes_per_param / optimizer_dp;
  }
  if (options.shard == ShardMode::kFull) mem.gathered = gathered_unit_bytes(table, units, options);
}

}  // namespace

double gathered_unit_bytes(const partition::UnitCostTable& table, const std::vector<int>& units,
                           const MemoryOptions& options) {
  auto params = [&](size_t i) {
    return i < units.size() ? table.units[units[i]].parameter_bytes : 0.0;
  };
  double most = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    const auto& unit = table.units[units[i]];
    const double grad = unit.trainable ? unit.parameter_bytes / options.weight_bytes_per_param *
                                             options.grad_bytes_per_param
                                       : 0.0;
    const double forward = params(i) + params(i + 1);
    const double backward = params(i) + grad + (i > 0 ? params(i - 1) : 0.0);
    most = std::max({most, forward, backward});
  }
  return most;
}

StageMemory rank_memory(const partition::UnitCostTable& table,
                        const partition::Partition& partition, int rank,
                        const ScheduleLayout& layout, const std::vector<InFlightState>& states,
                        const std::vector<bool>& recompute, const MemoryOptions& options) {
  OMNIBAL_CHECK(partition.units() == static_cast<int>(table.units.size()),
                "memory model: partition ", partition.to_string(), " covers ", partition.units(),
                " units, the table has ", table.units.size());
  OMNIBAL_CHECK(partition.stages() == layout.chunks(), "memory model: partition ",
                partition.to_string(), " has ", partition.stages(), " parts, the schedule ",
                choice_name(layout.schedule), " has ", layout.chunks(), " chunks");
  OMNIBAL_CHECK(rank >= 0 && rank < layout.ranks, "memory model: rank ", rank, " of ",
                layout.ranks);
  OMNIBAL_CHECK(recompute.size() == table.units.size(), "memory model: ", recompute.size(),
                " recompute flags for ", table.units.size(), " units");
  OMNIBAL_CHECK(options.dp >= 1, "memory model: dp must be >= 1, got ", options.dp);
  OMNIBAL_CHECK(table.tp == options.tp, "memory model: the cost table is per rank of tp ", table.tp,
                ", the memory options have tp = ", options.tp,
                " (pass parallel.tp to trainer_memory_options; profile at the run's tp)");
  const int v = layout.chunks_per_rank();
  StageMemory mem;
  std::vector<double> kept(v), weight_kept(v);
  std::vector<int> units;  // the rank's units, chunks in order
  // ZB-V runs a recomputed unit's W right after its B: only the other units' W's are deferred.
  const bool w_in_b = layout.schedule == PipelineSchedule::kZbV;
  for (int c = 0; c < v; ++c) {
    const int k = layout.virtual_stage(c, rank);
    const int begin = partition.begin(k), end = partition.end(k);
    for (int u = begin; u < end; ++u) {
      units.push_back(u);
      const auto& unit = table.units[u];
      if (unit.checkpointed(recompute[u]))
        mem.transient = std::max(mem.transient, unit.activation_bytes);
      else if (w_in_b) weight_kept[c] += unit.deferred_weight_bytes();
    }
    kept[c] = kept_activation_bytes(table, begin, end, recompute);
    if (!w_in_b) weight_kept[c] = deferred_weight_bytes(table, begin, end);
    mem.buffers += 2 * (table.checkpoint_bytes(begin) + table.units[end - 1].output_bytes);
  }
  add_model_state(table, units, options, mem);
  for (const auto& st : states) {
    double held = 0;
    for (int c = 0; c < v; ++c)
      held += st.graphs.at(c) * kept[c] + st.deferred.at(c) * weight_kept[c];
    mem.activations = std::max(mem.activations, held);
  }
  mem.buffers += options.workspace_bytes;
  return mem;
}

StageMemory stage_memory(const partition::UnitCostTable& table,
                         const partition::Partition& partition, int stage, int micro_batches,
                         const std::vector<bool>& recompute, const MemoryOptions& options) {
  const ScheduleLayout layout =
      ScheduleLayout::of(PipelineSchedule::k1F1B, 1, partition.stages(), micro_batches);
  OMNIBAL_CHECK(stage >= 0 && stage < layout.ranks, "memory model: stage ", stage, " of ",
                layout.ranks);
  const int in_flight = schedule::in_flight_micro_batches(stage, layout.ranks, micro_batches);
  const std::vector<InFlightState> states = {{{in_flight}, {0}}};
  return rank_memory(table, partition, stage, layout, states, recompute, options);
}

MemoryOptions trainer_memory_options(Precision precision, ShardMode shard, int dp, int tp) {
  OMNIBAL_CHECK(dp >= 1 && tp >= 1, "trainer memory options: dp and tp must be >= 1, got dp = ", dp,
                ", tp = ", tp);
  MemoryOptions m;
  m.dp = dp;
  m.tp = tp;
  m.shard = shard;
  switch (precision) {
    case Precision::kFp32:
      m.weight_bytes_per_param = 4;
      m.grad_bytes_per_param = 4;
      m.optimizer_bytes_per_param = 8;
      break;
    case Precision::kBf16:
      m.weight_bytes_per_param = 2;
      m.grad_bytes_per_param = 4;  // the bf16 gradient is folded as it is produced
      m.optimizer_bytes_per_param = 12;
      break;
  }
  return m;
}

double default_budget_bytes(double device_memory_bytes) { return 0.92 * device_memory_bytes; }

}  // namespace omnibal::memory
