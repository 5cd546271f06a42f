// UnitState: what flows between the model's pipeline units (models/pipeline_unit.h). It carries
// the hidden-state tensor plus the small side tensors later units need (token ids, position ids,
// cu_seqlens, labels, image flags), and, after the last unit, the loss sum and label count.
//
// At a pipeline-stage boundary only `hidden` is large; side_tensor() packs the rest into one
// small int64 tensor so a stage sends two tensors (from_wire() rebuilds the state). The hidden
// state's meaning depends on `phase`:
//   kPixels    [tiles, 3, H, W]         pixel values (input of the ViT embedding)
//   kVit       [tiles, 1 + P, d_vit]    ViT tokens, class token first (P patches per tile)
//   kProjected [img_tokens, d_llm]      projector output of the real tiles, in pack order
//   kLlm       [T, d_llm]               LLM hidden states of the pack
//   kLoss      undefined                the head has consumed it; loss fields are set
// Not here: micro-batch bookkeeping (the pipeline runtime owns it) and any padding (a pack is
// never padded inside the model).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "models/pack_batch.h"

namespace omnibal::models {

/// Which representation UnitState::hidden holds (the boundary between two units).
enum class Phase : int64_t { kPixels = 0, kVit = 1, kProjected = 2, kLlm = 3, kLoss = 4 };

/// Name of a phase for error messages ("pixels", "vit", "projected", "llm", "loss").
const char* phase_name(Phase phase);
/// Dimensions of the hidden tensor in `phase` (the table above): 4 for kPixels, 3 for kVit, 2
/// for kProjected and kLlm, 0 for kLoss (no tensor).
int64_t hidden_rank(Phase phase);

/// State passed from one pipeline unit to the next. Side tensors are int64 and live on the
/// hidden state's device, except cu_seqlens, which stays on the CPU (the attention loop reads it).
struct UnitState {
  Phase phase = Phase::kPixels;
  torch::Tensor hidden;        ///< see the phase table in the file comment
  torch::Tensor image_flags;   ///< [tiles] int64: 1 real tile, 0 dummy (features dropped)
  torch::Tensor input_ids;     ///< [T] int64
  torch::Tensor position_ids;  ///< [T] int64, restarting at 0 per sample
  torch::Tensor cu_seqlens;    ///< [n + 1] int64 on the CPU, cu_seqlens[n] == T
  torch::Tensor labels;        ///< [T] int64, -100 = no loss; labels[t] is the target of token t
  int64_t dropout_key = 0;     ///< key of the micro-batch's dropout masks; 0 = dropout off
  // Set by the last unit (final norm + head + loss):
  torch::Tensor loss_sum;         ///< [] float32: sum of token cross-entropies (nats)
  int64_t label_count = 0;        ///< tokens that contributed to loss_sum
  torch::Tensor token_loss;       ///< [label_count] float32 per-token cross-entropy
  torch::Tensor label_positions;  ///< [label_count] int64: pack position whose logits predict
  torch::Tensor logits;           ///< [label_count, vocab] logits at label_positions (under
                                  ///< TP this rank's vocabulary columns only, [K, V'])
  torch::Tensor predictions;      ///< [label_count] int64 argmax over the whole vocabulary

  /// Builds the input state of the first unit from a pack: hidden = pixel_values (kPixels),
  /// dropout_key = pack.dropout_key.
  /// Moves tensors to `device` (cu_seqlens stays on the CPU). Checks that the documented shapes
  /// and dtypes agree (T from input_ids, cu_seqlens monotone from 0 to T) and throws
  /// omnibal::Error naming the field otherwise. `pixel_dtype`: pixel values are cast to it (the
  /// model's dtype, as InternVL feeds pixel_values in bf16), so a bf16 stage 0 keeps one bf16
  /// copy of its input per micro-batch in flight instead of an fp32 one plus the bf16 cast.
  static UnitState from_pack(const PackBatch& pack, const torch::Device& device = torch::kCPU,
                             std::optional<torch::Dtype> pixel_dtype = std::nullopt);

  /// Number of tokens T in the pack.
  int64_t num_tokens() const { return input_ids.size(0); }
  /// Number of samples n in the pack.
  int64_t num_samples() const { return cu_seqlens.size(0) - 1; }
  /// True for an empty micro-batch: n = 0 samples (cu_seqlens = [0]), as a pack whose every
  /// sample was skipped under data.on_bad_sample: skip. run_units() passes it through without
  /// computing (empty_output()), so every stage still sends and receives its messages.
  bool empty() const { return cu_seqlens.defined() && cu_seqlens.size(0) == 1; }

  /// All side information (phase, ids, positions, cu_seqlens, labels, image flags, dropout key)
  /// as one int64 CPU tensor: [phase, T, n, tiles, dropout_key, input_ids(T), position_ids(T),
  /// labels(T), cu_seqlens(n+1), image_flags(tiles)]. What a stage sends next to `hidden`.
  torch::Tensor side_tensor() const;

  /// Inverse of side_tensor(): a state with `hidden` and the unpacked side information, side
  /// tensors moved to hidden's device. Throws omnibal::Error when `side` is malformed.
  static UnitState from_wire(torch::Tensor hidden, const torch::Tensor& side);

  /// Copy of this state with another hidden tensor (same side tensors, shared storage).
  UnitState with_hidden(torch::Tensor next, Phase next_phase) const;
};

}  // namespace omnibal::models
