// Per-unit cost profiling (BMP's first step, docs/paper.md): every pipeline unit of a
// preset (models/vlm.h) is timed and its memory counted under one balanced pack of Q_v tiles
// and Q_t tokens (profiling_pack.h), giving the torch-free per-unit cost table
// (partition/unit_cost_table.h) that the partition search and the memory planner read.
//
// Per unit, from the pack's state at the unit's input (computed once, without autograd):
//   forward_s        forward seconds over `repeats` runs after `warmup` runs: their median, or
//                    their mean (ProfileOptions::statistic)
//   backward_s       median (or mean) seconds of backpropagating a gradient of ones through the unit's
//                    graph (weight gradients + input gradient when an earlier unit trains);
//                    weight gradients accumulate into existing buffers after the first run, as
//                    over the micro-batches of a step
//   activation_bytes tensor bytes the unit's graph keeps from forward to backward, its input
//                    included when the graph saves it, its output excluded (the next unit or
//                    the send buffer accounts for it): the meter's bytes after the forward with
//                    the caller's reference to the input dropped, minus the bytes before it
//                    without the input, minus the output hidden state
//   parameter_bytes  bytes of the unit's parameters in the run dtype (fp32 on the CPU, bf16 on
//                    CUDA), so memory options must use the same bytes per parameter
//   output_bytes     the hidden state plus the side tensor sent to the next unit (0 for the head)
//   checkpointed_forward_s / checkpointed_backward_s (ProfileOptions::checkpointed, trainable
//                    ViT and LLM blocks): the same statistic of the unit run checkpointed
//                    (models/recompute.h): its forward without autograd, then its backward
//                    with the forward rerun; each repeat right after the unit's plain run
// train.freeze: a frozen unit's parameters get no gradients (trainable = false); a unit before
// which nothing trains (a frozen ViT) runs without autograd (backward_s = 0, no activations).
// The meter is the counting CPU allocator or the CUDA caching allocator (memory_meter.h).
// Not here: timed partition trials of whole stages (the trainer), communication costs.
#pragma once

#include "core/choices.h"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/model_preset.h"
#include "core/units.h"
#include "models/pipeline_unit.h"
#include "partition/unit_cost_table.h"
#include "profile/profiling_pack.h"

namespace omnibal::profile {

/// Which clock times a unit: wall time (default), or the calling thread's CPU time, which other
/// processes sharing the cores do not inflate but which only covers intra-op work when LibTorch
/// runs on 1 thread (CPU only; CUDA work is timed by wall clock after a synchronize).
enum class ProfileClock { kWall, kThreadCpu };

/// Seconds on `clock` since an unspecified start (differences only).
double clock_seconds(ProfileClock clock);

/// How a unit's repeats become its table time. kMedian ignores a minority of outliers; kMean is
/// the expected time, what a step (a sum of many unit runs) averages to when the host switches
/// between speeds during the profile (a shared VM: the median of a two-speed sample jumps between
/// the two speeds from one profile to the next, the mean moves with the share of each).
enum class ProfileStatistic { kMedian, kMean };

/// `values` summarised by `statistic`. Throws omnibal::Error when `values` is empty.
double summarize(std::vector<double> values, ProfileStatistic statistic);

/// What to profile and how.
struct ProfileOptions {
  ProfilingPackOptions pack;  ///< the balanced pack (Q_v, Q_t, samples per pack, seed)
  int warmup = 1;             ///< untimed runs per unit
  int repeats = 5;            ///< timed runs per unit; runs interleave units
  ProfileStatistic statistic = ProfileStatistic::kMedian;  ///< of the repeats, per unit
  std::vector<UnitGroup> freeze;  ///< train.freeze groups: vit, projector, llm
  uint64_t init_seed = 0;         ///< parameter initialisation seed
  torch::Device device = torch::kCPU;
  /// Parameter and activation dtype (train.precision); default bf16 on CUDA, fp32 on the CPU.
  std::optional<torch::Dtype> dtype;
  ProfileClock clock = ProfileClock::kWall;
  /// parallel.tp: profile one TP rank's shards (TensorParallel::for_profiling: the units hold
  /// and compute a rank's slices; the TP all-reduces are left out, the simulator adds them).
  int tp = 1;
  /// Also time ZB-H1's split backward (models/weight_grad_store.h): each backward runs as B with
  /// the linear layers' weight gradients deferred, then W; fills backward_weight_s (W's median)
  /// and weight_grad_bytes (the deferred inputs and output gradients) per unit; backward_s
  /// stays B + W.
  bool split_backward = false;
  /// Also time each trainable ViT / LLM block checkpointed (checkpointed_forward_s and
  /// checkpointed_backward_s; about 2x the blocks' profiling time).
  bool checkpointed = true;
  /// Called before each unit's run (the input pass and every warm-up and timed run), e.g. to
  /// end the profile on a stop signal by throwing (lib/train/startup_stop.h); what it throws
  /// leaves profile_units as it is. Empty: nothing.
  std::function<void()> between_units;
};

/// The table plus what the table format has no field for.
struct ProfileResult {
  partition::UnitCostTable table;
  std::vector<double> forward_transient_bytes;   ///< per unit: peak during forward above the end
  std::vector<double> backward_transient_bytes;  ///< per unit: peak during backward above start
  std::vector<double> forward_min_s, forward_max_s, backward_min_s, backward_max_s;
};

/// Per unit of `preset` (model order): false for units in a frozen group (freeze_group,
/// core/units.h).
std::vector<bool> trainable_units(const ModelPreset& preset, const std::vector<UnitGroup>& freeze);

/// Sets requires_grad = false on the parameters of units whose freeze group is in `freeze`.
void apply_freeze(const std::vector<models::UnitPtr>& units, const std::vector<UnitGroup>& freeze);

/// Profiles every unit of `preset` (see the file comment). source = "profiled:<device>";
/// load = the pack's tiles, tokens, samples and squared sample lengths (token_sq_sum). Throws omnibal::Error on bad options (pack
/// options as profiling_pack_layout(), repeats < 1, warmup < 0), and whatever
/// options.between_units throws.
ProfileResult profile_units(const ModelPreset& preset, const ProfileOptions& options);

}  // namespace omnibal::profile
