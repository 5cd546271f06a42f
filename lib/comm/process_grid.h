// The process grid of a DP x PP (x TP) job: which rank holds which data-parallel replica and
// pipeline stage, who its pipeline neighbours are, and which ranks form the DP group of a stage.
// Pure logic on integers (no MPI, no LibTorch), tested over swept sizes like Megatron's rank
// generator; parallel_comms.h turns the groups into MPI sub-communicators.
//
// Rank order (Megatron's default "tp-dp-pp"): tp varies fastest, then dp, then pp, so
//   rank = tp + TP * (dp + DP * pp).
// A TP group (ranks that share one stage of one replica) is tp consecutive ranks, so it sits
// inside a node whenever tp divides the GPUs per node.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace omnibal {
struct ParallelConfig;
}

namespace omnibal::comm {

/// Sizes of the parallel axes. world() = dp * pp * tp.
struct GridShape {
  int dp = 1;  ///< data-parallel replicas
  int pp = 1;  ///< pipeline stages
  int tp = 1;  ///< tensor-parallel ranks
  int world() const { return dp * pp * tp; }
};

/// Coordinates of one rank on the grid (all 0-based).
struct GridCoord {
  int dp = 0;  ///< data-parallel index (which replica of the model)
  int pp = 0;  ///< pipeline stage s of P
  int tp = 0;  ///< tensor-parallel index
  bool operator==(const GridCoord& o) const { return dp == o.dp && pp == o.pp && tp == o.tp; }
};

/// Rank <-> coordinate mapping and the groups derived from it. Immutable after construction.
class ProcessGrid {
 public:
  /// Validates the shape against the number of ranks mpirun started.
  /// Throws omnibal::Error when a size is < 1 or when tp * dp * pp != world_size
  /// ("parallel.tp * parallel.dp * parallel.pp = 2 * 1 * 3 = 6 but mpirun started 4 ranks").
  ProcessGrid(GridShape shape, int world_size);

  const GridShape& shape() const { return shape_; }
  int world_size() const { return shape_.world(); }

  /// Coordinates of `rank` in [0, world_size). Throws omnibal::Error when out of range.
  GridCoord coord(int rank) const;
  /// The rank at `c`. Throws omnibal::Error when a coordinate is out of range.
  int rank(GridCoord c) const;

  bool is_first_stage(int rank) const { return coord(rank).pp == 0; }
  bool is_last_stage(int rank) const { return coord(rank).pp == shape_.pp - 1; }
  /// The rank holding stage s-1 of the same pipeline (same dp, tp); nullopt on the first stage.
  std::optional<int> prev_stage_rank(int rank) const;
  /// The rank holding stage s+1 of the same pipeline; nullopt on the last stage.
  std::optional<int> next_stage_rank(int rank) const;

  /// The DP group of pipeline stage `stage` (tp index `tp`): its ranks ordered by dp index.
  /// Gradients of the stage's parameters are all-reduced over this group.
  std::vector<int> dp_group(int stage, int tp = 0) const;
  /// The pipeline of replica `dp`: its ranks ordered by stage (activations flow along it).
  std::vector<int> pipeline_group(int dp, int tp = 0) const;

  /// The TP group of replica `dp`, stage `stage`: tp consecutive ranks ordered by tp index.
  std::vector<int> tp_group(int dp, int stage) const;

  /// "dp 2 x pp 2 (tp 1): rank 3 = dp 1, stage 1" style summary for start-up logs.
  std::string describe(int rank) const;

 private:
  GridShape shape_;
};

/// Builds the grid from the `parallel.*` config keys; errors name the keys.
ProcessGrid make_process_grid(const ParallelConfig& parallel, int world_size);

}  // namespace omnibal::comm
