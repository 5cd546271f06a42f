// The multi-state recompute knapsack (ZB-V's exact bound, issue 41): against brute force on
// random instances, the hand case where each chunk's own peak refuses what fits, its errors, and
// ZB-V's adaptive recompute plans against every subset of each rank's blocks.
#include "memory/multi_state_knapsack.h"

#include <catch2/catch.hpp>

#include <limits>

#include "core/error.h"
#include "core/rng.h"
#include "memory/recompute_planner.h"
#include "mib.h"

using omnibal::memory::testing::kMiB;
using namespace omnibal;
using memory::InFlightState;
using memory::KnapsackItem;
using memory::KnapsackOption;

namespace {

/// Load of `option[j]` per item at state `st`, bytes.
double knapsack_load(const std::vector<KnapsackItem>& items, const std::vector<int>& option,
                     const InFlightState& st) {
  double load = 0;
  for (size_t j = 0; j < items.size(); ++j) {
    const auto& o = items[j].options[option[j]];
    load +=
        st.graphs[items[j].chunk] * o.graph_bytes + st.deferred[items[j].chunk] * o.deferred_bytes;
  }
  return load;
}

/// Best value over every choice of options that fits every state; -1 when none fits.
double knapsack_brute_force(const std::vector<KnapsackItem>& items,
                            const std::vector<InFlightState>& states,
                            const std::vector<double>& room) {
  std::vector<int> option(items.size(), 0);
  double best = -1;
  while (true) {
    bool fits = true;
    for (size_t i = 0; i < states.size() && fits; ++i)
      fits = knapsack_load(items, option, states[i]) <= room[i];
    if (fits) {
      double value = 0;
      for (size_t j = 0; j < items.size(); ++j) value += items[j].options[option[j]].value;
      best = std::max(best, value);
    }
    size_t j = 0;  // next choice, like an odometer
    while (j < items.size() && ++option[j] == static_cast<int>(items[j].options.size()))
      option[j++] = 0;
    if (j == items.size()) return best;
  }
}

/// `n` LLM blocks with random whole-MiB sizes: kept 6-30 MiB, W bytes 2-20 MiB, output 1-3 MiB,
/// forward 0.1-1.1 s (the recompute cost without profiled checkpoint times).
partition::UnitCostTable zb_v_blocks(Rng& rng, int n) {
  partition::UnitCostTable t;
  t.model = "test";
  t.source = "test";
  auto mib = [&](int lo, int hi) { return kMiB * (lo + static_cast<int>(rng.below(hi - lo + 1))); };
  for (int u = 0; u < n; ++u) {
    partition::UnitCost c{"llm_block." + std::to_string(u),
                          UnitKind::kLlmBlock,
                          0.1 + rng.uniform(),
                          1.0,
                          mib(6, 30),
                          kMiB,
                          true,
                          mib(1, 3)};
    c.backward_weight_s = 0.5;
    c.weight_grad_bytes = mib(2, 20);
    t.units.push_back(c);
  }
  return t;
}

}  // namespace

TEST_CASE("multi-state knapsack: equals brute force on random instances",
          "[memory][recompute][knapsack]") {
  const uint64_t seed = GENERATE(range(1, 41));
  Rng rng(seed);
  const int chunks = 1 + static_cast<int>(rng.below(2));
  std::vector<KnapsackItem> items(2 + rng.below(5));
  for (auto& item : items) {
    item.chunk = static_cast<int>(rng.below(chunks));
    const int options = 1 + static_cast<int>(rng.below(3));
    for (int o = 0; o < options; ++o)
      item.options.push_back({kMiB * rng.below(9), kMiB * rng.below(7), 0.25 * rng.below(9)});
  }
  std::vector<InFlightState> states(1 + rng.below(4));
  std::vector<double> room;
  for (auto& st : states) {
    for (int c = 0; c < chunks; ++c) {
      st.graphs.push_back(static_cast<int>(rng.below(5)));
      st.deferred.push_back(static_cast<int>(rng.below(4)));
    }
    room.push_back(kMiB * rng.below(60));
  }
  CAPTURE(seed, items.size(), chunks, states.size());
  const auto solved = memory::solve_multi_state_knapsack(items, states, room, kMiB);
  const double best = knapsack_brute_force(items, states, room);
  REQUIRE(solved.feasible == (best >= 0));
  if (!solved.feasible) return;
  CHECK(solved.value == Approx(best));
  double value = 0;
  for (size_t j = 0; j < items.size(); ++j) value += items[j].options[solved.option[j]].value;
  CHECK(value == Approx(solved.value));
  for (size_t i = 0; i < states.size(); ++i)
    CHECK(knapsack_load(items, solved.option, states[i]) <= room[i]);
}

TEST_CASE("multi-state knapsack: bounds the sum at one moment, not each chunk's own peak",
          "[memory][recompute][knapsack]") {
  // Two moments: 2 graphs of chunk 0 alive, then 2 of chunk 1. Keeping both blocks (10 MiB per
  // graph each) holds 20 MiB at either moment; each chunk's own peak added together says 40.
  const std::vector<InFlightState> states = {{{2, 0}, {0, 0}}, {{0, 2}, {0, 0}}};
  const KnapsackOption keep{10 * kMiB, 0, 1.0};
  const std::vector<KnapsackItem> items = {{0, {{}, keep}}, {1, {{}, keep}}};
  auto solved = memory::solve_multi_state_knapsack(items, states, {20 * kMiB, 20 * kMiB}, kMiB);
  CHECK(solved.feasible);
  CHECK(solved.value == 2.0);
  CHECK(solved.option == std::vector<int>{1, 1});
  // One MiB less at the second moment: chunk 1's block recomputes.
  solved = memory::solve_multi_state_knapsack(items, states, {20 * kMiB, 19 * kMiB}, kMiB);
  CHECK(solved.option == std::vector<int>{1, 0});
  // A deferred W counts at the moments it is pending: 2 W's of chunk 0 (4 MiB each) beside 1
  // graph of chunk 1 (10 MiB) hold 18 MiB; in 17 MiB the more valuable block keeps.
  const std::vector<InFlightState> w = {{{0, 1}, {2, 0}}};
  const std::vector<KnapsackItem> both = {{0, {{}, {0, 4 * kMiB, 1.0}}},
                                          {1, {{}, {10 * kMiB, 0, 1.5}}}};
  CHECK(memory::solve_multi_state_knapsack(both, w, {18 * kMiB}, kMiB).value == 2.5);
  CHECK(memory::solve_multi_state_knapsack(both, w, {17 * kMiB}, kMiB).option ==
        std::vector<int>{0, 1});
  // Nothing fits a moment already over its room.
  CHECK_FALSE(memory::solve_multi_state_knapsack(items, states, {-1.0, 0.0}, kMiB).feasible);
}

TEST_CASE("multi-state knapsack: many distinct blocks coarsen and still fit",
          "[memory][recompute][knapsack]") {
  Rng rng(7);
  std::vector<KnapsackItem> items;
  for (int j = 0; j < 40; ++j)
    items.push_back({j % 2,
                     {{},
                      {kMiB * (1 + 50 * rng.uniform()), kMiB * (1 + 30 * rng.uniform()), 1.0},
                      {kMiB * (1 + 50 * rng.uniform()), 0, 0.5 + 0.4 * rng.uniform()}}});
  const std::vector<InFlightState> states = {{{8, 1}, {0, 7}}, {{0, 0}, {8, 1}}, {{4, 1}, {4, 3}}};
  const std::vector<double> room(3, 4096 * kMiB);
  const auto solved = memory::solve_multi_state_knapsack(items, states, room, kMiB);
  REQUIRE(solved.feasible);
  CHECK(solved.value > 0);
  for (size_t i = 0; i < states.size(); ++i)
    CHECK(knapsack_load(items, solved.option, states[i]) <= room[i]);
}

TEST_CASE("multi-state knapsack: errors name what is wrong", "[memory][recompute][knapsack]") {
  const std::vector<InFlightState> states = {{{1, 1}, {0, 0}}};
  const std::vector<KnapsackItem> ok = {{0, {{}, {kMiB, 0, 1}}}};
  using memory::solve_multi_state_knapsack;
  CHECK_THROWS_WITH(solve_multi_state_knapsack(ok, states, {}, kMiB),
                    Catch::Contains("0 rooms for 1 states"));
  CHECK_THROWS_WITH(solve_multi_state_knapsack({{2, {{}}}}, states, {kMiB}, kMiB),
                    Catch::Contains("item 0 is in chunk 2 of 2"));
  CHECK_THROWS_WITH(solve_multi_state_knapsack({{0, {}}}, states, {kMiB}, kMiB),
                    Catch::Contains("has no option"));
  CHECK_THROWS_WITH(solve_multi_state_knapsack({{0, {{-1.0, 0, 0}}}}, states, {kMiB}, kMiB),
                    Catch::Contains("negative bytes"));
  CHECK_THROWS_WITH(solve_multi_state_knapsack(ok, states, {kMiB}, 0),
                    Catch::Contains("granularity must be > 0"));
  CHECK_THROWS_WITH(solve_multi_state_knapsack(ok, {states[0], {{1}, {0}}}, {kMiB, kMiB}, kMiB),
                    Catch::Contains("a state of 1 chunks, expected 2"));
}

TEST_CASE("recompute knapsack: ZB-V ranks take the least recompute time that fits, exactly",
          "[memory][schedule][recompute]") {
  const uint64_t seed = GENERATE(range(1, 13));
  const int P = GENERATE(2, 4);
  Rng rng(seed);
  const auto table = zb_v_blocks(rng, 4 * P);  // 2P chunks of 2 blocks
  memory::RecomputeOptions ro;
  ro.memory.weight_bytes_per_param = 2;
  ro.memory.grad_bytes_per_param = 0;
  ro.memory.optimizer_bytes_per_param = 0;
  ro.memory.workspace_bytes = 0;
  ro.memory.shard = ShardMode::kNone;
  ro.micro_batches = 2 * P;
  ro.schedule = PipelineSchedule::kZbV;
  const partition::Partition split{std::vector<int>(2 * P, 2)};
  const auto none = memory::plan_no_recompute(table, split, ro);
  const auto full = memory::plan_full_recompute(table, split, ro);
  ro.budget_bytes =
      full.memory[0].total() + rng.uniform() * (none.memory[0].total() - full.memory[0].total());
  const auto plan = memory::plan_adaptive_recompute(table, split, ro);
  const auto layout =
      memory::ScheduleLayout::of(PipelineSchedule::kZbV, 2, split.stages(), ro.micro_batches);
  const auto states = memory::in_flight_states(layout);
  CAPTURE(seed, P, ro.budget_bytes / kMiB);
  for (int r = 0; r < P; ++r) {
    std::vector<int> blocks;  // rank r's blocks: chunks r and 2P - 1 - r
    for (int k : {r, 2 * P - 1 - r})
      for (int u = split.begin(k); u < split.end(k); ++u) blocks.push_back(u);
    double best = std::numeric_limits<double>::infinity();
    for (unsigned mask = 0; mask < (1u << blocks.size()); ++mask) {
      std::vector<bool> flags(table.units.size(), false);
      double time = 0;
      for (size_t i = 0; i < blocks.size(); ++i)
        if (mask & (1u << i)) {
          flags[blocks[i]] = true;
          time += table.units[blocks[i]].recompute_cost();
        }
      if (memory::rank_memory(table, split, r, layout, states[r], flags, ro.memory).total() <=
          ro.budget_bytes)
        best = std::min(best, time);
    }
    double planned = 0;
    for (int u : blocks)
      if (plan.recompute[u]) planned += table.units[u].recompute_cost();
    CAPTURE(r);
    CHECK(plan.fits[r] == (best < std::numeric_limits<double>::infinity()));
    if (plan.fits[r]) CHECK(planned == Approx(best));
  }
}
