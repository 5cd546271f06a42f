#include "balance/data_planner.h"

#include <catch2/catch.hpp>

#include <algorithm>

#include "core/error.h"
#include "test_tables.h"

using namespace omnibal::balance;
using omnibal::balance::testing::synthetic_table;

TEST_CASE("every method places every sample exactly once", "[balance][planner]") {
  const Method method = GENERATE(Method::kIsf, Method::kIsfRandomPlacement, Method::kMultiSource,
                                 Method::kRandom, Method::kLengthGroup, Method::kBestFit);
  const int dp = GENERATE(1, 8);
  const int m = GENERATE(1, 3);
  const SampleTable t = synthetic_table(4000, 21, 3);
  PlannerOptions o;
  o.dp = dp;
  o.micro_batches = m;
  const MethodResult r = plan_method(t, method, o);  // budgets unset: searched where needed
  INFO(method_name(method));
  std::vector<int> seen(t.size(), 0);
  auto count = [&](uint32_t p) {
    for (const uint32_t* it = r.packing.packs.begin(p); it != r.packing.packs.end(p); ++it)
      ++seen[*it];
  };
  for (uint32_t p : r.plan.slots) count(p);
  for (uint32_t p : r.plan.carried) count(p);
  for (uint32_t id : r.packing.skipped) ++seen[id];
  for (size_t i = 0; i < t.size(); ++i) REQUIRE(seen[i] == 1);
  CHECK(r.metrics.samples + r.metrics.skipped == static_cast<int64_t>(t.size()));
  CHECK(r.plan.carried.size() <
        static_cast<size_t>(dp * m) * (method == Method::kMultiSource ? 3 : 1));
  if (method == Method::kMultiSource) CHECK(r.source_budgets.size() == 3);
}

TEST_CASE("every packer fills each pack's load from its members", "[balance][planner]") {
  // PackLoad (sums, longest member, count, sum of squared token lengths) must equal what the
  // members give: placement and the time model read only the loads.
  const Method method = GENERATE(Method::kIsf, Method::kMultiSource, Method::kRandom,
                                 Method::kLengthGroup, Method::kBestFit);
  const SampleTable t = synthetic_table(3000, 5, 3);
  PlannerOptions o;
  o.dp = 4;
  o.micro_batches = 2;
  const MethodResult first = plan_method(t, method, o);
  const PackList carry = carried_packs(first);
  o.seed += 1;
  const MethodResult r = plan_method(t, method, o, &carry);  // carried packs keep their loads
  INFO(method_name(method));
  for (const PackList* packs : {&r.packing.packs, &carry}) {
    for (size_t p = 0; p < packs->size(); ++p) {
      int64_t tiles = 0, tokens = 0, sq = 0;
      int32_t longest = 0;
      for (const uint32_t* it = packs->begin(p); it != packs->end(p); ++it) {
        const Load& l = t.load[*it];
        tiles += l.tiles();
        tokens += l.tokens();
        sq += static_cast<int64_t>(l.tokens()) * l.tokens();
        longest = std::max(longest, l.tokens());
      }
      const PackLoad& load = packs->load(p);
      REQUIRE(load.sum[kTiles] == tiles);
      REQUIRE(load.sum[kTokens] == tokens);
      REQUIRE(load.sum_sq_tokens == sq);
      REQUIRE(load.max_tokens == longest);
      REQUIRE(load.count == packs->end(p) - packs->begin(p));
      const int64_t n = load.count;
      REQUIRE(packs->token_sq_cost(p) ==
              (packs->layout() == PackLayout::kPadded ? n * longest * longest : sq));
    }
  }
}

TEST_CASE("methods parse by name and reject others", "[balance][planner]") {
  CHECK(parse_method("length-group", "--method") == Method::kLengthGroup);
  CHECK(std::string(method_name(Method::kBestFit)) == "best-fit");
  CHECK_THROWS_WITH(parse_method("sorted", "balance.method"),
                    Catch::Contains("balance.method: expected isf") && Catch::Contains("'sorted'"));
  CHECK(parse_on_bad_sample("skip", "data.on_bad_sample") == OnBadSample::kSkip);
  CHECK_THROWS_WITH(parse_on_bad_sample("drop", "data.on_bad_sample"),
                    Catch::Contains("data.on_bad_sample: expected error | skip"));
}

TEST_CASE("skipped counts include failed-statistics records", "[balance][planner]") {
  SampleTable t = synthetic_table(200, 3);
  t.datasets[0].failed_stats = 5;
  t.add(0, 999, Load{{40, 100}}, 40);  // over any searched... given budget Q_v = 20
  PlannerOptions o;
  o.budgets = {20, 6144, 6016};
  o.on_bad_sample = OnBadSample::kSkip;
  const MethodResult r = plan_method(t, Method::kIsf, o);
  CHECK(r.metrics.skipped == 6);
  o.on_bad_sample = OnBadSample::kError;
  CHECK_THROWS_WITH(plan_method(t, Method::kIsf, o),
                    Catch::Contains("sample 999 of dataset 'ds0'"));
}

TEST_CASE("planner options come from the config structs", "[balance][planner]") {
  omnibal::ParallelConfig parallel;
  parallel.dp = 8;
  parallel.micro_batches = 4;
  omnibal::BalanceConfig balance;
  balance.q_vit = 20;
  balance.q_tok = 6656;
  balance.seed = 9;
  omnibal::DataConfig data;
  data.on_bad_sample = OnBadSample::kSkip;
  const PlannerOptions o = planner_options(parallel, balance, data);
  CHECK(o.dp == 8);
  CHECK(o.micro_batches == 4);
  CHECK(o.budgets.q_tok_thresh == 6656 - 128);  // Q'_t = Q_t - 128 when unset
  CHECK(o.seed == 9);
  CHECK(o.on_bad_sample == OnBadSample::kSkip);
  CHECK(budgets_unset(planner_options(parallel, omnibal::BalanceConfig{}, data).budgets));
}

TEST_CASE("best-fit budget: (s + 0.5) * mean tokens rounded up to 256", "[balance][planner]") {
  SampleTable t;
  t.add_dataset({"d", "p", 0, 0, 1.0});
  t.add(0, 0, Load{{1, 1000}}, 1);
  t.add(0, 1, Load{{1, 1200}}, 1);
  CHECK(best_fit_budget(t, 4) == 5120);  // 4.5 * 1100 = 4950 -> 5120
  t.add(0, 2, Load{{1, 9000}}, 1);       // mean 3733.3 * 1.5 = 5600 -> 5632 < 9000
  CHECK(best_fit_budget(t, 1) == 9000);
}

TEST_CASE("the epoch tail is carried into the next epoch, never dropped", "[balance][planner]") {
  const Method method = GENERATE(Method::kIsf, Method::kMultiSource, Method::kRandom,
                                 Method::kLengthGroup, Method::kBestFit);
  PlannerOptions o;
  o.dp = 8;
  o.micro_batches = 2;
  o.budgets = {20, 6144, 6016};
  SampleTable t;
  MethodResult e0;
  for (size_t n = 3001; n < 3040 && e0.plan.carried.empty(); ++n) {  // want a non-empty tail
    t = synthetic_table(n, 4, 2);
    e0 = plan_method(t, method, o);
  }
  const PackList tail = carried_packs(e0);
  REQUIRE(tail.size() == e0.plan.carried.size());
  REQUIRE(tail.size() > 0);
  o.seed += 1;  // next epoch
  const MethodResult e1 = plan_method(t, method, o, &tail);
  // Epoch 1 holds every sample once plus the carried samples once more.
  std::vector<int> seen(t.size(), 0);
  for (uint32_t id : e1.packing.packs.members()) ++seen[id];
  std::vector<int> expected(t.size(), 1);
  for (uint32_t id : tail.members()) ++expected[id];
  CHECK(seen == expected);
  CHECK(e1.metrics.packs == e1.metrics.steps * 16 + e1.metrics.carried_packs);
  CHECK(e1.plan.carried.size() < 16 * (method == Method::kMultiSource ? 2 : 1));
}

TEST_CASE("no method builds a pack over the token cap", "[balance][planner][cap]") {
  // Eight ~1,300-token samples per pack: uncapped, every method would build ~10K-token packs.
  const Method method = GENERATE(Method::kIsf, Method::kIsfRandomPlacement, Method::kMultiSource,
                                 Method::kRandom, Method::kLengthGroup, Method::kBestFit);
  const SampleTable t = synthetic_table(3000, 21, 2);
  PlannerOptions o;
  o.dp = 4;
  o.samples_per_pack = 8;
  o.max_seq_len = 4096;
  o.max_seq_len_origin = "preset base-100m";
  const MethodResult r = plan_method(t, method, o);
  INFO(method_name(method));
  CHECK(r.packing.skipped.empty());  // every sample fits the cap by itself
  int64_t most = 0;
  for (size_t p = 0; p < r.packing.packs.size(); ++p)
    most = std::max(most, r.packing.packs.load(p).sum[kTokens]);
  CHECK(most <= 4096);
  CHECK(r.budgets.q_tok <= 4096);
  for (const auto& b : r.source_budgets) CHECK(b.q_tok <= 4096);
}

TEST_CASE("explicit budgets over the token cap are refused naming both keys",
          "[balance][planner][cap]") {
  const SampleTable t = synthetic_table(200, 3);
  PlannerOptions o;
  o.budgets = {20, 2048, 1920};
  o.max_seq_len = 1024;
  o.max_seq_len_origin = "preset tiny";
  const Method method = GENERATE(Method::kIsf, Method::kBestFit, Method::kRandom);
  CHECK_THROWS_WITH(
      plan_method(t, method, o),
      Catch::Contains("balance.q_tok 2048 is over the model's llm.max_seq_len 1024 (preset tiny)"));
  o.budgets = {20, 1024, 896};  // at the cap: fine
  CHECK_NOTHROW(check_token_cap(o));
  o.max_seq_len = 0;  // no cap
  o.budgets = {20, 1 << 20, (1 << 20) - 128};
  CHECK_NOTHROW(check_token_cap(o));
}

TEST_CASE("a sample over the token cap follows on_bad_sample in every method",
          "[balance][planner][cap]") {
  const Method method = GENERATE(Method::kIsf, Method::kMultiSource, Method::kRandom,
                                 Method::kLengthGroup, Method::kBestFit);
  SampleTable t = synthetic_table(400, 8);
  t.add(0, 999, Load{{1, 5000}}, 1);  // one 5,000-token text sample, over a 4,096 cap
  PlannerOptions o;
  o.max_seq_len = 4096;
  INFO(method_name(method));
  CHECK_THROWS_WITH(plan_method(t, method, o), Catch::Contains("sample 999 of dataset 'ds0'"));
  o.on_bad_sample = OnBadSample::kSkip;
  const MethodResult r = plan_method(t, method, o);
  CHECK(r.packing.skipped == std::vector<uint32_t>{static_cast<uint32_t>(t.size() - 1)});
  CHECK(r.metrics.skipped == 1);
}
