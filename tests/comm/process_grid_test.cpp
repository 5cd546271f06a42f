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

TEST_CASE("process grid: hand-computed tp 2 x dp 2 x pp 2 layout (Megatron tp-dp-pp)",
          "[comm][grid]") {
  const ProcessGrid grid(GridShape{2, 2, 2}, 8);
  // rank = tp + 2 * (dp + 2 * pp): TP groups are consecutive pairs {0,1} {2,3} {4,5} {6,7}.
  CHECK(grid.coord(5) == GridCoord{0, 1, 1});  // {dp, pp, tp}
  CHECK(grid.coord(6) == GridCoord{1, 1, 0});
  CHECK(grid.tp_group(1, 0) == std::vector<int>{2, 3});
  CHECK(grid.tp_group(0, 1) == std::vector<int>{4, 5});
  CHECK(grid.dp_group(1, 1) == std::vector<int>{5, 7});
  CHECK(grid.pipeline_group(1, 0) == std::vector<int>{2, 6});
  CHECK(grid.next_stage_rank(3) == 7);
  CHECK(grid.describe(7) == "grid tp 2 x dp 2 x pp 2: rank 7 = tp 1, dp 1, stage 1 of 2");
}

TEST_CASE("process grid: TP groups partition the world over swept sizes", "[comm][grid]") {
  const int tp = GENERATE(1, 2, 4, 8);
  const int dp = GENERATE(1, 3);
  const int pp = GENERATE(1, 2, 5);
  const ProcessGrid grid(GridShape{dp, pp, tp}, tp * dp * pp);
  std::multiset<int> in_tp;
  for (int s = 0; s < pp; ++s)
    for (int d = 0; d < dp; ++d) {
      const auto group = grid.tp_group(d, s);
      REQUIRE(static_cast<int>(group.size()) == tp);
      for (int t = 0; t < tp; ++t) {
        CHECK(group[t] == group[0] + t);  // innermost: consecutive ranks
        CHECK(grid.coord(group[t]) == GridCoord{d, s, t});
        in_tp.insert(group[t]);
      }
    }
  CHECK(static_cast<int>(in_tp.size()) == tp * dp * pp);
  CHECK(std::set<int>(in_tp.begin(), in_tp.end()).size() == in_tp.size());
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
                    Contains("parallel.tp * parallel.dp * parallel.pp = 1 * 2 * 3 = 6 but mpirun "
                             "started 4 ranks; launch with -np 6"));
  CHECK_THROWS_WITH(ProcessGrid(GridShape{1, 2, 2}, 8),
                    Contains("= 2 * 1 * 2 = 4 but mpirun started 8 ranks"));
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
