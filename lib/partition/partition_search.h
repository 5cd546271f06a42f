// Balanced model partitioning (BMP, OmniBal §3.2 / spec §2.2): around an anchor split, every
// stage boundary moves by up to r units; candidates with an empty stage or a stage over the
// memory budget are dropped; the rest are scored and the best K kept. The caller then confirms
// among the K (the simulator here, timed trials in the trainer later).
//
// Score (lower is better), in seconds of one micro-batch:
//   score = std over stages of the stage time  +  2 * sum over cuts of bytes / link bandwidth.
// Both terms are the time a micro-batch loses on the critical path: a stage slower than the mean
// by its deviation stretches every steady-state slot of 1F1B, and every cut adds its activation
// (forward) and gradient (backward) transfer to the pipeline's fill and drain. Converting the
// communication volume to seconds with the real link bandwidth avoids an arbitrary weight
// between variance and bytes; the paper names the two metrics (VAR, SUM(comm)) but not how they
// combine (spec §2.1).
#pragma once

#include <functional>
#include <vector>

#include "partition/stage_partition.h"

namespace omnibal::partition {

/// Inputs of the search, all per micro-batch at the reference (balanced-pack) load.
struct PartitionSearchInput {
  std::vector<double> unit_seconds;  ///< forward + backward (+ recompute) seconds of each unit
  std::vector<double> output_bytes;  ///< bytes a cut after unit u sends forward
  double link_bandwidth = 25e9;      ///< bytes/s between neighbouring stages
  int stages = 1;
  int radius = 1;                    ///< r
  int top_k = 3;                     ///< K
  /// Memory check; candidates returning false are dropped. Empty = everything fits.
  std::function<bool(const Partition&)> fits;
};

/// One scored candidate.
struct ScoredPartition {
  Partition partition;
  double max_stage_s = 0;  ///< heaviest stage, seconds
  double stage_std_s = 0;  ///< standard deviation of stage times, seconds
  double comm_bytes = 0;   ///< sum over cuts of forward bytes
  double score = 0;        ///< stage_std_s + 2 * comm_bytes / link_bandwidth
};

/// What the search saw and kept.
struct PartitionSearchResult {
  Partition exact_anchor;    ///< min-max split of unit_seconds
  Partition greedy_anchor;   ///< the paper's greedy anchor
  int generated = 0;         ///< candidates before filtering ((2r+1)^(P-1) per anchor)
  int non_empty = 0;         ///< distinct candidates without an empty stage
  int fitting = 0;           ///< of those, within the memory budget
  std::vector<ScoredPartition> top;  ///< best K by score, best first
};

/// Cut vectors of every combination of offsets in [-radius, radius] applied to `anchor`'s cuts,
/// including invalid ones ((2r+1)^(P-1) vectors, anchor first).
std::vector<std::vector<int>> neighbourhood_cuts(const Partition& anchor, int radius);

/// Scores one partition with the formula above.
ScoredPartition score_partition(const Partition& partition, const PartitionSearchInput& input);

/// Runs the search around both anchors (exact and greedy; duplicates scored once). Throws
/// omnibal::Error when the inputs disagree in length, or when no candidate fits (the message
/// gives the smallest over-budget candidate's stages).
PartitionSearchResult search_partitions(const PartitionSearchInput& input);

}  // namespace omnibal::partition
