// Synthetic balanced packs for profiling (docs/paper.md#model-balance-bmp: BMP profiles
// under balanced micro-batches): one pack with exactly Q_v ViT tiles and Q_t LLM tokens, split
// over several samples with unequal, realistic lengths, as an ISF pack would hold them. Every
// sample has at least one image; its tokens are a short prompt, its image-context tokens
// (tiles x tokens_per_tile), then text of which the last third is labelled (the answer). Token
// ids and pixels are drawn from omnibal::Rng (values do not affect cost, shapes do).
// Not here: packs from real data (lib/data) or the ISF packer (lib/balance).
#pragma once

#include <cstdint>
#include <vector>

#include "core/model_preset.h"
#include "models/pack_batch.h"

namespace omnibal::profile {

/// The load of a profiling pack.
struct ProfilingPackOptions {
  int64_t q_vit = 0;            ///< ViT tiles of the pack (Q_v), >= samples
  int64_t q_tok = 0;            ///< LLM tokens of the pack (Q_t), image tokens included
  int samples = 4;              ///< samples in the pack (balance.samples_per_pack)
  uint64_t seed = 0;            ///< Rng seed of lengths, ids and pixels
  int64_t img_context_id = -1;  ///< <IMG_CONTEXT> id; -1: vocab_size - 1
};

/// Per-sample lengths of a profiling pack.
struct ProfilingPackLayout {
  std::vector<int> tiles;  ///< ViT tiles of each sample (>= 1), summing to q_vit
  std::vector<int> text;   ///< text tokens of each sample (>= 4); image tokens come on top
};

/// Splits the pack's tiles and text tokens over the samples: random shares in [0.5, 1.5) of the
/// mean, rounded so the sums are exact. Throws omnibal::Error naming the option when
/// q_vit < samples, q_tok < q_vit * tokens_per_tile + 4 * samples or q_tok > llm.max_seq_len.
ProfilingPackLayout profiling_pack_layout(const ModelPreset& preset,
                                          const ProfilingPackOptions& options);

/// Sum over the layout's samples of the squared LLM sequence length (text + tiles x
/// tokens_per_tile tokens each, as make_profiling_pack() lays them out): the load of the
/// per-sample (varlen) attention, recorded as a cost table's load.token_sq_sum.
double profiling_pack_token_sq_sum(const ModelPreset& preset, const ProfilingPackLayout& layout);

/// The pack of profiling_pack_layout(): pixels [q_vit, 3, tile, tile], q_tok tokens.
models::PackBatch make_profiling_pack(const ModelPreset& preset,
                                      const ProfilingPackOptions& options);

/// The <IMG_CONTEXT> id used for `options` (vocab_size - 1 unless set).
int64_t profiling_img_context_id(const ModelPreset& preset, const ProfilingPackOptions& options);

}  // namespace omnibal::profile
