// IsfPacker: OmniBal's iterative sampling-and-filtering (ISF) packing (docs/paper.md).
//
// One grouping pass shuffles the pool (omnibal::Rng, Fisher–Yates) and walks it with a greedy
// next-fit: a sample joins the open pack unless a budget (Q_v tiles, Q_t tokens) would be
// exceeded, in which case the open pack is emitted and a new one starts with that sample.
// Filtering keeps the packs that are "full enough" — tiles equal to Q'_v (= Q_v) OR tokens at
// least Q'_t — and returns the members of the others to the pool, which is regrouped with the
// next round's seed; after T rounds the last round's packs are kept as they are.
// Differences from the reference code, all deliberate: no sample is lost (the open pack is
// always flushed after the walk), a sample over a budget follows OnBadSample (error naming the
// sample, or a counted skip) instead of vanishing, and the loop stops early once the pool is
// empty. Placement of packs on ranks is not done here (step_plan.h).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "balance/pack_list.h"
#include "balance/sample_table.h"

namespace omnibal::balance {

/// ISF budgets (docs/paper.md#isf-budgets). Q'_v is always Q_v, as in the reference code.
struct IsfBudgets {
  int64_t q_vit = 0;         ///< Q_v: most tiles in one pack
  int64_t q_tok = 0;         ///< Q_t: most LLM tokens in one pack
  int64_t q_tok_thresh = 0;  ///< Q'_t: a pack with at least this many tokens is accepted

  /// Per-dimension caps (Q_v, Q_t).
  std::array<int64_t, kLoadDims> caps() const { return {q_vit, q_tok}; }
  /// Per-dimension acceptance thresholds (Q'_v = Q_v, Q'_t).
  std::array<int64_t, kLoadDims> thresholds() const { return {q_vit, q_tok_thresh}; }
  /// Throws omnibal::Error unless 0 < Q_v, 0 < Q'_t <= Q_t.
  void validate() const;
};

/// Options of one ISF run.
struct IsfOptions {
  IsfBudgets budgets;
  int iterations = 50;   ///< T: grouping rounds (>= 1)
  uint64_t seed = 1024;  ///< round r shuffles with Rng(seed + r)
  OnBadSample on_bad_sample = OnBadSample::kError;
};

/// Packs samples with ISF. Stateless apart from its options; pack() may run concurrently.
class IsfPacker {
 public:
  explicit IsfPacker(IsfOptions options);

  /// Packs every sample of `table` (layout: concatenated). Every sample ends in exactly one
  /// pack or in PackResult::skipped; no pack exceeds a budget. Throws omnibal::Error naming the
  /// sample when one is over a budget and on_bad_sample is kError.
  PackResult pack(const SampleTable& table) const;
  /// Same, restricted to the sample ids in `ids` (pack members are ids of `table`).
  PackResult pack(const SampleTable& table, const std::vector<uint32_t>& ids) const;
  /// Same as pack(table, ids), always on the general path (any loads and budgets, one pack's
  /// running load at a time) instead of the packed one pack() takes when every load is at most
  /// 65535 and both budgets below 2^31; the results are identical (tests compare the two).
  PackResult pack_general(const SampleTable& table, const std::vector<uint32_t>& ids) const;

  const IsfOptions& options() const { return options_; }

 private:
  IsfOptions options_;
};

/// True when `load` exceeds a cap in any dimension (such a sample can never be packed).
bool over_budget(const Load& load, const std::array<int64_t, kLoadDims>& caps);

}  // namespace omnibal::balance
