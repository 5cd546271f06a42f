// ProcessGrid without MPI: rank <-> coordinate bijection, pipeline neighbours and DP groups over
// swept sizes, and the start-up errors (Megatron's rank generator is tested the same way).
#include "comm/process_grid.h"

#include "core/config.h"
#include "core/error.h"

#include <catch2/catch.hpp>

#include <set>

using Catch::Matchers::Contains;
using omnibal::comm::GridCoord;
using omnibal::comm::GridShape;
using omnibal::comm::ProcessGrid;

TEST_CASE("process grid: hand-computed dp 2 x pp 3 layout", "[comm][grid]") {
  const ProcessGrid grid(GridShape{2, 3, 1}, 6);
  // rank = dp + 2 * pp: stage 0 = ranks {0, 1}, stage 1 = {2, 3}, stage 2 = {4, 5}.
  CHECK(grid.coord(0) == GridCoord{0, 0, 0});
  CHECK(grid.coord(1) == GridCoord{1, 0, 0});
  CHECK(grid.coord(4) == GridCoord{0, 2, 0});
  CHECK(grid.coord(5) == GridCoord{1, 2, 0});
  CHECK(grid.pipeline_group(1) == std::vector<int>{1, 3, 5});
  CHECK(grid.dp_group(1) == std::vector<int>{2, 3});
  CHECK(grid.next_stage_rank(1) == 3);
  CHECK(grid.prev_stage_rank(3) == 1);
  CHECK_FALSE(grid.prev_stage_rank(0).has_value());
  CHECK_FALSE(grid.next_stage_rank(5).has_value());
  CHECK(grid.is_first_stage(1));
  CHECK(grid.is_last_stage(4));
  CHECK_FALSE(grid.is_last_stage(3));
  CHECK(grid.describe(3) == "grid dp 2 x pp 3 (tp 1): rank 3 = dp 1, stage 1 of 3");
}

TEST_CASE("process grid: invariants over swept sizes", "[comm][grid]") {
  const int dp = GENERATE(1, 2, 3, 8, 64);
  const int pp = GENERATE(1, 2, 5, 16);
  const ProcessGrid grid(GridShape{dp, pp, 1}, dp * pp);
  std::set<int> seen;
  for (int r = 0; r < dp * pp; ++r) {
    const GridCoord c = grid.coord(r);
    REQUIRE(grid.rank(c) == r);  // bijection
    seen.insert(r);
    // Neighbours stay in the same replica and differ by one stage.
    if (auto next = grid.next_stage_rank(r)) {
      CHECK(grid.coord(*next).dp == c.dp);
      CHECK(grid.coord(*next).pp == c.pp + 1);
      CHECK(grid.prev_stage_rank(*next) == r);
    } else {
      CHECK(c.pp == pp - 1);
    }
    // r is in exactly the DP group of its stage and the pipeline of its replica.
    CHECK(grid.dp_group(c.pp)[c.dp] == r);
    CHECK(grid.pipeline_group(c.dp)[c.pp] == r);
  }
  CHECK(static_cast<int>(seen.size()) == dp * pp);
  // DP groups partition the world; so do pipelines.
  std::multiset<int> in_dp, in_pp;
  for (int s = 0; s < pp; ++s)
    for (int r : grid.dp_group(s)) in_dp.insert(r);
  for (int d = 0; d < dp; ++d)
    for (int r : grid.pipeline_group(d)) in_pp.insert(r);
  CHECK(in_dp == std::multiset<int>(seen.begin(), seen.end()));
  CHECK(in_pp == std::multiset<int>(seen.begin(), seen.end()));
}

TEST_CASE("process grid: size errors name the keys", "[comm][grid]") {
  CHECK_THROWS_WITH(ProcessGrid(GridShape{2, 3, 1}, 4),
                    Contains("parallel.dp * parallel.pp = 2 * 3 = 6 but mpirun started 4 ranks"));
  CHECK_THROWS_WITH(ProcessGrid(GridShape{1, 2, 2}, 4),
                    Contains("parallel.tp = 2: tensor parallelism is not supported yet"));
  CHECK_THROWS_WITH(ProcessGrid(GridShape{0, 2, 1}, 0),
                    Contains("parallel.dp: expected >= 1, got 0"));
  CHECK_THROWS_WITH(ProcessGrid(GridShape{1, -1, 1}, 1), Contains("parallel.pp: expected >= 1"));
  const ProcessGrid grid(GridShape{2, 2, 1}, 4);
  CHECK_THROWS_WITH(grid.coord(4), Contains("rank 4 outside the grid of 4 ranks"));
  CHECK_THROWS_WITH(grid.rank(GridCoord{0, 2, 0}), Contains("stage 2 outside [0, 2)"));
}

TEST_CASE("process grid: built from parallel config", "[comm][grid]") {
  omnibal::ParallelConfig parallel;
  parallel.dp = 2;
  parallel.pp = 2;
  const ProcessGrid grid = omnibal::comm::make_process_grid(parallel, 4);
  CHECK(grid.shape().dp == 2);
  CHECK(grid.coord(3) == GridCoord{1, 1, 0});
  CHECK_THROWS_WITH(omnibal::comm::make_process_grid(parallel, 2),
                    Contains("= 4 but mpirun started 2 ranks"));
}
