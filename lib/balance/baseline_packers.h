// Baseline packers that OmniBal is compared against (spec §1.9), with the same PackList output
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
#pragma once

#include <cstdint>

#include "balance/pack_list.h"
#include "balance/sample_table.h"

namespace omnibal::balance {

/// Random micro-batches of `batch` samples (padded layout) in shuffled order; the last
/// micro-batch may be smaller. Every sample lands in exactly one pack.
PackResult random_micro_batches(const SampleTable& table, int batch, uint64_t seed);

/// LLaVA length-grouped micro-batches (padded layout). Pack order is (step, rank, micro), so
/// place_in_order(dp, m) reproduces the sampler: micro-batch k of every rank in a step comes
/// from one megabatch of dp * batch samples. Samples left after the last full step (fewer than
/// dp * m * batch) form trailing packs of `batch` in megabatch order.
PackResult length_grouped_micro_batches(const SampleTable& table, int batch, int dp, int m,
                                        uint64_t seed);

/// Best-fit decreasing packing on tokens under `q_tok` (concatenated layout), packs emitted in
/// shuffled order (seed). Samples over q_tok follow `on_bad_sample`.
PackResult best_fit_packing(const SampleTable& table, int64_t q_tok, OnBadSample on_bad_sample,
                            uint64_t seed);

}  // namespace omnibal::balance
