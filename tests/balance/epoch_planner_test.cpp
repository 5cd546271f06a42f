#include "balance/epoch_planner.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "test_tables.h"

using namespace omnibal::balance;
using omnibal::balance::testing::synthetic_table;

namespace {

PlannerOptions options(int dp, int m, int samples_per_pack = 4) {
  PlannerOptions o;
  o.dp = dp;
  o.micro_batches = m;
  o.samples_per_pack = samples_per_pack;
  o.iterations = 10;
  return o;
}

/// The packs of one step, each as its sorted sample rows, sorted: independent of who runs them.
std::vector<std::vector<uint32_t>> step_packs(EpochPlanner& p, int64_t step) {
  std::vector<std::vector<uint32_t>> out;
  for (int r = 0; r < p.dp(); ++r)
    for (int k = 0; k < p.micro_batches(); ++k) {
      auto s = p.pack(step, r, k);
      std::sort(s.begin(), s.end());
      out.push_back(s);
    }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("a step's packs and the plan hash do not depend on how dp x m is split",
          "[balance][epoch_planner]") {
  const Method method = GENERATE(Method::kIsf, Method::kRandom);
  const SampleTable t = synthetic_table(1500, 7, 2);
  EpochPlanner a(t, method, options(1, 4)), b(t, method, options(2, 2)),
      c(t, method, options(4, 1));
  CHECK(a.plan_hash() == b.plan_hash());
  CHECK(a.plan_hash() == c.plan_hash());
  for (const int64_t step : {0, 5, 40}) {
    CHECK(step_packs(a, step) == step_packs(b, step));
    CHECK(step_packs(a, step) == step_packs(c, step));
  }
}

TEST_CASE("DP ranks take a step's slots in snake order", "[balance][epoch_planner]") {
  const SampleTable t = synthetic_table(800, 3);
  EpochPlanner p(t, Method::kIsf, options(2, 2));
  const MethodResult& r = p.epoch_plan(0);
  auto members = [&](uint32_t pack) {
    return std::vector<uint32_t>(r.packing.packs.begin(pack), r.packing.packs.end(pack));
  };
  const int64_t step = 3;
  // Slots of a step: micro 0 -> ranks 0, 1; micro 1 -> ranks 1, 0 (heavy and light alternate).
  CHECK(p.pack(step, 0, 0) == members(r.plan.pack(step, 0, 0)));
  CHECK(p.pack(step, 1, 0) == members(r.plan.pack(step, 0, 1)));
  CHECK(p.pack(step, 1, 1) == members(r.plan.pack(step, 0, 2)));
  CHECK(p.pack(step, 0, 1) == members(r.plan.pack(step, 0, 3)));
  CHECK_THROWS_WITH(p.pack(step, 2, 0), Catch::Contains("outside dp 2"));
}

TEST_CASE("epochs follow each other: every sample once per epoch, tail carried, new seed",
          "[balance][epoch_planner]") {
  const int m = GENERATE(1, 3);
  const SampleTable t = synthetic_table(997, 11);
  EpochPlanner p(t, Method::kIsf, options(2, m));
  const int64_t e0 = p.steps_in_epoch(0), e1 = p.steps_in_epoch(1);
  REQUIRE(e0 > 0);
  CHECK(p.position(e0 - 1).epoch == 0);
  CHECK(p.position(e0).epoch == 1);
  CHECK(p.position(e0).step_in_epoch == 0);
  CHECK(p.position(e0 + e1).epoch == 2);
  // Epoch 0's steps hold every sample once except its carried tail, which epoch 1 runs.
  std::vector<int> seen(t.size(), 0);
  for (int64_t g = 0; g < e0; ++g)
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < m; ++k)
        for (uint32_t s : p.pack(g, r, k)) ++seen[s];
  const MethodResult& r0 = p.epoch_plan(0);
  for (uint32_t pk : r0.plan.carried)
    for (const uint32_t* s = r0.packing.packs.begin(pk); s != r0.packing.packs.end(pk); ++s)
      ++seen[*s];
  for (size_t i = 0; i < t.size(); ++i) REQUIRE(seen[i] == 1);
  // Budgets are searched once; epoch 1 reuses them but shuffles with seed + 1.
  CHECK(p.epoch_plan(1).budgets.q_vit == r0.budgets.q_vit);
  CHECK(p.epoch_plan(1).budgets.q_tok == r0.budgets.q_tok);
  CHECK(step_packs(p, 0) != step_packs(p, e0));
  EpochPlanner again(t, Method::kIsf, options(2, m));
  CHECK(step_packs(again, e0 + 1) == step_packs(p, e0 + 1));
}

TEST_CASE("EpochPlanner rejects bad sizes and steps", "[balance][epoch_planner]") {
  const SampleTable t = synthetic_table(100, 1);
  CHECK_THROWS_WITH(EpochPlanner(t, Method::kRandom, options(0, 1)), Catch::Contains("dp and m"));
  EpochPlanner p(t, Method::kRandom, options(1, 2));
  CHECK_THROWS_WITH(p.position(-1), Catch::Contains("negative step"));
  EpochPlanner big(t, Method::kRandom, options(8, 8));  // 64 packs of 4 > 100 samples
  CHECK_THROWS_WITH(big.position(0), Catch::Contains("no full step"));
}

TEST_CASE("EpochPlanner refuses budgets over the token cap before planning",
          "[balance][epoch_planner][cap]") {
  const SampleTable t = omnibal::balance::testing::synthetic_table(100, 1);
  PlannerOptions o;
  o.budgets = {20, 2048, 1920};
  o.max_seq_len = 1024;
  o.max_seq_len_origin = "preset tiny";
  CHECK_THROWS_WITH(EpochPlanner(t, Method::kIsf, o),
                    Catch::Contains("balance.q_tok 2048 is over the model's llm.max_seq_len 1024"));
}

TEST_CASE("EpochPlanner refuses placement by time, naming the key", "[balance][epoch_planner]") {
  const SampleTable t = synthetic_table(100, 1);
  PlannerOptions o = options(2, 2);
  o.place_by = omnibal::PlaceBy::kTime;
  o.time_model = PackTimeModel{0, 0.1, 1e-4, 0, "test"};
  CHECK_THROWS_WITH(EpochPlanner(t, Method::kIsf, o),
                    Catch::Contains("balance.place_by: time is not supported by the trainer yet"));
}

TEST_CASE("the dealt plan and the predicted step times follow the run's dp x m grid",
          "[balance][epoch_planner]") {
  const SampleTable t = synthetic_table(900, 5);
  EpochPlanner p(t, Method::kIsf, options(2, 3));
  PackTimeModel time;
  time.per_tile_s = 0.5;
  time.per_token_s = 0.001;
  // Concatenated ISF packs, no attention term: a pack's seconds are its members' summed loads.
  auto seconds = [&](const std::vector<uint32_t>& rows) {
    double s = 0;
    for (uint32_t row : rows) s += 0.5 * t.load[row].tiles() + 0.001 * t.load[row].tokens();
    return s;
  };
  const StepPlan dealt = p.dealt_plan(0);
  const MethodResult& r = p.epoch_plan(0);
  CHECK(dealt.dp == 2);
  CHECK(dealt.micro_batches == 3);
  CHECK(dealt.steps() == r.plan.steps());
  CHECK(dealt.carried == r.plan.carried);
  double dp_sum = 0, mb_sum = 0;
  for (size_t step = 0; step < dealt.steps(); ++step) {
    const StepTime st = p.predicted_step(static_cast<int64_t>(step), time);
    REQUIRE(st.rank_s.size() == 2);
    for (int rank = 0; rank < 2; ++rank) {
      double want = 0;
      for (int k = 0; k < 3; ++k) {
        const auto rows = p.pack(static_cast<int64_t>(step), rank, k);
        const uint32_t id = dealt.pack(step, rank, k);
        CHECK(rows == std::vector<uint32_t>(r.packing.packs.begin(id), r.packing.packs.end(id)));
        want += seconds(rows);
      }
      CHECK(st.rank_s[rank] == Approx(want).epsilon(1e-12));
    }
    dp_sum += st.dist_dp;
    mb_sum += st.dist_mb;
  }
  // The epoch's Cost Dist Ratios are the mean of the per-step ones.
  const BalanceMetrics m = p.dealt_metrics(0, &time);
  const double steps = static_cast<double>(dealt.steps());
  CHECK(m.cost_dist_ratio_dp == Approx(dp_sum / steps).epsilon(1e-12));
  CHECK(m.cost_dist_ratio_mb == Approx(mb_sum / steps).epsilon(1e-12));
  CHECK(m.cost_dist_ratio_dp > 0);
  // Count Dist Ratios on the dealt grid; the planning plan (one rank of dp * m) has none.
  CHECK(r.metrics.dist_ratio_llm == 0.0);
  CHECK(m.dist_ratio_llm > 0);
}
