// Baseline packers that OmniBal is compared against (docs/paper.md), with the same PackList output
// so the same metrics apply:
//  - random micro-batches: a shuffled epoch cut into padded micro-batches of B samples (the
//    plain per-device batch size);
//  - LLaVA length-grouped: megabatches of dp * B random samples sorted by length (tokens),
//    split greedily into dp chunks of B by always feeding the shortest chunk
//    (get_length_grouped_indices / split_to_even_chunks);
//  - best-fit decreasing packing on tokens only (Megatron / XTuner style LLM packing): samples
//    sorted by tokens, each put into the fullest pack it still fits; tiles are ignored, which is
//    exactly the ViT imbalance it leaves.
// Each returns packs ordered so that place_in_order() gives the method's own placement. The
// OmniBal packer is isf_packer.h.
// Token cap: the trainer concatenates every pack into one sequence, which must fit the model's
// llm.max_seq_len. Given a cap (max_tokens > 0), the fixed-size baselines close a pack before a
// sample would take its summed tokens over it (so a pack may hold fewer than `batch` samples),
// and a sample over the cap by itself follows `on_bad_sample` (error naming it, or skipped and
// counted). Best-fit takes the cap as (an upper bound of) its budget q_tok.
#pragma once

#include <cstdint>

#include "balance/pack_list.h"
#include "balance/sample_table.h"

namespace omnibal::balance {

/// Random micro-batches of `batch` samples (padded layout) in shuffled order; the last
/// micro-batch, and any closed early by the token cap `max_tokens` (0: none), may be smaller.
/// Every sample lands in exactly one pack or in PackResult::skipped. Throws omnibal::Error on
/// batch < 1, or naming the sample when one is over the cap and on_bad_sample is kError.
PackResult random_micro_batches(const SampleTable& table, int batch, uint64_t seed,
                                int64_t max_tokens = 0,
                                OnBadSample on_bad_sample = OnBadSample::kError);

/// LLaVA length-grouped micro-batches (padded layout). Pack order is (step, rank, micro), so
/// place_in_order(dp, m) reproduces the sampler: micro-batch k of every rank in a step comes
/// from one megabatch of dp * batch samples. Samples left after the last full step (fewer than
/// dp * m * batch) form trailing packs of `batch` in megabatch order. A chunk over the token
/// cap `max_tokens` (0: none) is split into consecutive packs within it, which shifts the
/// (step, rank, micro) alignment of the packs after it; over-cap samples as above.
PackResult length_grouped_micro_batches(const SampleTable& table, int batch, int dp, int m,
                                        uint64_t seed, int64_t max_tokens = 0,
                                        OnBadSample on_bad_sample = OnBadSample::kError);

/// Best-fit decreasing packing on tokens under `q_tok` (concatenated layout), packs emitted in
/// shuffled order (seed). Samples over q_tok follow `on_bad_sample`.
PackResult best_fit_packing(const SampleTable& table, int64_t q_tok, OnBadSample on_bad_sample,
                            uint64_t seed);

}  // namespace omnibal::balance
