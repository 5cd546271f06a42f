// StageRuntime: one rank's pipeline stage as the trainer runs it. Built from the start-up plan
// (train/startup_planner.h): the stage's units, chunk after chunk (interleaved: chunks
// k = c * P + stage, lib/schedule/instruction.h), with their recompute flags and the frozen
// groups (train.freeze) set; the parameters by name; the TP shard layout; the tied head's two
// copies when it is split over stages (train/tied_head.h); the stage executor (lib/pipeline) with
// this stage's instruction lists; and, once restored, the optimizer (train/stage_optimizer.h:
// fp32 master weights, AdamW, ZeRO-1 in train/distributed_optimizer.h, ZeRO-3 in
// train/full_shard.h, which then gathers each unit's parameters around its compute).
// restore() gives the stage its starting weights: the checkpoint's on a resume, otherwise the
// seeded initialisation and model.init_from (under TP through an unsharded copy of the stage:
// the checkpoint holds whole tensors).
// finalize_grads() and grad_norm() are every gradient fix-up between the backward and the step,
// in one place (as Megatron's finalize_model_grads).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comm/parallel_comms.h"
#include "comm/tensor_message.h"
#include "core/config.h"
#include "core/model_preset.h"
#include "memory/stage_plan.h"
#include "models/vlm.h"
#include "pipeline/stage_executor.h"
#include "schedule/schedules.h"
#include "train/distributed_optimizer.h"
#include "train/full_shard.h"
#include "train/run_config.h"
#include "train/stage_coord.h"
#include "train/step_programs.h"
#include "train/tied_head.h"
#include "train/tp_group.h"
#include "train/train_checkpoint.h"

namespace omnibal::train {

/// What a stage is built from; the references outlive the StageRuntime (the trainer owns them).
struct StageSetup {
  const Config& config;  ///< resolved (run_config.h)
  const ModelPreset& preset;
  const memory::StagePlan& plan;  ///< split, recompute flags, schedule, virtual stages
  comm::ParallelComms& comms;
  torch::Device device;    ///< runtime.device (train/run_device.h)
  int64_t img_context_id;  ///< the tokenizer's image-context token
};

/// One rank's stage: units, parameters, layouts, executor and optimizer (see the file comment).
struct StageRuntime {
  /// Builds the stage's units on setup.device (weights not yet set: call restore()).
  explicit StageRuntime(const StageSetup& setup);

  /// The stage's starting weights, then the optimizer over them: on a resume the checkpoint's
  /// parameters, AdamW moments and counters (returned), otherwise the seeded initialisation and
  /// model.init_from (nothing returned). Collective. Throws omnibal::Error naming the file on a
  /// bad checkpoint or init_from.
  std::optional<TrainCounters> restore(const ResumePoint& resume, TrainCheckpoint& checkpoints);
  /// Rank 0's start-up lines about the layout: TP, the stages, the schedule, precision and the
  /// optimizer's memory.
  void log_layout() const;
  /// What TrainCheckpoint saves and loads of this stage.
  CheckpointedStage checkpointed();

  /// Called by the executor at ReduceGrads: the DP all-reduce (ZeRO-1: reduce-scatter) of the
  /// main gradient (under comm.overlap: the wait for the reductions launched in the backward),
  /// then the tied head's sum of its two copies' gradients over the pipeline.
  void finalize_grads();
  /// Sets the optimizer's hooks of one step in `hooks`: the bf16 fold after each backward,
  /// finalize_grads at ReduceGrads and, when the optimizer overlaps (comm.overlap, DP > 1), the
  /// chunks' final-gradient windows (bucket launches) and, under ZeRO-1, the wait for a chunk's
  /// parameters before its first forward.
  void add_gradient_hooks(pipeline::StepHooks& hooks);
  /// Collective over the world: the global L2 norm of the reduced gradient, each parameter
  /// counted once (the tied head's copy and, on TP ranks > 0, replicated parameters left out).
  double grad_norm() { return optimizer->grad_norm(norm_scope); }
  /// Parameter (frozen included), gradient and optimizer bytes this rank holds between steps.
  ShardBytes resident_bytes() const;

  /// Collective: a digest of the whole model's parameters (gathered over TP), the same whatever
  /// the partition, PP, DP or TP; 48-bit hex text for logs and summary.json. Like every reader
  /// of the parameters here (checkpointed(), tied_copies_equal(), tp_replicated_equal()), it
  /// first waits for ZeRO-1's overlapped all-gather (DistributedOptimizer::wait_params).
  std::string param_hash_text();
  /// Collective: whether the tied head's two copies are bitwise equal on every pipeline.
  bool tied_copies_equal();
  /// Collective: whether every replicated parameter is bitwise equal over its TP group.
  bool tp_replicated_equal();

  StageSetup setup;
  StageCoord at;
  std::vector<models::UnitPtr> units;           ///< chunk after chunk
  std::vector<models::UnitRange> chunk_ranges;  ///< unit interval of each chunk of this stage
  std::vector<std::pair<std::string, torch::Tensor>> params;  ///< frozen included
  models::TensorParallel tp;            ///< this rank's TP group (size 1: none)
  TpLayout tp_layout;                   ///< which parameters are TP-sharded, and how
  std::set<std::string> tp_replicated;  ///< parameters whole on every TP rank
  std::unique_ptr<TiedHead> tied;
  std::unique_ptr<comm::TensorMessenger> pipe;  ///< to the neighbouring stages (PP > 1)
  std::unique_ptr<pipeline::StageExecutor> executor;
  schedule::StageSchedules programs;  ///< every stage's equal-cost instruction list
  /// Per-step lists (train/step_programs.h), once plan_step_programs() ran; null: `programs`.
  std::unique_ptr<StepPrograms> step_programs;
  /// Builds step_programs from the start-up cost table (null: none) and the data plan; rank 0
  /// logs which lists run. `data` outlives the stage.
  void plan_step_programs(const partition::UnitCostTable* table, TrainingData& data);
  /// This stage's instruction list at 0-based global step `step` (step_programs' or
  /// `programs`'); valid until the next call.
  const std::vector<schedule::Instruction>& program(int64_t step);
  std::unique_ptr<StageOptimizer> optimizer;  ///< made by restore(): `dist` or `full`
  DistributedOptimizer* dist = nullptr;       ///< train.shard none | optimizer
  FullShard* full = nullptr;                  ///< train.shard full (ZeRO-3)
  /// ZeRO-3: the FullShard build_units() fills unit by unit, until make_optimizer() installs it.
  std::unique_ptr<FullShard> sharded;
  GradNormScope norm_scope;  ///< see grad_norm()

 private:
  models::VlmOptions model_options() const;
  void build_units();
  OptimizerOptions optimizer_options() const;
  void make_optimizer();
  void init_weights();
  void init_sharded_from();
  /// Calls `fn(name, whole parameter)` for every parameter of the stage, in `params` order;
  /// under ZeRO-3 each unit is gathered (collective over DP) while its parameters are read.
  void for_each_param(const std::function<void(const std::string&, const torch::Tensor&)>& fn);
};

}  // namespace omnibal::train
