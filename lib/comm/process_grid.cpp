#include "comm/process_grid.h"

#include "core/config.h"
#include "core/error.h"

#include <fmt/format.h>

namespace omnibal::comm {

ProcessGrid::ProcessGrid(GridShape shape, int world_size) : shape_(shape) {
  OMNIBAL_CHECK(shape.dp >= 1, "parallel.dp: expected >= 1, got ", shape.dp);
  OMNIBAL_CHECK(shape.pp >= 1, "parallel.pp: expected >= 1, got ", shape.pp);
  OMNIBAL_CHECK(shape.tp >= 1, "parallel.tp: expected >= 1, got ", shape.tp);
  OMNIBAL_CHECK(world_size >= 1, "world size: expected >= 1 rank, got ", world_size);
  OMNIBAL_CHECK(shape.world() == world_size, "parallel.tp * parallel.dp * parallel.pp = ", shape.tp,
                " * ", shape.dp, " * ", shape.pp, " = ", shape.world(), " but mpirun started ",
                world_size, " ranks; launch with -np ", shape.world(),
                " or change parallel.tp/parallel.dp/parallel.pp");
}

GridCoord ProcessGrid::coord(int rank) const {
  OMNIBAL_CHECK(rank >= 0 && rank < world_size(), "rank ", rank, " outside the grid of ",
                world_size(), " ranks");
  GridCoord c;
  c.tp = rank % shape_.tp;
  c.dp = (rank / shape_.tp) % shape_.dp;
  c.pp = rank / (shape_.tp * shape_.dp);
  return c;
}

int ProcessGrid::rank(GridCoord c) const {
  OMNIBAL_CHECK(c.dp >= 0 && c.dp < shape_.dp, "dp index ", c.dp, " outside [0, ", shape_.dp, ")");
  OMNIBAL_CHECK(c.pp >= 0 && c.pp < shape_.pp, "stage ", c.pp, " outside [0, ", shape_.pp, ")");
  OMNIBAL_CHECK(c.tp >= 0 && c.tp < shape_.tp, "tp index ", c.tp, " outside [0, ", shape_.tp, ")");
  return c.tp + shape_.tp * (c.dp + shape_.dp * c.pp);
}

std::optional<int> ProcessGrid::prev_stage_rank(int r) const {
  GridCoord c = coord(r);
  if (c.pp == 0) return std::nullopt;
  --c.pp;
  return rank(c);
}

std::optional<int> ProcessGrid::next_stage_rank(int r) const {
  GridCoord c = coord(r);
  if (c.pp == shape_.pp - 1) return std::nullopt;
  ++c.pp;
  return rank(c);
}

std::vector<int> ProcessGrid::dp_group(int stage, int tp) const {
  std::vector<int> ranks;
  for (int d = 0; d < shape_.dp; ++d) ranks.push_back(rank({d, stage, tp}));
  return ranks;
}

std::vector<int> ProcessGrid::pipeline_group(int dp, int tp) const {
  std::vector<int> ranks;
  for (int s = 0; s < shape_.pp; ++s) ranks.push_back(rank({dp, s, tp}));
  return ranks;
}

std::vector<int> ProcessGrid::tp_group(int dp, int stage) const {
  std::vector<int> ranks;
  for (int t = 0; t < shape_.tp; ++t) ranks.push_back(rank({dp, stage, t}));
  return ranks;
}

std::string ProcessGrid::describe(int r) const {
  const GridCoord c = coord(r);
  if (shape_.tp == 1)
    return fmt::format("grid dp {} x pp {} (tp 1): rank {} = dp {}, stage {} of {}", shape_.dp,
                       shape_.pp, r, c.dp, c.pp, shape_.pp);
  return fmt::format("grid tp {} x dp {} x pp {}: rank {} = tp {}, dp {}, stage {} of {}",
                     shape_.tp, shape_.dp, shape_.pp, r, c.tp, c.dp, c.pp, shape_.pp);
}

ProcessGrid make_process_grid(const ParallelConfig& parallel, int world_size) {
  return ProcessGrid(GridShape{parallel.dp, parallel.pp, parallel.tp}, world_size);
}

}  // namespace omnibal::comm
