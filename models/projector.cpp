#include "models/projector.h"
#include "models/weight_grad_store.h"

#include <cmath>

#include "core/error.h"
#include "models/mixed_precision.h"

namespace omnibal::models {

torch::Tensor pixel_shuffle_v2(const torch::Tensor& x) {
  OMNIBAL_CHECK(x.dim() == 4 && x.size(1) % 2 == 0 && x.size(2) % 2 == 0,
                "pixel_shuffle_v2: expected [n, w, h, c] with even w and h, got ", x.sizes());
  const int64_t n = x.size(0), w = x.size(1), h = x.size(2), c = x.size(3);
  torch::Tensor y = x.reshape({n, w, h / 2, c * 2}).permute({0, 2, 1, 3}).contiguous();
  y = y.view({n, h / 2, w / 2, c * 4});
  return y.permute({0, 2, 1, 3}).contiguous();
}

ProjectorUnit::ProjectorUnit(const VitPreset& vit, const LlmPreset& llm)
    : PipelineUnit({UnitKind::kProjector, 0}) {
  const int64_t in = 4 * static_cast<int64_t>(vit.width);
  norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({in}).eps(1e-5)));
  fc1 = register_module("fc1", torch::nn::Linear(in, llm.width));
  fc2 = register_module("fc2", torch::nn::Linear(llm.width, llm.width));
}

UnitState ProjectorUnit::forward(const UnitState& state) {
  expect_phase(state, Phase::kVit);
  if (!state.hidden.defined()) return state.with_hidden({}, Phase::kProjected);
  const torch::Tensor& x = state.hidden;  // [tiles, 1 + side^2, d]
  const int64_t tiles = x.size(0), patches = x.size(1) - 1, d = x.size(2);
  const auto side = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(patches))));
  OMNIBAL_CHECK(side * side == patches && side % 2 == 0,
                "projector: expected 1 + side^2 ViT tokens ", "per tile with an even side, got ",
                x.size(1));
  const torch::Tensor grid = x.narrow(1, 1, patches).reshape({tiles, side, side, d});
  const torch::Tensor shuffled = pixel_shuffle_v2(grid).reshape({tiles, patches / 4, 4 * d});
  const torch::Tensor projected =
      linear_layer(torch::gelu(linear_layer(layer_norm_fp32(shuffled, norm->weight, norm->bias,
                                                            norm->options.eps()),
                                            fc1->weight, fc1->bias)),
                   fc2->weight,
                   fc2->bias);  // [tiles, side^2/4, d_llm]
  OMNIBAL_CHECK(state.image_flags.defined() && state.image_flags.size(0) == tiles,
                "projector: image_flags must have one entry per tile (", tiles, ")");
  const torch::Tensor real = state.image_flags.eq(1).nonzero().squeeze(1);
  const torch::Tensor kept = projected.index_select(0, real);
  return state.with_hidden(kept.reshape({-1, projected.size(2)}), Phase::kProjected);
}

}  // namespace omnibal::models
