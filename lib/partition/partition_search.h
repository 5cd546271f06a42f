// Balanced model partitioning (BMP, OmniBal §3.2, docs/paper.md): around an anchor split, every
// stage boundary moves by up to r units; candidates with an empty stage or a stage over the
// memory budget are dropped; the rest are scored and the best K kept. The caller then confirms
// among the K (the simulator here, timed trials in the trainer later).
//
// Ranking (lower is better). The paper names two metrics, VAR(stage time) and SUM(comm), but
// not how they combine (unpublished). Both are proxies for one quantity, the pipeline's step time,
// so we combine them in seconds:
//   score      = std over stages of the stage time + 2 * sum over cuts of bytes / bandwidth
//                (a stage slower than the mean stretches every 1F1B slot; each cut adds its
//                activation and gradient transfer to fill and drain);
//   pipeline_s = the 1F1B step time of m identical profile micro-batches, walked on the same
//                instruction lists as the simulator with those stage times and transfers,
//                plus any host cost per micro-batch and rank (rank_micro_batch_s).
// Candidates are ranked by pipeline_s (the default, RankBy::kPipelineTime), ties by score;
// RankBy::kVarianceTraffic ranks by score alone. pipeline_s also sees what the variance cannot:
// under 1F1B a heavy stage costs less early in the pipeline than late (the first stage runs its
// warm-up forwards while later stages are idle anyway), so of two equally balanced splits the
// front-loaded one is faster. The min-max anchors cannot see that either, so a third anchor is
// refined by steepest descent on pipeline_s (moves: one cut by +-1 or +-2 units, or every cut
// from k on by +-1; applied while pipeline_s drops and the split fits), started from the exact
// anchor, the greedy anchor and the uniform split, keeping the fastest end point; candidates
// are drawn around all three anchors.
// Schedules (schedule/schedules.h): the search splits the chain into P x v chunks (v chunks per
// rank under interleaved 1F1B, 2 under ZB-V, else 1; chunk k on rank
// schedule::stage_of_virtual(k, P, chunk_layout(schedule)): k % P, or the V of ZB-V) and
// pipeline_s walks the lists of the input's schedule, ZB-H1 and ZB-V with each chunk's backward
// split into B and W (unit_weight_s; ZB-V's lists built for the candidate's own costs), so every
// candidate is ranked under its own schedule. Where the full neighbourhood
// (2r+1)^(P v - 1) exceeds kMaxNeighbourhood (e.g. 3^15 for P 8, v 2), candidates are the
// anchor with every single cut and every pair of cuts moved by up to r instead.
#pragma once

#include <functional>
#include <vector>

#include "core/choices.h"
#include "partition/stage_partition.h"

namespace omnibal::partition {

/// Inputs of the search, all per micro-batch at the reference (balanced-pack) load.
struct PartitionSearchInput {
  std::vector<double> unit_seconds;  ///< forward + backward (+ recompute) seconds of each unit
  std::vector<double> output_bytes;  ///< bytes a cut after unit u sends forward
  double link_bandwidth = 25e9;      ///< bytes/s between neighbouring stages
  int stages = 1;                    ///< P pipeline ranks (the split has chunks() parts)
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  ///< not kAuto
  int virtual_stages = 1;  ///< v chunks per rank under kInterleaved (>= 2), else 1
  int radius = 1;          ///< r
  int top_k = 3;           ///< K
  int micro_batches = 1;   ///< m, for pipeline_s
  /// Per pipeline rank (empty, or `stages` entries): host seconds per micro-batch outside the
  /// unit costs (e.g. a CPU rank's loader building packs on the rank's core), added to the
  /// rank's Forward of every micro-batch in pipeline_s (split evenly over its chunks, like the
  /// simulator's StageOverheads::per_micro_batch_s). Not in score or the min-max anchors.
  std::vector<double> rank_micro_batch_s;
  /// Forward share of unit_seconds per unit (the rest is backward); empty = one third.
  std::vector<double> unit_forward_s;
  /// ZB-H1's and ZB-V's deferred W share of unit_seconds per unit (weight gradients); empty =
  /// kWeightShareEstimate of the backward share; 0 for a W that runs inside its B (a recomputed
  /// block under ZB-V, memory::search_input). Unused by the other schedules.
  std::vector<double> unit_weight_s;
  enum class RankBy { kPipelineTime, kVarianceTraffic } rank_by = RankBy::kPipelineTime;
  /// Memory check; candidates returning false are dropped. Empty = everything fits.
  std::function<bool(const Partition&)> fits;

  /// Parts of a split: P x chunks per rank.
  int chunks() const;
};

/// Most candidates drawn around one anchor before the search falls back to single and pair cut
/// moves (see the file comment).
inline constexpr long kMaxNeighbourhood = 100000;

/// One scored candidate.
struct ScoredPartition {
  Partition partition;
  double max_stage_s = 0;  ///< heaviest stage, seconds
  double stage_std_s = 0;  ///< standard deviation of stage times, seconds
  double comm_bytes = 0;   ///< sum over cuts of forward bytes
  double score = 0;        ///< stage_std_s + 2 * comm_bytes / link_bandwidth
  double pipeline_s = 0;   ///< step time of m identical profile micro-batches (its schedule)
};

/// What the search saw and kept.
struct PartitionSearchResult {
  Partition exact_anchor;            ///< min-max split of unit_seconds
  Partition greedy_anchor;           ///< the paper's greedy anchor
  Partition refined_anchor;          ///< fastest descent end point on pipeline_s (see above)
  int generated = 0;                 ///< candidates before filtering ((2r+1)^(P-1) per anchor)
  int non_empty = 0;                 ///< distinct candidates without an empty stage
  int fitting = 0;                   ///< of those, within the memory budget
  std::vector<ScoredPartition> top;  ///< best K by score, best first
};

/// Cut vectors of every combination of offsets in [-radius, radius] applied to `anchor`'s cuts,
/// including invalid ones ((2r+1)^(P-1) vectors, anchor first). When that exceeds
/// `max_candidates`: the anchor, every cut moved alone and every pair of cuts moved together by
/// offsets in [-radius, radius] (duplicates and invalid ones included).
std::vector<std::vector<int>> neighbourhood_cuts(const Partition& anchor, int radius,
                                                 long max_candidates = kMaxNeighbourhood);

/// Step time of m identical micro-batches under input.schedule with the chunk times and
/// transfers of `partition` (input.chunks() parts; pipeline_s above), seconds. Throws
/// omnibal::Error when the split has another number of parts, rank_micro_batch_s is neither
/// empty nor one entry per rank (or holds a negative entry), or build_schedule refuses.
double pipeline_seconds(const Partition& partition, const PartitionSearchInput& input);

/// Scores one partition with the formulas above.
ScoredPartition score_partition(const Partition& partition, const PartitionSearchInput& input);

/// Steepest descent on pipeline_s from `start`: each round applies the move (above) that lowers
/// pipeline_s most among splits without empty stages that fit; stops when none does.
Partition refine_anchor(const Partition& start, const PartitionSearchInput& input);

/// Runs the search around the three anchors (duplicates scored once). Throws
/// omnibal::Error when the inputs disagree in length, when the model has fewer units than
/// chunks (P x v), or when no candidate fits (the message gives the smallest over-budget
/// candidate's stages).
PartitionSearchResult search_partitions(const PartitionSearchInput& input);

}  // namespace omnibal::partition
