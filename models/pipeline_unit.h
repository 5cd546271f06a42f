// PipelineUnit: the granularity at which the VLM is cut into pipeline stages (OmniBal §2,
// balanced model partition). The model is an ordered list of units:
//   vit_embed, vit_block_0 .. vit_block_{Lv-1}, projector, llm_embed,
//   llm_block_0 .. llm_block_{Ll-1}, llm_head
// Each unit is a torch::nn::Module owning its parameters (names are stable, e.g.
// "llm_block_3.attention.wq.weight" once prefixed with the unit name) and maps a UnitState to
// the next UnitState. Running any contiguous range of units is a pipeline stage; running all of
// them in order is the whole model.
//
// A unit's forward is a pure function of its parameters and its input state (no hidden caches;
// dropout masks derive from the state's dropout_key, models/dropout.h), so activation
// recomputation can rerun it from the saved input state.
// Not here: the stage executor and recomputation policy (lib/pipeline), cost profiling.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "core/units.h"
#include "models/dropout.h"
#include "models/tensor_parallel.h"
#include "models/unit_state.h"

namespace omnibal::models {

/// The phase of the state a unit of `kind` consumes (kPixels for the ViT embedding, kVit for
/// ViT blocks and the projector, kProjected for the LLM embedding, kLlm for LLM blocks and head).
Phase input_phase(UnitKind kind);
/// The phase of the state a unit of `kind` produces (kLoss for the head).
Phase output_phase(UnitKind kind);

class PipelineUnit;

/// What run_unit (models/recompute.h) calls around a unit's forward when the unit has them: the
/// fully sharded parameters of train.shard full are gathered before and released after, and
/// gathered again before the unit's backward (train/full_shard.h).
class UnitParamHooks {
 public:
  virtual ~UnitParamHooks() = default;
  /// Before `unit`'s forward (also the recomputed one inside the backward, through the hook
  /// after_forward sets on the output).
  virtual void before_forward(PipelineUnit& unit) = 0;
  /// After `unit`'s forward on `in` produced `out`.
  virtual void after_forward(PipelineUnit& unit, const UnitState& in, const UnitState& out) = 0;
};

/// One pipeline unit: a module with parameters and a forward over UnitState.
class PipelineUnit : public torch::nn::Module {
 public:
  /// A unit named unit_name(id) (core/units.h).
  explicit PipelineUnit(UnitId id) : unit_name_(omnibal::unit_name(id)), id_(id) {}

  /// Maps the state at this unit's input boundary to the state at its output boundary.
  /// Throws omnibal::Error when `state.phase` is not the phase this unit consumes.
  virtual UnitState forward(const UnitState& state) = 0;

  /// Stable unit name ("vit_block_3"); the prefix of its parameters' names in the whole model.
  const std::string& unit_name() const { return unit_name_; }
  /// Which unit of the chain this is (kind and block index).
  UnitId id() const { return id_; }
  /// What kind of unit this is.
  UnitKind kind() const { return id_.kind; }
  /// The phase of the state forward() consumes; its hidden tensor has
  /// hidden_rank(input_phase()) dimensions (unit_state.h).
  Phase input_phase() const { return models::input_phase(id_.kind); }
  /// The phase of the state forward() returns.
  Phase output_phase() const { return models::output_phase(id_.kind); }
  /// Parameters of other units this unit's forward reads (a head tied to the embedding in the
  /// same process reads llm_embed's weight); fully sharded units gather them too.
  virtual std::vector<torch::Tensor> borrowed_parameters() const { return {}; }
  /// Number of parameter elements owned by this unit.
  int64_t num_parameters() const;
  /// Activation recomputation: when set, run_unit() keeps only this unit's input and reruns its
  /// forward during the backward pass (models/recompute.h). Off by default.
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }
  /// The hooks run_unit calls around this unit's forward (null: none, the default); not owned.
  void set_param_hooks(UnitParamHooks* hooks) { param_hooks_ = hooks; }
  UnitParamHooks* param_hooks() const { return param_hooks_; }
  /// Residual dropout probability of this unit's blocks (model.dropout; 0 = off, the default).
  /// Only ViT and LLM blocks use it (models/dropout.h). Throws unless 0 <= p < 1.
  void set_dropout(double p);
  double dropout() const { return dropout_; }
  /// This unit's tensor-parallel rank and group (size 1: none), fixed at construction.
  const TensorParallel& tensor_parallel() const { return tp_; }
  /// How TP splits the parameter `local_name` ("attn.qkv.weight"); replicated unless the unit
  /// marked it. Holds the full size along the split dimension once make_units sharded it.
  ShardSpec shard_spec(const std::string& local_name) const;
  /// Every marked parameter by local name.
  const std::map<std::string, ShardSpec>& shard_specs() const { return shards_; }
  /// Replaces each marked parameter (built and initialised at full size) by this rank's slice,
  /// in place (set_data, so modules keep their handles); records the full sizes. Once only.
  void shard_parameters();

 protected:
  /// Units built for TP call this in their constructor, then mark their split parameters.
  void set_tensor_parallel(const TensorParallel& tp) { tp_ = tp; }
  void mark_sharded(const std::string& local_name, ShardSpec spec) { shards_[local_name] = spec; }

  /// Counter-based dropout of `x` at `site`, keyed by state.dropout_key and this unit's name;
  /// x unchanged when dropout() == 0 or the key is 0 (evaluation).
  torch::Tensor apply_dropout(const torch::Tensor& x, const UnitState& state,
                              DropoutSite site) const;
  /// Throws omnibal::Error naming this unit when `state.phase != expected`.
  void expect_phase(const UnitState& state, Phase expected) const;

 private:
  std::string unit_name_;
  UnitId id_;
  bool recompute_ = false;
  UnitParamHooks* param_hooks_ = nullptr;
  double dropout_ = 0.0;
  uint64_t name_hash_ = 0;
  TensorParallel tp_;
  std::map<std::string, ShardSpec> shards_;
  bool sharded_ = false;
};

using UnitPtr = std::shared_ptr<PipelineUnit>;

}  // namespace omnibal::models
