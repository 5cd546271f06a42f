// Pixel shuffle and the MLP projector between the ViT and the LLM (InternVL-Chat-1.5,
// docs/paper.md): the class token is dropped, the side x side patch grid is pixel-
// shuffled at ratio 0.5 in InternVL's "v2" ordering (tokens of width 4 d_vit on a grid of
// side/2 x side/2), then LayerNorm -> Linear(-> d_llm) -> GELU -> Linear(d_llm -> d_llm).
// Features of dummy tiles (image_flags == 0, text-only samples) are dropped after the
// projector, as InternVL does; they still get (zero) gradients, so every rank's ViT gradient is
// defined for the data-parallel all-reduce.
// Not here: other shuffle ratios (the preset validation allows 0.5 only).
#pragma once

#include <torch/torch.h>

#include "core/model_preset.h"
#include "models/pipeline_unit.h"

namespace omnibal::models {

/// InternVL pixel shuffle v2 at ratio 0.5: x [n, w, h, c] -> [n, w/2, h/2, 4c]. w and h even.
/// Element order equals: view(n, w, h/2, 2c) -> permute(0, 2, 1, 3) -> view(n, h/2, w/2, 4c)
/// -> permute(0, 2, 1, 3) (the "v2" transpose back).
torch::Tensor pixel_shuffle_v2(const torch::Tensor& x);

/// Unit "projector": kVit [tiles, 1 + side^2, d_vit] -> kProjected [real_tiles * side^2 / 4, d_llm],
/// real tiles in pack order. Parameters: norm.{weight, bias} [4 d_vit],
/// fc1.{weight [d_llm, 4 d_vit], bias}, fc2.{weight [d_llm, d_llm], bias}.
class ProjectorUnit : public PipelineUnit {
 public:
  ProjectorUnit(const VitPreset& vit, const LlmPreset& llm);
  UnitState forward(const UnitState& state) override;

  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

}  // namespace omnibal::models
