// The whole vision-language model as an ordered list of pipeline units (pipeline_unit.h):
//   vit_embed, vit_block_0..L_vit-1, projector, llm_embed, llm_block_0..L_llm-1, llm_head.
// make_units() builds any contiguous range of them (a pipeline stage holds only its own
// parameters); Vlm holds all of them and runs any range. Initialisation is deterministic from
// a seed *per parameter name*, so a stage built alone has exactly the weights the same units
// have in the whole model. Parameters are fp32 on the CPU and bf16 on CUDA by default.
// Tied embeddings (llm.tie_embeddings): when llm_embed and llm_head are in the same unit list
// they share one tensor; when they sit on different pipeline stages each stage holds a copy
// initialised identically and the trainer must sum the two gradients (as Megatron does).
// Not here: optimiser state, pipeline scheduling, checkpoint directories (lib/train).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/model_preset.h"
#include "models/pack_batch.h"
#include "models/pipeline_unit.h"

namespace omnibal::models {

/// How to instantiate a preset ("how we run it", as opposed to the preset's "what it is").
struct VlmOptions {
  int64_t img_context_id = -1;  ///< tokenizer id of <IMG_CONTEXT>; required (>= 0)
  uint64_t seed = 0;            ///< initialisation seed
  torch::Device device = torch::kCPU;
  std::optional<torch::Dtype> dtype;  ///< default: bf16 on CUDA, fp32 on CPU
  double init_std = 0.02;             ///< std of the normal init of matrices and embeddings
  double dropout = 0.0;               ///< residual dropout of ViT and LLM blocks (model.dropout)
  TensorParallel tp;                  ///< this rank's TP group (size 1: none; tensor_parallel.h)

  VlmOptions& with_img_context_id(int64_t id) {
    img_context_id = id;
    return *this;
  }
  VlmOptions& with_seed(uint64_t s) {
    seed = s;
    return *this;
  }
  VlmOptions& with_device(torch::Device d) {
    device = d;
    return *this;
  }
  VlmOptions& with_dtype(torch::Dtype t) {
    dtype = t;
    return *this;
  }
  VlmOptions& with_dropout(double p) {
    dropout = p;
    return *this;
  }
  VlmOptions& with_tensor_parallel(TensorParallel t) {
    tp = std::move(t);
    return *this;
  }
};

/// Parameter count of every unit of `preset` in model order, from the architecture alone (no
/// tensors are allocated), so the 6B+20B / 6B+34B presets can be costed on any machine.
/// A tied head counts 0 (its weight is llm_embed's).
std::vector<int64_t> unit_parameter_counts(const ModelPreset& preset);

/// Builds units [begin, end) of `preset`, initialised from options.seed, on options.device in
/// options.dtype; under options.tp each unit holds this TP rank's shards of the values the
/// units have at TP 1 (PipelineUnit::shard_spec). Throws omnibal::Error on an empty or
/// out-of-range interval, a missing img_context_id or a preset that does not split over tp.
std::vector<UnitPtr> make_units(const ModelPreset& preset, const VlmOptions& options, int64_t begin,
                                int64_t end);

/// Unit interval [first, second) of the chain.
using UnitRange = std::pair<int64_t, int64_t>;

/// make_units() for the model chunks of one interleaved pipeline rank: one vector per range
/// (ascending, disjoint), built together so a tied LM head whose embedding sits in an earlier
/// chunk of the same rank shares its tensor. `on_unit`, when set, is called with each unit once
/// it is complete (initialised, TP-sharded, on the device in its dtype, tied), in chain order,
/// before the next unit is built: a caller that shards it away (ZeRO-3, train/full_shard.h)
/// never holds the stage whole. Same errors as make_units.
std::vector<std::vector<UnitPtr>> make_chunk_units(
    const ModelPreset& preset, const VlmOptions& options, const std::vector<UnitRange>& ranges,
    const std::function<void(const UnitPtr&)>& on_unit = {});

/// Runs units in order (run_unit(), so recompute flags apply): the forward of one pipeline
/// stage (or of the whole model). An empty micro-batch (state.empty()) computes nothing and
/// returns empty_output() of the last unit; under ZeRO-3 (units with param hooks) it throws
/// omnibal::Error instead: every DP rank must run every unit.
UnitState run_units(const std::vector<UnitPtr>& units, UnitState state);

/// The output of `last` for an empty micro-batch (n = 0 samples, a pack whose every sample was
/// skipped under data.on_bad_sample: skip): the phase after `last` with a hidden state of no
/// rows in `last`'s dtype ([0, 0, 0] after ViT units, [0, 0] after the projector and LLM units,
/// so a next stage receives a tensor of the rank it expects), or after the head loss_sum 0 (no
/// graph), label_count 0 and empty token_loss / label_positions / logits. Throws omnibal::Error
/// unless state.empty().
UnitState empty_output(const PipelineUnit& last, const UnitState& state);

/// Re-initialises every parameter of `unit` deterministically from (seed, full parameter name):
/// norm weights 1, biases 0, layer scales 0.1 (InternViT's init), everything else N(0, std).
void init_unit_parameters(PipelineUnit& unit, uint64_t seed, double std);

/// Writes / reads one unit's parameters by their stable names (torch::save archive of the
/// module). load_unit throws omnibal::Error naming the file when a name or shape differs.
void save_unit(const PipelineUnit& unit, const std::string& path);
void load_unit(PipelineUnit& unit, const std::string& path);

/// All units of a preset in one module: the reference for pipeline stages and the CPU demo.
/// Parameter names are "<unit>.<local name>", e.g. "llm_block_0.attention.wq.weight".
class VlmImpl : public torch::nn::Module {
 public:
  VlmImpl(const ModelPreset& preset, const VlmOptions& options);

  /// Runs units [begin, end) on `state` (a pipeline stage's forward).
  UnitState forward(const UnitState& state, int64_t begin, int64_t end);
  /// Runs every unit on a pack: returns the kLoss state (loss_sum, label_count, ...).
  UnitState forward(const PackBatch& pack);

  const std::vector<UnitPtr>& units() const { return units_; }
  int64_t num_units() const { return static_cast<int64_t>(units_.size()); }
  const ModelPreset& preset() const { return preset_; }
  const VlmOptions& options() const { return options_; }

 private:
  ModelPreset preset_;
  VlmOptions options_;
  std::vector<UnitPtr> units_;
};
TORCH_MODULE(Vlm);

}  // namespace omnibal::models
