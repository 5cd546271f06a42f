// PackBatch: the tensors of one pack (one micro-batch on one device, docs/conventions.md). lib/data
// builds it from sample ids; the model's pipeline units consume it. Only what a pipeline stage
// needs is filled in (data::PackParts::for_stage): the first stage gets pixels, ids and labels
// (they travel on with its activation), the last stage labels; undefined tensors are simply not
// materialised.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace omnibal::models {

/// One packed micro-batch of n samples with T tokens and `tiles` ViT tiles in total.
struct PackBatch {
  torch::Tensor pixel_values;  ///< [tiles, 3, H, W] float32, normalised; H = W = preset tile size
  torch::Tensor image_flags;   ///< [tiles] int64: 1 real tile, 0 dummy tile of a text-only sample
  torch::Tensor input_ids;     ///< [T] int64, samples concatenated, no padding between them
  torch::Tensor labels;        ///< [T] int64, -100 where no loss (prompts, image tokens); not
                               ///< shifted: labels[t] is the target of token t, predicted from
                               ///< position t - 1 of the same sample (a sample's first label is
                               ///< never used)
  torch::Tensor position_ids;  ///< [T] int64, restarting at 0 for each sample
  torch::Tensor cu_seqlens;    ///< [n + 1] int64, cumulative sample lengths starting at 0 (kept
                               ///< on the CPU by the model: the attention loop reads it)
  std::vector<int64_t> sample_ids;  ///< global sample index of each member, in pack order
  /// "file:line: bad sample (reason): detail" of each planned sample left out under
  /// data.on_bad_sample: skip, in plan order. A pack whose every sample was left out has n = 0
  /// (cu_seqlens = [0], T = 0, no tiles) and runs as an empty micro-batch.
  std::vector<std::string> skipped;
  int64_t dropout_key = 0;  ///< key of this pack's dropout masks (models/dropout.h); 0 = off

  /// Number of samples in the pack.
  int64_t num_samples() const { return static_cast<int64_t>(sample_ids.size()); }

  /// Page-locks every defined tensor a stage copies to its device (all but cu_seqlens, which
  /// the model reads on the host), so UnitState::from_pack's copies to a CUDA device are
  /// asynchronous and the loader's worker, not the training thread, pays for the pinning
  /// (data::LoaderOptions::pin_memory, set for runtime.device: cuda). Throws c10::Error where
  /// no CUDA device is present.
  void pin_memory() {
    for (torch::Tensor* t : {&pixel_values, &image_flags, &input_ids, &labels, &position_ids})
      if (t->defined()) *t = t->pin_memory();
  }
};

}  // namespace omnibal::models
