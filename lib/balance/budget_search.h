// Budget search: the paper's offline search for the ISF budgets (Q_v, Q_t, Q'_t) (docs/paper.md).
//
// Goal: for a DP size and a samples-per-pack target s, the budgets that minimise
// Dist Ratio ViT + Dist Ratio LLM (Pad Ratio is 0 for packs) of the final, load-grouped plan,
// subject to the mean samples per pack lying in [s, s + 1] (which keeps the samples per step,
// hence the optimiser's effective batch, close to the old per-device batch of s).
//
// Candidates (ours; the reference walks a 1-D line): Q_v from max(max tiles, floor(s * mean
// tiles)) to ceil((s + 1) * mean tiles) + 1, and for each Q_v the token budgets
// Q_t = round_up_256(Q_v * tokens-per-tile * f), f in {0.9, 1.0, 1.1, 1.2, 1.3, 1.45, 1.6}, never
// below the longest sample; Q'_t = Q_t - 128 as in the reference. Given a token cap (the
// model's llm.max_seq_len: the trainer concatenates a pack into one sequence), every Q_t is
// clamped to it (duplicates dropped), so no candidate, hence no chosen budget, exceeds it; a
// sample longer than the cap is then over every budget and follows on_bad_sample in the final
// ISF run. Each candidate runs full-T
// ISF; candidates whose samples per pack fall outside the range stop there (no placement).
// On inputs larger than max_scored_samples, candidates are scored on a fixed uniform subsample
// of that size (Dist Ratios of a smaller plan are slightly higher, the ranking is what counts);
// the caller then runs ISF with the chosen budgets on every sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "balance/isf_packer.h"
#include "balance/sample_table.h"

namespace omnibal::balance {

/// What the search optimises for.
struct SearchOptions {
  int dp = 8;                ///< data-parallel ranks of the simulated plan
  int micro_batches = 1;     ///< m: packs per rank per step
  int samples_per_pack = 4;  ///< target s: mean samples per pack must lie in [s, s + 1]
  int iterations = 50;       ///< ISF rounds T per candidate
  uint64_t seed = 1024;      ///< ISF / placement / subsample seed
  size_t max_scored_samples = size_t{1} << 17;  ///< subsample size above which scoring samples
  int64_t max_pack_tokens = 0;  ///< cap on Q_t in tokens (the model's llm.max_seq_len); 0: none
  /// Threads scoring candidates (each candidate is independent and seeded alike, so the result
  /// does not depend on it); 0: the CPUs this process may run on.
  int threads = 0;
};

/// One scored candidate (a row of the printed table).
struct SearchCandidate {
  IsfBudgets budgets;
  int64_t packs = 0;
  double samples_per_pack = 0;
  bool in_range = false;  ///< samples per pack within [s, s + 1]; Dist Ratios only then
  double dist_ratio_vit = 0;
  double dist_ratio_llm = 0;
  double token_fill = 0;
};

/// The candidates in evaluation order and the winner.
struct SearchResult {
  std::vector<SearchCandidate> candidates;
  size_t best = 0;            ///< index of the chosen candidate
  bool found = false;         ///< false: no candidate in range; best is the closest in spp
  size_t scored_samples = 0;  ///< samples the candidates were scored on
  IsfBudgets budgets() const { return candidates.at(best).budgets; }
};

/// Searches the budgets for all samples of `table` (or for the samples in `ids`). Throws
/// omnibal::Error on an empty input or invalid options.
SearchResult search_budgets(const SampleTable& table, const SearchOptions& options);
SearchResult search_budgets(const SampleTable& table, const std::vector<uint32_t>& ids,
                            const SearchOptions& options);

/// The candidate grid the search evaluates for `ids` of `table` (exposed for tests); every
/// Q_t is at most `max_pack_tokens` when that is > 0. Throws omnibal::Error on empty `ids` or
/// samples_per_pack < 1.
std::vector<IsfBudgets> search_grid(const SampleTable& table, const std::vector<uint32_t>& ids,
                                    int samples_per_pack, int64_t max_pack_tokens = 0);

/// The candidate table as fixed-width text, the chosen row marked with '*'.
std::string format_search_table(const SearchResult& result);

}  // namespace omnibal::balance
