#include "memory/recompute_planner.h"

#include <catch2/catch.hpp>

#include <limits>

#include "core/error.h"
#include "core/rng.h"
#include "mib.h"

using omnibal::memory::testing::kMiB;
using namespace omnibal;
using omnibal::UnitKind;

namespace {

/// Half of the blocks get profiled checkpointed times (recompute_cost between 0.1 and 1.1 x the
/// forward instead of 1 x), so the planner's value is not the forward alone.
void profile_checkpoints(Rng& rng, partition::UnitCostTable& t) {
  for (auto& u : t.units) {
    if (!u.recomputable() || rng.below(2) == 0) continue;
    u.checkpointed_forward_s = u.forward_s * (0.6 + 0.4 * rng.uniform());
    u.checkpointed_backward_s = u.backward_s + u.forward_s * (0.5 + 0.6 * rng.uniform());
  }
}

/// A random chain: embed, ViT blocks, projector, LLM blocks, head; sizes in whole MiB.
partition::UnitCostTable random_table(Rng& rng, int vit, int llm) {
  partition::UnitCostTable t;
  auto mib = [&](int lo, int hi) { return kMiB * (lo + static_cast<int>(rng.below(hi - lo + 1))); };
  t.units.push_back(
      {"vit_embed", UnitKind::kVitEmbed, 0.01, 0.02, mib(1, 4), mib(1, 2), true, mib(1, 3)});
  for (int i = 0; i < vit; ++i)
    t.units.push_back({"vit_block", UnitKind::kVitBlock, 0.1 + rng.uniform(), 1.0, mib(5, 40),
                       mib(2, 8), true, mib(1, 3)});
  t.units.push_back(
      {"projector", UnitKind::kProjector, 0.02, 0.04, mib(1, 3), mib(1, 2), true, mib(1, 3)});
  for (int i = 0; i < llm; ++i)
    t.units.push_back({"llm_block", UnitKind::kLlmBlock, 0.1 + rng.uniform(), 1.0, mib(5, 40),
                       mib(2, 8), true, mib(1, 3)});
  t.units.push_back({"head", UnitKind::kLlmHead, 0.05, 0.1, mib(2, 6), mib(1, 2), true, 0});
  return t;
}

/// Least recompute time of stage s by enumerating every subset of its blocks.
double brute_force(const partition::UnitCostTable& t, const partition::Partition& p, int s,
                   const memory::RecomputeOptions& o) {
  std::vector<int> items;
  for (int u = p.begin(s); u < p.end(s); ++u)
    if (t.units[u].recomputable()) items.push_back(u);
  double best = std::numeric_limits<double>::infinity();
  for (unsigned mask = 0; mask < (1u << items.size()); ++mask) {
    std::vector<bool> flags(t.units.size(), false);
    double time = 0;
    for (size_t i = 0; i < items.size(); ++i)
      if (mask & (1u << i)) {
        flags[items[i]] = true;
        time += t.units[items[i]].recompute_cost();
      }
    if (memory::stage_memory(t, p, s, o.micro_batches, flags, o.memory).total() <= o.budget_bytes)
      best = std::min(best, time);
  }
  return best;
}
}  // namespace

TEST_CASE("adaptive recompute fits with the least recompute time (vs brute force)",
          "[memory][recompute]") {
  Rng rng(GENERATE(11, 12, 13, 14, 15, 16));
  for (int trial = 0; trial < 6; ++trial) {
    auto t = random_table(rng, 5, 6);  // 14 units
    if (trial % 2) profile_checkpoints(rng, t);
    const partition::Partition p{{5, 4, 5}};
    memory::RecomputeOptions o;
    o.micro_batches = 1 + static_cast<int>(rng.below(6));
    o.memory.dp = 2;
    o.memory.workspace_bytes = 0;
    const auto full = memory::plan_full_recompute(t, p, o);
    const auto none = memory::plan_no_recompute(t, p, o);
    double lo = 0, hi = 0;
    for (int s = 0; s < 3; ++s) {
      lo = std::max(lo, full.memory[s].total());
      hi = std::max(hi, none.memory[s].total());
    }
    o.budget_bytes = lo + rng.uniform() * (hi - lo);  // between "only full fits" and "none fits"
    const auto plan = memory::plan_adaptive_recompute(t, p, o);
    INFO("trial " << trial << " m=" << o.micro_batches << " budget " << o.budget_bytes);
    CHECK(plan.all_fit());
    for (int s = 0; s < 3; ++s) {
      CHECK(plan.memory[s].total() <= o.budget_bytes);
      double time = 0;
      for (int u = p.begin(s); u < p.end(s); ++u)
        if (plan.recompute[u]) time += t.units[u].recompute_cost();
      CHECK(time == Approx(brute_force(t, p, s, o)).margin(1e-9));
    }
  }
}

TEST_CASE("adaptive recompute prices a block by its profiled checkpointed times",
          "[memory][recompute]") {
  // Two LLM blocks of equal forward and activations; the budget leaves room to keep one. Without
  // profiled checkpoint times the tie goes either way; block 1's checkpointed run is profiled
  // cheaper, so it is the one recomputed, and the plan's time is its recompute cost.
  partition::UnitCostTable t;
  t.units = {{"llm_embed", UnitKind::kLlmEmbed, 0.01, 0.02, kMiB, kMiB, true, kMiB},
             {"llm_block.0", UnitKind::kLlmBlock, 0.5, 1.0, 20 * kMiB, kMiB, true, kMiB},
             {"llm_block.1", UnitKind::kLlmBlock, 0.5, 1.0, 20 * kMiB, kMiB, true, kMiB},
             {"head", UnitKind::kLlmHead, 0.05, 0.1, kMiB, kMiB, true, 0}};
  t.units[1].checkpointed_forward_s = 0.45;  // block 0: + 0.45 + 1.5 - 0.5 - 1.0 = 0.45 s
  t.units[1].checkpointed_backward_s = 1.5;
  t.units[2].checkpointed_forward_s = 0.4;  // block 1: + 0.4 + 1.3 - 0.5 - 1.0 = 0.2 s
  t.units[2].checkpointed_backward_s = 1.3;
  CHECK(t.units[1].recompute_cost() == Approx(0.45));
  CHECK(t.units[2].recompute_cost() == Approx(0.2));
  const partition::Partition p{{3, 1}};  // stage 0 holds both blocks, 2 micro-batches in flight
  memory::RecomputeOptions o;
  o.micro_batches = 4;
  o.memory.workspace_bytes = 0;
  const auto full = memory::plan_full_recompute(t, p, o);
  CHECK(full.recompute_s == Approx(0.65));
  const std::vector<bool> one{false, false, true, false};
  o.budget_bytes = memory::plan_with_flags(t, p, one, o).memory[0].total() + 0.5 * kMiB;
  CHECK_FALSE(memory::plan_no_recompute(t, p, o).all_fit());
  const auto plan = memory::plan_adaptive_recompute(t, p, o);
  CHECK(plan.all_fit());
  CHECK(plan.recompute == std::vector<bool>{false, false, true, false});
  CHECK(plan.recompute_s == Approx(0.2));
}

TEST_CASE("full, none and per-stage counts", "[memory][recompute]") {
  Rng rng(3);
  const auto t = random_table(rng, 3, 3);  // units: embed, 3 vit, projector, 3 llm, head
  const partition::Partition p{{4, 5}};
  memory::RecomputeOptions o;
  o.micro_batches = 4;
  o.budget_bytes = 1e12;
  const auto full = memory::plan_full_recompute(t, p, o);
  CHECK(full.recomputed_units == std::vector<int>{3, 3});
  CHECK_FALSE(full.recompute[0]);  // embeddings, projector and head always keep activations
  CHECK_FALSE(full.recompute[4]);
  const auto none = memory::plan_no_recompute(t, p, o);
  CHECK(none.recomputed_units == std::vector<int>{0, 0});
  CHECK(none.recompute_s == 0);
  CHECK(none.memory[0].total() > full.memory[0].total());
  const auto counts = memory::plan_recompute_counts(t, p, {2, 1}, o);
  CHECK(counts.recompute ==
        std::vector<bool>{false, true, true, false, false, true, false, false, false});
  CHECK_THROWS_WITH(memory::plan_recompute_counts(t, p, {4, 0}, o),
                    Catch::Contains("stage 0 has only 3"));
  CHECK_THROWS_AS(memory::plan_recompute_counts(t, p, {1}, o), Error);
  // A budget below full recomputation: the stage is flagged, not silently accepted.
  o.budget_bytes = 1;
  const auto adaptive = memory::plan_adaptive_recompute(t, p, o);
  CHECK_FALSE(adaptive.all_fit());
  CHECK(adaptive.recomputed_units == std::vector<int>{3, 3});
  // A huge budget: nothing recomputed.
  o.budget_bytes = 1e15;
  CHECK(memory::plan_adaptive_recompute(t, p, o).recompute_s == 0);
}
