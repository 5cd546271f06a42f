#include "balance/step_plan.h"

#include <catch2/catch.hpp>

#include "balance/balance_metrics.h"
#include "balance/data_planner.h"
#include "test_tables.h"

using namespace omnibal::balance;
using omnibal::balance::testing::spearman;
using omnibal::balance::testing::synthetic_table;

namespace {

// Packs with random loads: tiles 10..20, tokens 3000..7000 (one sample each, ids = pack ids).
PackList random_packs(size_t n, uint64_t seed) {
  SampleTable t;
  t.add_dataset({"d", "p", 0, 0, 1.0});
  omnibal::Rng rng(seed);
  for (uint32_t i = 0; i < n; ++i)
    t.add(0, i,
          Load{{10 + static_cast<int32_t>(rng.below(11)),
                3000 + static_cast<int32_t>(rng.below(4001))}},
          1);
  PackList packs;
  for (uint32_t i = 0; i < n; ++i) packs.push(&i, 1, t);
  return packs;
}

// A pack time model shaped like the analytic 6B+20B one on A100 (pack_time_fit_test.cpp):
// seconds per tile, per token and per squared member length.
PackTimeModel vlm_time() {
  PackTimeModel t;
  t.per_tile_s = 0.185;
  t.per_token_s = 5.5e-4;
  t.per_token_sq_s = 1.4e-8;
  return t;
}

void require_each_pack_once(const StepPlan& plan, size_t packs) {
  std::vector<int> seen(packs, 0);
  for (uint32_t p : plan.slots) ++seen.at(p);
  for (uint32_t p : plan.carried) ++seen.at(p);
  for (size_t p = 0; p < packs; ++p) REQUIRE(seen[p] == 1);
}

}  // namespace

TEST_CASE("placement: every pack once, tail carried and counted", "[balance][placement]") {
  const int dp = GENERATE(1, 3, 8);
  const int m = GENERATE(1, 2, 5);
  const size_t n = GENERATE(0, 5, 97, 1000);
  const PackList packs = random_packs(n, n + dp * 31 + m);
  const PackTimeModel time = vlm_time();
  for (const StepPlan& plan : {place_load_grouped(packs, dp, m, 7), place_in_order(n, dp, m),
                               place_load_grouped(packs, dp, m, 7, &time)}) {
    require_each_pack_once(plan, n);
    CHECK(plan.carried.size() == n % (static_cast<size_t>(dp) * m));
    CHECK(plan.steps() == n / (static_cast<size_t>(dp) * m));
  }
}

TEST_CASE("placement: step order is not correlated with step load", "[balance][placement]") {
  const uint64_t seed = GENERATE(1, 2, 3);
  const int dp = GENERATE(2, 4);
  const bool by_time = GENERATE(false, true);
  const int m = by_time ? 2 : 1;                     // by time with m > 1, so rows are balanced too
  const PackList packs = random_packs(20000, seed);  // >= 2500 steps: |rho| <= 0.05 is > 2.5 sigma
  const PackTimeModel time = vlm_time();
  const StepPlan plan = place_load_grouped(packs, dp, m, seed, by_time ? &time : nullptr);
  std::vector<double> position, load, seconds;
  for (size_t s = 0; s < plan.steps(); ++s) {
    double tokens = 0, t = 0;
    for (int r = 0; r < dp; ++r) {
      for (int k = 0; k < m; ++k) {
        tokens += static_cast<double>(packs.cost(plan.pack(s, r, k), kTokens));
        t += time.pack_seconds(packs, plan.pack(s, r, k));
      }
    }
    position.push_back(static_cast<double>(s));
    load.push_back(tokens);
    seconds.push_back(t);
  }
  INFO("by time " << by_time);
  CHECK(std::abs(spearman(position, load)) <= 0.05);
  CHECK(std::abs(spearman(position, seconds)) <= 0.05);
  // Control: before the shuffle the steps were in load order, so the check can fail.
  std::vector<double> sorted = load;
  std::sort(sorted.begin(), sorted.end());
  CHECK(spearman(position, sorted) > 0.99);
}

TEST_CASE("placement: grouping by load beats random placement on Dist Ratio",
          "[balance][placement]") {
  const SampleTable t = synthetic_table(20000, 5);
  PlannerOptions o;
  o.dp = 8;
  o.budgets = {20, 6144, 6016};
  const MethodResult grouped = plan_method(t, Method::kIsf, o);
  const MethodResult random = plan_method(t, Method::kIsfRandomPlacement, o);  // the reference
  CHECK(grouped.packing.packs.members() == random.packing.packs.members());    // same packs
  CHECK(grouped.metrics.dist_ratio_llm < random.metrics.dist_ratio_llm / 5);
  CHECK(grouped.metrics.dist_ratio_vit <= random.metrics.dist_ratio_vit);
  CHECK(grouped.metrics.dist_ratio_llm < 0.005);
}

TEST_CASE("placement: with m > 1 the snake deal balances per-rank sums", "[balance][placement]") {
  // 4 packs of tokens 1, 2, 3, 4 on dp = 2, m = 2: snake gives ranks {1, 4} and {2, 3}.
  SampleTable t;
  t.add_dataset({"d", "p", 0, 0, 1.0});
  PackList packs;
  for (uint32_t i = 0; i < 4; ++i) {
    t.add(0, i, Load{{1, static_cast<int32_t>(i + 1)}}, 1);
    packs.push(&i, 1, t);
  }
  const StepPlan plan = place_load_grouped(packs, 2, 2, 3);
  REQUIRE(plan.steps() == 1);
  for (int r = 0; r < 2; ++r)
    CHECK(packs.cost(plan.pack(0, r, 0), kTokens) + packs.cost(plan.pack(0, r, 1), kTokens) == 5);
}

TEST_CASE("placement: deterministic for a seed", "[balance][placement]") {
  const PackList packs = random_packs(3000, 9);
  CHECK(place_load_grouped(packs, 8, 2, 4).slots == place_load_grouped(packs, 8, 2, 4).slots);
  CHECK(place_load_grouped(packs, 8, 2, 4).slots != place_load_grouped(packs, 8, 2, 5).slots);
}

TEST_CASE("placement: multi-source steps hold one source", "[balance][placement]") {
  const PackList packs = random_packs(1000, 2);
  std::vector<uint32_t> source(1000);
  for (uint32_t p = 0; p < 1000; ++p) source[p] = p % 3;
  const StepPlan plan = place_by_source(packs, source, 4, 2, 1);
  require_each_pack_once(plan, 1000);
  for (size_t s = 0; s < plan.steps(); ++s)
    for (int r = 0; r < 4; ++r)
      for (int k = 0; k < 2; ++k) REQUIRE(source[plan.pack(s, r, k)] == source[plan.pack(s, 0, 0)]);
  // Each source carries its own tail: 334 % 8 + 333 % 8 + 333 % 8.
  CHECK(plan.carried.size() == 6 + 5 + 5);
}

namespace {

// Packs of one dataset with the given members' token lengths, 4 tiles each.
struct MemberPacks {
  SampleTable table;
  PackList packs;
  explicit MemberPacks(const std::vector<std::vector<int32_t>>& members) {
    table.add_dataset({"d", "p", 0, 0, 1.0});
    uint32_t next = 0;
    for (const auto& pack : members) {
      std::vector<uint32_t> ids;
      for (int32_t tokens : pack) {
        table.add(0, next, Load{{static_cast<int32_t>(4 / pack.size()), tokens}}, 1);
        ids.push_back(next++);
      }
      packs.push(ids.data(), ids.size(), table);
    }
  }
};

}  // namespace

TEST_CASE("placement by time: equal counts, unequal attention, grouped by time",
          "[balance][placement]") {
  // Eight packs of 4 tiles and 1000 tokens: one member of 1000 (10^6 tokens^2) or two of 500
  // (5 * 10^5), alternating. By count the ties keep id order, so each step of dp 4 mixes both;
  // by time each step holds one kind.
  std::vector<std::vector<int32_t>> members;
  for (int i = 0; i < 8; ++i)
    members.push_back(i % 2 ? std::vector<int32_t>{500, 500} : std::vector<int32_t>{1000});
  const MemberPacks f(members);
  const PackTimeModel time = vlm_time();
  const StepPlan count = place_load_grouped(f.packs, 4, 1, 3);
  const StepPlan by_time = place_load_grouped(f.packs, 4, 1, 3, &time);
  const BalanceMetrics mc = compute_metrics(f.packs, count, {0, 0}, 0, &time);
  const BalanceMetrics mt = compute_metrics(f.packs, by_time, {0, 0}, 0, &time);
  CHECK(mc.dist_ratio_llm == 0.0);
  CHECK(mt.dist_ratio_llm == 0.0);
  CHECK(mc.cost_dist_ratio_dp > 0.0025);  // 2 x (1.304 - 1.297) / (4 x 1.304) = 0.0027
  CHECK(mt.cost_dist_ratio_dp == 0.0);
}

TEST_CASE("placement by time: refuses time-cut steps that raise a count Dist Ratio",
          "[balance][placement]") {
  // Times (s, 0.74 of them tiles): P0 {1000} 1.304, P1 {500, 500} 1.297, P2 {505, 505} 1.3026,
  // P3 {1010} 1.3098. Cut by time, the steps {P1, P2} {P0, P3} mix 1000 and 1010 tokens (LLM
  // Dist 0.005); cut by count, {P0, P1} {P2, P3} keep it at 0: placement by count is kept.
  const MemberPacks f({{1000}, {500, 500}, {505, 505}, {1010}});
  const PackTimeModel time = vlm_time();
  std::string note;
  const StepPlan plan = place_load_grouped(f.packs, 2, 1, 5, &time, &note);
  const BalanceMetrics m = compute_metrics(f.packs, plan, {0, 0}, 0, &time);
  CHECK(m.dist_ratio_llm == 0.0);
  CHECK(m.cost_dist_ratio_dp > 0);
  CHECK_THAT(note, Catch::StartsWith("time: steps as by count (Cost Dist 0.00270") &&
                       Catch::Contains("refused; time-cut steps: Cost Dist") &&
                       Catch::Contains("Dist ViT 0.00000 / LLM 0.00495 > 0.00000 / 0.00000"));
  std::string count_note;
  place_load_grouped(f.packs, 2, 1, 5, nullptr, &count_note);
  CHECK(count_note == "count: steps cut by (tiles, tokens)");
}

TEST_CASE("placement by time: count Dist no worse, Cost Dist no higher, same packs",
          "[balance][placement]") {
  const int dp = GENERATE(4, 8);
  const int m = GENERATE(1, 4);
  const SampleTable t = synthetic_table(20000, 11);
  PlannerOptions o;
  o.dp = dp;
  o.micro_batches = m;
  o.budgets = {20, 6144, 6016};
  o.time_model = vlm_time();
  const MethodResult count = plan_method(t, Method::kIsf, o);
  o.place_by = omnibal::PlaceBy::kTime;
  const MethodResult by_time = plan_method(t, Method::kIsf, o);
  INFO("dp " << dp << " m " << m << ": " << by_time.placement);
  REQUIRE(count.metrics.has_time);
  CHECK(by_time.packing.packs.members() == count.packing.packs.members());
  CHECK(by_time.metrics.dist_ratio_vit <= count.metrics.dist_ratio_vit);
  CHECK(by_time.metrics.dist_ratio_llm <= count.metrics.dist_ratio_llm);
  const auto worst = [](const BalanceMetrics& x) {
    return std::max(x.cost_dist_ratio_dp, x.cost_dist_ratio_mb);
  };
  CHECK(worst(by_time.metrics) <= worst(count.metrics));
  CHECK(by_time.plan.carried.size() == count.plan.carried.size());
  CHECK(place_load_grouped(count.packing.packs, dp, m, 4, &*o.time_model).slots ==
        place_load_grouped(count.packing.packs, dp, m, 4, &*o.time_model).slots);
}

TEST_CASE("placement by time needs a time model", "[balance][placement]") {
  PlannerOptions o;
  o.budgets = {20, 6144, 6016};
  o.place_by = omnibal::PlaceBy::kTime;
  CHECK_THROWS_WITH(plan_method(synthetic_table(500, 2), Method::kIsf, o),
                    Catch::Contains("balance.place_by: time needs a pack time model"));
  o.time_model = PackTimeModel{};  // all zero: cannot rank packs
  CHECK_THROWS_WITH(plan_method(synthetic_table(500, 2), Method::kIsf, o),
                    Catch::Contains("plan_method: the pack time model has no positive load"));
}
