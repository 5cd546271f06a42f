// Real data: placement by predicted time on the three shared InternVL-1.2 length files (40,941
// samples) with the analytic pack time model of InternVL-Chat-1.5 6B+20B on A100-80G. Fails,
// never skips, when $OMNIBAL_SHARED_DATA does not hold them (docs/conventions.md). Its own
// executable: it needs lib/partition (the fit), which balance_test does not link.
#include <catch2/catch.hpp>

#include <algorithm>

#include "balance/data_planner.h"
#include "balance/length_reader.h"
#include "core/model_preset.h"
#include "core/paths.h"
#include "test_tables.h"
#include "partition/analytic_cost_model.h"
#include "partition/pack_time_fit.h"

using namespace omnibal::balance;
using omnibal::balance::testing::shared_table;

namespace {

PackTimeModel internvl_6b_20b_a100() {
  using namespace omnibal::partition;
  const AnalyticCostModel model(omnibal::load_model_preset("internvl-1.5-6b-20b"),
                                device_spec("a100-80g"));
  return fit_pack_time(model, pack_time_design(48, 16384), {}, "analytic").model;
}

}  // namespace

TEST_CASE("real data: placement by time, Cost Dist <= 0.002 and count Dist no worse",
          "[balance][real-data]") {
  // Measured, budgets searched at each point, by count -> by time:
  //              budgets  Cost Dist ranks     Cost Dist micro-batches  LLM Dist
  //   DP 8 m 1   20/5888  0.00139 -> 0.00095  0 -> 0                   0.00012 -> 0.00012
  //   DP 8 m 8   20/5888  0.00075 -> 0.00069  0.00179 -> 0.00176       0.00006 -> 0.00006
  //   DP 32 m 1  20/7680  0.00209 -> 0.00198  0 -> 0                   0.00091 -> 0.00091
  //   DP 32 m 8  20/6912  0.00111 -> 0.00005  0.00296 -> 0.00189       0.00007 -> 0.00005
  // ViT Dist is unchanged at every point (tiles stay the first sort key). DP 32 m 1 passes by
  // 1 %: a change to the search or the packer may need the placement to do better there.
  const int dp = GENERATE(8, 32);
  const int m = GENERATE(1, 8);
  const SampleTable t = shared_table();
  PlannerOptions o;
  o.dp = dp;
  o.micro_batches = m;
  o.samples_per_pack = 4;
  o.time_model = internvl_6b_20b_a100();
  const MethodResult count = plan_method(t, Method::kIsf, o);  // budgets searched
  o.budgets = count.budgets;
  o.place_by = omnibal::PlaceBy::kTime;
  const MethodResult by_time = plan_method(t, Method::kIsf, o);
  const BalanceMetrics& c = count.metrics;
  const BalanceMetrics& x = by_time.metrics;
  INFO("DP " << dp << " m " << m << ", budgets " << count.budgets.q_vit << "/"
             << count.budgets.q_tok << ": by count Cost Dist " << c.cost_dist_ratio_dp << " / "
             << c.cost_dist_ratio_mb << ", Dist " << c.dist_ratio_vit << " / " << c.dist_ratio_llm
             << "; by time " << x.cost_dist_ratio_dp << " / " << x.cost_dist_ratio_mb << ", Dist "
             << x.dist_ratio_vit << " / " << x.dist_ratio_llm << " (" << by_time.placement << ")");
  CHECK(by_time.packing.packs.members() == count.packing.packs.members());  // same packs
  CHECK(x.cost_dist_ratio_dp <= 0.002);
  CHECK(x.cost_dist_ratio_mb <= 0.002);
  CHECK(x.dist_ratio_vit <= c.dist_ratio_vit);
  CHECK(x.dist_ratio_llm <= c.dist_ratio_llm);
  CHECK(std::max(x.cost_dist_ratio_dp, x.cost_dist_ratio_mb) <=
        std::max(c.cost_dist_ratio_dp, c.cost_dist_ratio_mb));
  CHECK(x.samples == 40941);
}
