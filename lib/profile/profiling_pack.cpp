#include "profile/profiling_pack.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace omnibal::profile {
namespace {

/// Splits `total` into `parts` integers >= `minimum` with random shares in [0.5, 1.5).
std::vector<int> random_split(Rng& rng, int64_t total, int parts, int minimum) {
  std::vector<double> w(parts);
  for (auto& x : w) x = 0.5 + rng.uniform();
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  const int64_t spare = total - static_cast<int64_t>(minimum) * parts;
  std::vector<int> out(parts, minimum);
  int64_t given = 0;
  for (int i = 0; i < parts; ++i) {
    const auto extra = static_cast<int64_t>(spare * w[i] / sum);
    out[i] += static_cast<int>(extra);
    given += extra;
  }
  for (int64_t i = 0; given < spare; ++i, ++given) ++out[i % parts];  // rounding remainder
  return out;
}

}  // namespace

int64_t profiling_img_context_id(const ModelPreset& preset, const ProfilingPackOptions& o) {
  return o.img_context_id >= 0 ? o.img_context_id : preset.llm.vocab_size - 1;
}

ProfilingPackLayout profiling_pack_layout(const ModelPreset& preset,
                                          const ProfilingPackOptions& o) {
  OMNIBAL_CHECK(o.samples >= 1, "profiling pack: samples per pack must be >= 1, got ", o.samples);
  OMNIBAL_CHECK(o.q_vit >= o.samples, "profiling pack: q_vit = ", o.q_vit,
                " tiles cannot give each of the ", o.samples, " samples an image");
  const int64_t image_tokens = o.q_vit * preset.tokens_per_tile();
  OMNIBAL_CHECK(o.q_tok >= image_tokens + 4 * o.samples, "profiling pack: q_tok = ", o.q_tok,
                " is below the ", image_tokens, " image tokens of ", o.q_vit, " tiles (",
                preset.tokens_per_tile(), " per tile) plus 4 text tokens per sample");
  OMNIBAL_CHECK(o.q_tok <= preset.llm.max_seq_len, "profiling pack: q_tok = ", o.q_tok,
                " exceeds the preset's llm.max_seq_len ", preset.llm.max_seq_len);
  Rng rng(o.seed);
  ProfilingPackLayout layout;
  layout.tiles = random_split(rng, o.q_vit, o.samples, 1);
  layout.text = random_split(rng, o.q_tok - image_tokens, o.samples, 4);
  return layout;
}

double profiling_pack_token_sq_sum(const ModelPreset& preset, const ProfilingPackLayout& layout) {
  double sum = 0;
  for (size_t s = 0; s < layout.tiles.size(); ++s) {
    const double len =
        layout.text[s] + static_cast<double>(layout.tiles[s]) * preset.tokens_per_tile();
    sum += len * len;
  }
  return sum;
}

models::PackBatch make_profiling_pack(const ModelPreset& preset, const ProfilingPackOptions& o) {
  const ProfilingPackLayout layout = profiling_pack_layout(preset, o);
  const int64_t img = profiling_img_context_id(preset, o);
  OMNIBAL_CHECK(img >= 0 && img < preset.llm.vocab_size, "profiling pack: img_context_id ", img,
                " is outside the vocabulary of ", preset.llm.vocab_size);
  Rng rng(o.seed ^ 0x5eedULL);
  const auto text_id = [&] {
    int64_t id = static_cast<int64_t>(rng.below(preset.llm.vocab_size - 1));
    return id >= img ? id + 1 : id;  // never the image-context id
  };
  std::vector<int64_t> ids, labels, positions, cu{0};
  for (size_t s = 0; s < layout.tiles.size(); ++s) {
    const int text = layout.text[s], prompt = text / 3, answer = text / 3;
    const int64_t len = text + static_cast<int64_t>(layout.tiles[s]) * preset.tokens_per_tile();
    for (int64_t i = 0; i < len; ++i) {
      const bool image = i >= prompt && i < len - (text - prompt);
      const int64_t id = image ? img : text_id();
      ids.push_back(id);
      labels.push_back(i >= len - answer ? id : -100);
      positions.push_back(i);
    }
    cu.push_back(cu.back() + len);
  }
  const int64_t side = preset.vit.tile_size;
  std::vector<float> px(static_cast<size_t>(o.q_vit * 3 * side * side));
  for (auto& v : px) v = static_cast<float>(2.0 * rng.uniform() - 1.0);
  models::PackBatch pack;
  pack.pixel_values = torch::tensor(px).reshape({o.q_vit, 3, side, side});
  pack.image_flags = torch::ones({o.q_vit}, torch::kInt64);
  pack.input_ids = torch::tensor(ids);
  pack.labels = torch::tensor(labels);
  pack.position_ids = torch::tensor(positions);
  pack.cu_seqlens = torch::tensor(cu);
  for (size_t s = 0; s < layout.tiles.size(); ++s)
    pack.sample_ids.push_back(static_cast<int64_t>(s));
  return pack;
}

}  // namespace omnibal::profile
