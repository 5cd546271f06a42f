// Counter-based dropout: every mask is a pure function of (run seed, step, global micro-batch
// index, unit, site), never of a global generator's position. That gives three properties the
// trainer relies on:
//   - activation recomputation (recompute.h) reruns a unit's forward from its saved input state,
//     which carries the key, so it regenerates exactly the masks of the first forward;
//   - results do not depend on the pipeline split, the DP size or m: the key names the pack by
//     its slot in the step's global batch of dp * m packs (the plan's index, the same whatever
//     DP rank or micro-batch runs it), and a unit's masks by its stable name, not its stage;
//   - a resumed run draws the same masks (there is no generator state to checkpoint).
// Where (the model's choice, `model.dropout`): on the residual branches of every ViT and LLM
// block, i.e. the attention output (after the output projection, before layer scale and the
// residual add) and the MLP output, as GPT-2 / the original Transformer's residual dropout and
// where InternViT applies drop-path. Not on attention probabilities: doing that with
// counter-based masks would force the O(L^2)-memory math path instead of fused SDPA / flash
// kernels on LibTorch 2.x (their internal dropout draws from the global CUDA generator).
// Evaluation runs with key 0, which turns dropout off.
// Masks are drawn on the CPU (torch_compat.h's cpu_generator) and moved to the tensor's device,
// so CPU and CUDA runs draw the same masks; a CUDA Philox path would be faster for large models.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace omnibal::models {

/// Dropout site inside a unit (part of the mask key).
enum class DropoutSite : int { kAttentionOutput = 1, kMlpOutput = 2 };

/// Key of one micro-batch's masks at one training step: a splitmix64 mix of (seed, step, slot),
/// where slot is the pack's index in the step's global batch of dp * m packs
/// (train::TrainingData::slot). Never 0; 0 means "dropout off" (evaluation).
int64_t dropout_key(uint64_t seed, int64_t step, int64_t slot);

/// 64-bit FNV-1a of a unit name: the unit part of the mask key (stable across stage splits).
uint64_t unit_name_hash(const std::string& unit_name);

/// Inverted dropout of `x` with probability p: x * mask / (1 - p), mask[i] = u[i] >= p with
/// u uniform in [0, 1) drawn from a CPU generator seeded by mix(key, unit_hash, site); the mask
/// has x's shape and moves to x's device. Returns x unchanged when p == 0 or key == 0.
/// Throws omnibal::Error unless 0 <= p < 1.
torch::Tensor counter_dropout(const torch::Tensor& x, double p, int64_t key, uint64_t unit_hash,
                              DropoutSite site);

}  // namespace omnibal::models
