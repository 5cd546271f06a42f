// Contiguous splits of the pipeline-unit chain into stages, and the three ways to build one
// from per-unit weights: uniform by unit count (DeepSpeed `uniform`), the exact split minimising
// the heaviest stage (dynamic programming; with parameter counts as weights this is DeepSpeed's
// `parameters` method, with profiled times it is the exact anchor of BMP), and the paper's
// greedy anchor (docs/paper.md). Candidate generation and scoring are partition_search.h.
#pragma once

#include <string>
#include <vector>

namespace omnibal::partition {

/// A contiguous split of N units into P non-empty stages: sizes[s] units in stage s, in chain
/// order (the format of `parallel.partition: {manual: [...]}`).
struct Partition {
  std::vector<int> sizes;

  int stages() const { return static_cast<int>(sizes.size()); }
  int units() const;
  /// First unit of stage s.
  int begin(int stage) const;
  /// One past the last unit of stage s.
  int end(int stage) const;
  /// Stage holding `unit`.
  int stage_of(int unit) const;
  /// First unit of stages 1..P-1 (P-1 cut positions, strictly increasing).
  std::vector<int> boundaries() const;
  /// Builds a partition from cut positions; throws omnibal::Error naming the bad cut when a
  /// stage would be empty or a cut lies outside (0, units).
  static Partition from_boundaries(const std::vector<int>& cuts, int units);
  /// "[6, 12, 12, ...]".
  std::string to_string() const;
  bool operator==(const Partition& o) const { return sizes == o.sizes; }
};

/// `units` units in `stages` stages of equal count; the first units % stages stages get one
/// more. Throws omnibal::Error when stages < 1 or stages > units.
Partition uniform_partition(int units, int stages);

/// The split minimising the largest stage sum of `weights` (exact, O(P N^2) dynamic program;
/// ties go to the split whose earlier stages are larger). Throws when P < 1 or P > N.
Partition min_max_partition(const std::vector<double>& weights, int stages);

/// The paper's greedy anchor: with S the total weight, cut k (k = 1..P-1) goes at the unit
/// boundary where the running sum first reaches k S / P, on whichever side of that unit lands
/// closer to k S / P, kept strictly increasing so that no stage is empty.
Partition greedy_anchor_partition(const std::vector<double>& weights, int stages);

/// Per-stage sums of `weights` under `partition`. Throws when the sizes do not cover weights.
std::vector<double> stage_sums(const Partition& partition, const std::vector<double>& weights);

}  // namespace omnibal::partition
