#include "balance/budget_search.h"

#include <catch2/catch.hpp>

#include <numeric>

#include "balance/balance_metrics.h"
#include "balance/step_plan.h"
#include "core/error.h"
#include "test_tables.h"

using namespace omnibal::balance;
using omnibal::balance::testing::synthetic_table;

TEST_CASE("search grid admits every sample and brackets the target", "[balance][search]") {
  const int target = GENERATE(2, 4, 6);
  const SampleTable t = synthetic_table(3000, 4);
  std::vector<uint32_t> ids(t.size());
  std::iota(ids.begin(), ids.end(), 0u);
  const auto grid = search_grid(t, ids, target);
  REQUIRE(!grid.empty());
  const auto mx = t.max_load();
  const auto mean = t.mean_load();
  for (const auto& b : grid) {
    CHECK(b.q_vit >= mx[kTiles]);
    CHECK(b.q_tok >= mx[kTokens]);
    CHECK(b.q_tok_thresh == b.q_tok - 128);
    CHECK(b.q_tok % 256 == 0);
  }
  CHECK(grid.front().q_vit <= std::max<int64_t>(mx[kTiles], target * mean[kTiles]));
  CHECK(grid.back().q_vit >= (target + 1) * mean[kTiles]);
}

TEST_CASE("search picks an in-range candidate with the lowest Dist Ratio sum",
          "[balance][search]") {
  const int target = GENERATE(3, 4);
  const SampleTable t = synthetic_table(20000, 12);
  SearchOptions o;
  o.dp = 8;
  o.samples_per_pack = target;
  const SearchResult r = search_budgets(t, o);
  REQUIRE(r.found);
  const auto& best = r.candidates[r.best];
  CHECK(best.in_range);
  CHECK(best.samples_per_pack >= target);
  CHECK(best.samples_per_pack <= target + 1);
  for (const auto& c : r.candidates)
    if (c.in_range)
      CHECK(best.dist_ratio_vit + best.dist_ratio_llm <=
            c.dist_ratio_vit + c.dist_ratio_llm + 1e-12);
  CHECK(r.scored_samples == t.size());
  const std::string table = format_search_table(r);
  CHECK(table.find('*') != std::string::npos);
  // Same options, same answer.
  CHECK(search_budgets(t, o).budgets().q_tok == r.budgets().q_tok);
}

TEST_CASE("search scores every candidate as its own ISF run would", "[balance][search]") {
  // The search reuses a run for the next token budget when the token budget decided nothing;
  // every row must still equal an independent ISF run + placement of that candidate.
  const SampleTable t = synthetic_table(6000, GENERATE(21u, 22u));
  SearchOptions o;
  o.dp = 4;
  o.samples_per_pack = 4;
  o.iterations = 20;
  o.threads = GENERATE(1, 2, 3);
  const SearchResult r = search_budgets(t, o);
  std::vector<uint32_t> ids(t.size());
  std::iota(ids.begin(), ids.end(), 0u);
  REQUIRE(r.candidates.size() == search_grid(t, ids, 4).size());
  int in_range = 0;
  for (const auto& c : r.candidates) {
    IsfOptions io;
    io.budgets = c.budgets;
    io.iterations = o.iterations;
    io.seed = o.seed;
    io.on_bad_sample = OnBadSample::kSkip;
    const PackResult p = IsfPacker(io).pack(t, ids);
    CHECK(c.packs == static_cast<int64_t>(p.packs.size()));
    if (!c.in_range) continue;
    ++in_range;
    const StepPlan plan = place_load_grouped(p.packs, o.dp, o.micro_batches, o.seed);
    const BalanceMetrics m = compute_metrics(p.packs, plan, {c.budgets.q_vit, c.budgets.q_tok}, 0);
    CHECK(c.dist_ratio_vit == m.dist_ratio_vit);
    CHECK(c.dist_ratio_llm == m.dist_ratio_llm);
    CHECK(c.token_fill == m.token_fill);
  }
  CHECK(in_range > 0);
}

TEST_CASE("search scores large inputs on a subsample", "[balance][search]") {
  const SampleTable t = synthetic_table(5000, 3);
  SearchOptions o;
  o.max_scored_samples = 1000;
  const SearchResult r = search_budgets(t, o);
  CHECK(r.scored_samples == 1000);
}

TEST_CASE("search without an in-range candidate reports it", "[balance][search]") {
  // Three samples can never average 4 per pack: every candidate packs them into one pack of 3.
  SampleTable t;
  t.add_dataset({"d", "p", 0, 0, 1.0});
  for (uint32_t i = 0; i < 3; ++i) t.add(0, i, Load{{1, 100}}, 1);
  SearchOptions o;
  o.samples_per_pack = 4;
  const SearchResult r = search_budgets(t, o);
  REQUIRE(!r.candidates.empty());
  CHECK_FALSE(r.found);
  CHECK(r.candidates[r.best].samples_per_pack == 3.0);
  CHECK(format_search_table(r).find("none in range") != std::string::npos);
  CHECK_THROWS_AS(search_budgets(SampleTable{}, o), omnibal::Error);
}

TEST_CASE("search stays within the token cap (the model's llm.max_seq_len)", "[balance][search]") {
  // 8 samples of ~1,000 tokens per pack want Q_t near 8K: a 4,096-token model must clamp every
  // candidate, and the chosen budgets, to 4,096.
  const int64_t cap = GENERATE(1024, 4096);
  const SampleTable t = synthetic_table(3000, 9);
  std::vector<uint32_t> ids(t.size());
  std::iota(ids.begin(), ids.end(), 0u);
  const auto uncapped = search_grid(t, ids, 8);
  REQUIRE(std::any_of(uncapped.begin(), uncapped.end(),
                      [&](const IsfBudgets& b) { return b.q_tok > cap; }));
  for (const auto& b : search_grid(t, ids, 8, cap)) {
    CHECK(b.q_tok <= cap);
    CHECK(b.q_tok_thresh == b.q_tok - 128);
  }
  SearchOptions o;
  o.samples_per_pack = 8;
  o.max_pack_tokens = cap;
  const SearchResult r = search_budgets(t, o);
  for (const auto& c : r.candidates) CHECK(c.budgets.q_tok <= cap);
  CHECK(r.budgets().q_tok <= cap);
}
