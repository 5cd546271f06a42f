// Helpers shared by the model tests: the tiny preset, synthetic packs built with omnibal::Rng,
// the golden-value fill shared with scripts/golden/make_tiny_golden.py, per-sample losses and
// gradient snapshots.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model_preset.h"
#include "core/paths.h"
#include "core/rng.h"
#include "models/pack_batch.h"
#include "models/unit_state.h"
#include "models/vlm.h"

namespace omnibal::models::testing {

inline constexpr int64_t kImgContextId = 1000;  // below the tiny vocabulary (1024)

inline const ModelPreset& tiny_preset() {
  static const ModelPreset preset = load_model_preset("tiny");
  return preset;
}

/// One synthetic sample: `tiles` image tiles (or one dummy tile when tiles == 0), `text` text
/// tokens around the image tokens, the last `labelled` tokens labelled.
struct SampleSpec {
  int tiles = 1;
  int text = 10;
  int labelled = 4;
};

/// FNV-1a of a parameter name: the seed of its golden values (same as the Python script).
inline uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

/// Golden values of tensor `name` (see make_tiny_golden.py golden_tensor()).
inline torch::Tensor golden_values(const std::string& name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  auto ends = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  double base = 0.0, scale = 0.0;
  if (ends("bias")) {
    base = 0.0;
    scale = 0.1;
  } else if (name.find("norm") != std::string::npos && ends("weight")) {
    base = 1.0;
    scale = 0.2;
  } else if (ends(".ls1") || ends(".ls2")) {
    base = 0.5;
    scale = 0.2;
  } else if (name == "pixel_values") {
    base = 0.0;
    scale = 1.0;
  } else {
    scale = std::sqrt(3.0 / static_cast<double>(n / shape[0]));
  }
  std::vector<float> values(static_cast<size_t>(n));
  uint64_t state = fnv1a(name);
  for (auto& v : values) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    v = static_cast<float>(base + scale * (2.0 * u - 1.0));
  }
  return torch::tensor(values).reshape(shape);
}

/// Overwrites every parameter of `model` with its golden values.
inline void fill_golden(Vlm& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    torch::Tensor p = item.value();
    p.copy_(golden_values(item.key(), p.sizes().vec()));
  }
}

/// tests/models/fixtures/tiny_golden.pt (scripts/golden/make_tiny_golden.py): the Python
/// reference's pack, logits, losses and gradients of the tiny preset.
struct GoldenFixture {
  /// Loads the fixture; throws std::runtime_error when the file cannot be read.
  GoldenFixture() : values(load()) {}
  c10::Dict<c10::IValue, c10::IValue> values;
  static c10::Dict<c10::IValue, c10::IValue> load() {
    const std::string path = omnibal::source_dir() + "/tests/models/fixtures/tiny_golden.pt";
    std::ifstream in(path, std::ios::binary);
    if (!in.good()) throw std::runtime_error("cannot read " + path);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return torch::pickle_load(bytes).toGenericDict();
  }
  /// Whether the fixture stores `key`.
  bool contains(const std::string& key) const { return values.contains(key); }
  /// The tensor stored under `key`.
  torch::Tensor get(const std::string& key) const { return values.at(key).toTensor(); }
  /// The fixture's <IMG_CONTEXT> id.
  int64_t img_context_id() const { return get("img_context_id").item<int64_t>(); }
  /// The fixture's pack for `preset`, pixels from golden_values("pixel_values").
  PackBatch pack(const ModelPreset& preset) const {
    PackBatch pack;
    pack.input_ids = get("input_ids");
    pack.labels = get("labels");
    pack.position_ids = get("position_ids");
    pack.cu_seqlens = get("cu_seqlens");
    pack.image_flags = get("image_flags");
    const int64_t tiles = pack.image_flags.size(0), side = preset.vit.tile_size;
    pack.pixel_values = golden_values("pixel_values", {tiles, 3, side, side});
    return pack;
  }
};

/// Builds a pack of `specs` for `preset` with random text ids (never kImgContextId) and
/// random pixels, all from Rng(seed).
inline PackBatch make_pack(const ModelPreset& preset, const std::vector<SampleSpec>& specs,
                           uint64_t seed) {
  Rng rng(seed);
  const int64_t tpt = preset.tokens_per_tile();
  std::vector<int64_t> ids, labels, positions, cu{0}, flags;
  for (const auto& s : specs) {
    std::vector<int64_t> sample;
    const int pre = s.text / 3;
    for (int i = 0; i < pre; ++i) sample.push_back(static_cast<int64_t>(rng.below(kImgContextId)));
    for (int64_t i = 0; i < s.tiles * tpt; ++i) sample.push_back(kImgContextId);
    for (int i = pre; i < s.text; ++i)
      sample.push_back(static_cast<int64_t>(rng.below(kImgContextId)));
    for (size_t i = 0; i < sample.size(); ++i) {
      ids.push_back(sample[i]);
      labels.push_back(i + s.labelled >= sample.size() ? sample[i] : -100);
      positions.push_back(static_cast<int64_t>(i));
    }
    cu.push_back(cu.back() + static_cast<int64_t>(sample.size()));
    if (s.tiles == 0) flags.push_back(0);
    for (int t = 0; t < s.tiles; ++t) flags.push_back(1);
  }
  const int64_t side = preset.vit.tile_size;
  std::vector<float> px(flags.size() * 3 * side * side);
  for (auto& v : px) v = static_cast<float>(2.0 * rng.uniform() - 1.0);
  PackBatch pack;
  pack.pixel_values =
      torch::tensor(px).reshape({static_cast<int64_t>(flags.size()), 3, side, side});
  pack.image_flags = torch::tensor(flags);
  pack.input_ids = torch::tensor(ids);
  pack.labels = torch::tensor(labels);
  pack.position_ids = torch::tensor(positions);
  pack.cu_seqlens = torch::tensor(cu);
  for (size_t i = 0; i < specs.size(); ++i) pack.sample_ids.push_back(static_cast<int64_t>(i));
  return pack;
}

/// The single-sample pack of sample `i` of `pack` built from `specs` (tiles are contiguous).
inline PackBatch sample_of(const PackBatch& pack, const std::vector<SampleSpec>& specs, size_t i) {
  int64_t tile0 = 0;
  for (size_t j = 0; j < i; ++j) tile0 += std::max(1, specs[j].tiles);
  const int64_t tiles = std::max(1, specs[i].tiles);
  const int64_t a = pack.cu_seqlens[i].item<int64_t>(), b = pack.cu_seqlens[i + 1].item<int64_t>();
  PackBatch one;
  one.pixel_values = pack.pixel_values.narrow(0, tile0, tiles);
  one.image_flags = pack.image_flags.narrow(0, tile0, tiles);
  one.input_ids = pack.input_ids.slice(0, a, b);
  one.labels = pack.labels.slice(0, a, b);
  one.position_ids = pack.position_ids.slice(0, a, b);
  one.cu_seqlens = torch::tensor(std::vector<int64_t>{0, b - a});
  one.sample_ids = {static_cast<int64_t>(i)};
  return one;
}

/// Per-sample loss sums of a kLoss state (token losses bucketed by cu_seqlens).
inline std::vector<double> sample_losses(const UnitState& s) {
  std::vector<double> out(static_cast<size_t>(s.num_samples()), 0.0);
  const auto cu = s.cu_seqlens.accessor<int64_t, 1>();
  for (int64_t k = 0; k < s.label_count; ++k) {
    const int64_t pos = s.label_positions[k].item<int64_t>();
    size_t i = 0;
    while (pos >= cu[i + 1]) ++i;
    out[i] += s.token_loss[k].item<double>();
  }
  return out;
}

/// Copies of all parameter gradients by name (zeros where undefined).
inline std::map<std::string, torch::Tensor> grads_of(torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : module.named_parameters()) {
    const auto& g = item.value().grad();
    out[item.key()] = g.defined() ? g.detach().clone() : torch::zeros_like(item.value());
  }
  return out;
}

/// max |a - b| / (max |b| + 1e-12).
inline double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / (b.abs().max().item<double>() + 1e-12);
}

}  // namespace omnibal::models::testing
