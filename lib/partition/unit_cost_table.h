// The per-unit cost table (docs/conventions.md): what one micro-batch of a given load costs in each
// pipeline unit. The model is one chain of units in a fixed order (README.md here, the same
// order as models/): ViT embedding, ViT blocks, projector, LLM embedding + merge, LLM blocks,
// final norm + head + loss. The table is torch-free: the profiler (lib/pipeline, later) writes
// it from measurements, analytic_cost_model.h writes it from FLOPs and bytes, and the partition
// and memory planners read it. JSON format (all numbers per micro-batch of `load`):
//   {"format": "omnibal.unit_costs.v1", "model": "<preset>", "source": "analytic:a100-80g",
//    "tp": 2, "load": {"tiles": 20, "tokens": 6656, "samples": 5, "token_sq_sum": 9.1e6},
//    "units": [{"name": "vit_block.0", "kind": "vit_block", "forward_s": 0.05,
//               "backward_s": 0.1, "activation_bytes": 1.3e9, "parameter_bytes": 2.5e8,
//               "trainable": true, "output_bytes": 1.3e8,
//               "tp_all_reduce": {"forward_bytes": 2.6e8, "forward_calls": 2,
//                                 "backward_bytes": 2.6e8, "backward_calls": 2}}, ...]}
// Tensor parallelism (Megatron TP, partition/tensor_parallel.h): every figure of a table is
// per TP rank of the TP degree `tp` it was measured or computed at. A profiler at tp > 1 times
// TP-sharded units; the analytic model divides by tp itself; nobody divides a table again.
// forward_s / backward_s are compute only, without the TP all-reduces: those are the
// `tp_all_reduce` volumes, which the simulator and the partition search turn into seconds on
// the TP link (so a measured link can replace the analytic one). "tp" and "tp_all_reduce" are
// optional on read (tp 1, no all-reduces: tables written before TP); so is "token_sq_sum" (the
// load's sum of squared sequence lengths, 0 when absent).
// The split backward of ZB-H1 (schedule/schedules.h): "backward_weight_s" is W's share of
// backward_s (the weight-gradient GEMMs; recomputation excluded), "weight_grad_bytes" what a
// deferred W keeps per micro-batch from its B to its W (each linear's input and the gradient of
// its output). Both optional: the analytic model writes them exactly, a profiler or an older
// file may not, and then UnitCost::weight_backward_s() / deferred_weight_bytes() estimate them
// (kWeightShareEstimate of the backward; the unit's activation bytes).
// Recomputation (models/recompute.h): "checkpointed_forward_s" is a checkpointed unit's forward
// (run without autograd, its activations dropped), "checkpointed_backward_s" its backward (the
// forward rerun with autograd, then the backward). Both optional: the profiler times them, the
// analytic model and older files leave them out, and then a checkpointed unit costs one more
// forward_s in the backward (UnitCost::checkpointed_forward() and the two below). On a CPU both
// run faster than the plain forward the table's forward_s times (no graph to record, no
// activations kept across the step), so the fallback over-states recomputation there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/units.h"

namespace omnibal::partition {

/// The TP all-reduces one unit runs per micro-batch on each TP rank (all zero at tp 1). Bytes
/// are summed over the calls (each call all-reduces a buffer of that rank's full size, e.g. a
/// [tokens, d] activation in the run dtype); calls count the latency terms.
struct TpAllReduces {
  double forward_bytes = 0;   ///< bytes all-reduced in the forward, per rank
  double backward_bytes = 0;  ///< bytes all-reduced in the backward (without recomputation)
  int forward_calls = 0;      ///< all-reduce calls in the forward
  int backward_calls = 0;     ///< all-reduce calls in the backward (without recomputation)
  bool operator==(const TpAllReduces& o) const {
    return forward_bytes == o.forward_bytes && backward_bytes == o.backward_bytes &&
           forward_calls == o.forward_calls && backward_calls == o.backward_calls;
  }
};

/// Costs of one unit for one micro-batch, per TP rank (see the file comment).
struct UnitCost {
  std::string name;  ///< cost_table_name (core/units.h), e.g. "llm_block.17"
  UnitKind kind = UnitKind::kLlmBlock;
  double forward_s = 0;         ///< forward compute seconds (TP all-reduces excluded)
  double backward_s = 0;        ///< backward compute seconds, without recomputation
  double activation_bytes = 0;  ///< bytes kept from forward to backward when not recomputed
  double parameter_bytes = 0;   ///< bytes of the unit's weights (bf16 in the analytic model)
  bool trainable = true;        ///< false when frozen (train.freeze): no grads, no optimizer state
  double output_bytes = 0;      ///< bytes sent to the next unit (activation + side inputs)
  TpAllReduces tp_all_reduce;   ///< TP collectives of this unit (tensor_parallel.h)
  /// W's seconds of backward_s (weight gradients; the rest is B); unset: estimated (below).
  std::optional<double> backward_weight_s;
  /// Bytes a deferred W keeps per micro-batch between B and W; unset: estimated (below).
  std::optional<double> weight_grad_bytes;
  /// Forward seconds when checkpointed (no autograd); unset: forward_s.
  std::optional<double> checkpointed_forward_s;
  /// Backward seconds when checkpointed (forward rerun + backward); unset: forward_s + backward_s.
  std::optional<double> checkpointed_backward_s;

  /// backward_weight_s, or for a table without it kWeightShareEstimate * backward_s (0 when
  /// frozen). Seconds, within [0, backward_s].
  double weight_backward_s() const;
  /// weight_grad_bytes, or for a table without it activation_bytes (0 when frozen).
  double deferred_weight_bytes() const;
  /// Forward seconds of the unit when checkpointed: checkpointed_forward_s, or forward_s.
  double checkpointed_forward() const;
  /// Backward seconds of the unit when checkpointed, the rerun included: checkpointed_backward_s
  /// (at least backward_s: timing noise never makes the rerun free), or forward_s + backward_s.
  double checkpointed_backward() const;
  /// Seconds the rerun adds to the backward when checkpointed: checkpointed_backward() -
  /// backward_s, >= 0 (the breakdown's recompute time).
  double rerun_seconds() const;
  /// Seconds checkpointing adds to one micro-batch's forward + backward: checkpointed_forward() +
  /// checkpointed_backward() - forward_s - backward_s, at least 0 (what recomputation costs; the
  /// recompute planner's value of keeping the unit's activations). forward_s without profiled
  /// checkpoint times.
  double recompute_cost() const;
  /// True for the unit kinds the recompute planner may checkpoint (is_recomputable: ViT and LLM
  /// blocks), frozen or not.
  bool recomputable() const { return is_recomputable(kind); }
  /// Whether the unit runs checkpointed under its recompute flag `flag`: flagged, recomputable
  /// and trainable (a frozen unit has no backward to rerun its forward in).
  bool checkpointed(bool flag) const { return flag && trainable && recomputable(); }
};

/// W's share of the backward assumed for tables without backward_weight_s: one half. Every
/// linear's backward is two GEMMs of equal FLOPs, the input gradient (B) and the weight gradient
/// (W); attention score matmuls and element-wise work are B's, so the true share is a little
/// lower (analytic 6B+20B on A100 at the mean ISF pack: 0.46 for an LLM block, 0.42 for a ViT
/// block)
/// and 0.5 slightly favours ZB-H1. The bytes fallback, activation_bytes, equals the analytic
/// W bytes of an LLM block (linear inputs + output gradients: 4 d + (2 d + 2 d_kv + 3 f) / tp
/// per token) and exceeds a ViT block's, so it errs on the side of memory.
inline constexpr double kWeightShareEstimate = 0.5;

/// The load a table was measured or computed at.
struct TableLoad {
  int64_t tiles = 0;
  int64_t tokens = 0;
  int64_t samples = 0;
  /// Sum over the load's attention sequences of their squared length (tokens^2), what causal
  /// attention costs; 0 = not recorded (optional "token_sq_sum" in JSON; the analytic model
  /// writes it, profiled tables so far do not). The pack time fit needs it for its attention term.
  double token_sq_sum = 0;
};

/// The cost table of the whole chain for one micro-batch load.
struct UnitCostTable {
  std::string model;   ///< preset name
  std::string source;  ///< "analytic:<device>" or "profiled:<device>"
  int tp = 1;          ///< TP degree the figures are per rank of (>= 1)
  TableLoad load;
  std::vector<UnitCost> units;

  /// Bytes a recomputed unit keeps: its input, i.e. the previous unit's output (0 for unit 0).
  double checkpoint_bytes(size_t unit) const;
};

/// Writes `table` as JSON (format above) to `path`; throws omnibal::Error when it cannot write.
void write_unit_cost_table(const UnitCostTable& table, const std::string& path);
/// Reads a table written by write_unit_cost_table (or the profiler). Throws omnibal::Error
/// naming the file, the unit index and the key on a missing or wrongly typed field.
UnitCostTable read_unit_cost_table(const std::string& path);
/// JSON text of `table` (what write_unit_cost_table writes).
std::string unit_cost_table_json(const UnitCostTable& table);
/// Parses JSON text; `origin` names the source in error messages.
UnitCostTable parse_unit_cost_table(const std::string& text, const std::string& origin);

}  // namespace omnibal::partition
