// The memory-balance side of the pipeline schedules: in-flight counts per schedule,
// per-rank memory over chunks, the knapsack under them, StagePlan's schedule fields and `auto`.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "memory/memory_model.h"
#include "memory/recompute_planner.h"
#include "memory/stage_plan.h"
#include "mib.h"

using omnibal::memory::testing::kMiB;
using namespace omnibal;
using memory::InFlightState;
using memory::ScheduleLayout;
using omnibal::UnitKind;
using partition::Partition;

namespace {

ScheduleLayout layout(PipelineSchedule kind, int P, int m, int v = 1) {
  ScheduleLayout l;
  l.schedule = kind;
  l.ranks = P;
  l.micro_batches = m;
  l.virtual_stages = v;
  return l;
}

/// `n` LLM blocks, each: forward 1 s, backward 2 s (W 1 s), 10 MiB kept, 4 MiB of W inputs,
/// 1 MiB checkpoint (the previous unit's output), 1 MiB parameters.
partition::UnitCostTable blocks(int n) {
  partition::UnitCostTable t;
  t.model = "test";
  t.source = "test";
  t.load = {1, 100, 1};
  for (int u = 0; u < n; ++u) {
    partition::UnitCost c{"llm_block." + std::to_string(u),
                          UnitKind::kLlmBlock,
                          1.0,
                          2.0,
                          10.0 * (1 << 20),
                          1.0 * (1 << 20),
                          true,
                          1.0 * (1 << 20)};
    c.backward_weight_s = 1.0;
    c.weight_grad_bytes = 4.0 * (1 << 20);
    t.units.push_back(c);
  }
  return t;
}

memory::MemoryOptions plain() {
  memory::MemoryOptions o;
  o.weight_bytes_per_param = 2;
  o.grad_bytes_per_param = 0;
  o.optimizer_bytes_per_param = 0;
  o.workspace_bytes = 0;
  o.shard = ShardMode::kNone;
  return o;
}

memory::StagePlannerOptions planner(int P, int m, PipelineSchedule kind, int v = 1) {
  memory::StagePlannerOptions o;
  o.stages = P;
  o.micro_batches = m;
  o.schedule = kind;
  o.virtual_stages = v;
  o.memory = plain();
  o.link_bandwidth = 1e30;
  for (int u = 0; u < 8; ++u) o.unit_names.push_back("llm_block_" + std::to_string(u));
  return o;
}

PartitionSpec manual(std::vector<int> sizes) {
  PartitionSpec p;
  p.method = PartitionMethod::kManual;
  p.manual = std::move(sizes);
  return p;
}

RecomputeSpec no_recompute() {
  RecomputeSpec r;
  r.mode = RecomputeMode::kNone;
  return r;
}

RecomputeSpec full_recompute() {
  RecomputeSpec r;
  r.mode = RecomputeMode::kFull;
  return r;
}

}  // namespace

TEST_CASE("in-flight states: 1F1B holds min(m, P - s)", "[memory][schedule]") {
  const auto states = memory::in_flight_states(layout(PipelineSchedule::k1F1B, 4, 3));
  REQUIRE(states.size() == 4);
  const std::vector<int> expected = {3, 3, 2, 1};  // min(3, 4 - s)
  for (int s = 0; s < 4; ++s) {
    REQUIRE(states[s].size() == 1);
    CHECK(states[s][0] == InFlightState{{expected[s]}, {0}});
  }
}

TEST_CASE(
    "in-flight states: ZB-H1 holds P - s graphs and s deferred W before a B, one more W "
    "after it",
    "[memory][schedule]") {
  // P 4, m 8. Stage s runs P - s - 1 warm-up forwards, then F, B and (once b - w > s) W.
  // Right before a steady-state B: P - s graphs, s W's pending; right after it: P - s - 1, s + 1.
  const auto states = memory::in_flight_states(layout(PipelineSchedule::kZbH1, 4, 8));
  for (int s = 0; s < 4; ++s) {
    CAPTURE(s);
    REQUIRE(states[s].size() == 2);
    CHECK(states[s][0] == InFlightState{{4 - s}, {s}});
    CHECK(states[s][1] == InFlightState{{3 - s}, {s + 1}});
  }
}

TEST_CASE("in-flight states: interleaved rank s peaks at Megatron's warm-up + 1 graphs",
          "[memory][schedule]") {
  // P 4, v 2, m 8: rank 0 warms up (4 - 0 - 1) * 2 + (2 - 1) * 4 = 10 forwards (chunk 0 mbs 0..3,
  // chunk 1 mbs 0..3, chunk 0 mbs 4, 5), runs its 11th (chunk 0 mb 6) and then chunk 1's first
  // backward: (7, 4) held; after chunk 0 mb 7 and chunk 1's second backward: (8, 3).
  const auto states = memory::in_flight_states(layout(PipelineSchedule::kInterleaved, 4, 8, 2));
  REQUIRE(states[0].size() == 2);
  CHECK(states[0][0] == InFlightState{{7, 4}, {0, 0}});
  CHECK(states[0][1] == InFlightState{{8, 3}, {0, 0}});
  for (int s = 0; s < 4; ++s) {
    int most = 0;
    for (const auto& st : states[s]) most = std::max(most, st.graphs[0] + st.graphs[1]);
    CHECK(most == (4 - s - 1) * 2 + (2 - 1) * 4 + 1);
  }
  // Each chunk's own peak (the knapsack's linear bound): rank 0 (8, 4) = 12 > 11.
  CHECK(memory::peak_per_chunk(states[0]) == InFlightState{{8, 4}, {0, 0}});
  CHECK(memory::peak_per_chunk(states[3]) == InFlightState{{5, 1}, {0, 0}});
}

TEST_CASE("rank memory: sums the rank's chunks and takes the largest in-flight moment",
          "[memory][schedule]") {
  const auto table = blocks(8);
  const std::vector<bool> none(8, false);
  const auto o = plain();
  // ZB-H1, P 4, m 8, split [2, 2, 2, 2]: a micro-batch keeps K = 20 MiB, a deferred W 8 MiB.
  // Rank s: max((4 - s) K + s W, (3 - s) K + (s + 1) W): 80, 68, 56, 44 MiB.
  const auto zb = layout(PipelineSchedule::kZbH1, 4, 8);
  const auto zs = memory::in_flight_states(zb);
  const Partition split{{2, 2, 2, 2}};
  const double expect[] = {80, 68, 56, 44};
  for (int s = 0; s < 4; ++s)
    CHECK(memory::rank_memory(table, split, s, zb, zs[s], none, o).activations ==
          Approx(expect[s] * kMiB));
  // With recomputation a graph keeps 2 MiB (the checkpoints) and W still 8 MiB: the moment after
  // a B wins: rank 3 max(1 x 2 + 3 x 8, 0 x 2 + 4 x 8) = 32 MiB.
  const std::vector<bool> all(8, true);
  CHECK(memory::rank_memory(table, split, 3, zb, zs[3], all, o).activations == Approx(32 * kMiB));
  // Interleaved P 4 v 2 m 8, one unit per chunk (K = 10 MiB): rank 0 holds 11 micro-batches
  // over its chunks 0 and 4; weights of both chunks (2 MiB), buffers of both: 2 x (input +
  // output) = 2 x (0 + 1) for unit 0 (no input) + 2 x (1 + 1) for unit 4 = 6 MiB.
  const auto il = layout(PipelineSchedule::kInterleaved, 4, 8, 2);
  const auto is = memory::in_flight_states(il);
  const Partition chunks{{1, 1, 1, 1, 1, 1, 1, 1}};
  const auto m0 = memory::rank_memory(table, chunks, 0, il, is[0], none, o);
  CHECK(m0.activations == Approx(110 * kMiB));
  CHECK(m0.weights == Approx(2 * kMiB));
  CHECK(m0.buffers == Approx(6 * kMiB));
  // 1F1B through the old entry point is unchanged: min(m, P - s) x K.
  CHECK(memory::stage_memory(table, split, 1, 8, none, o).activations == Approx(60 * kMiB));
}

TEST_CASE("recompute knapsack: ZB-H1 ranks and interleaved ranks fit their budget",
          "[memory][schedule][recompute]") {
  const auto table = blocks(8);
  for (const auto& [kind, v] :
       {std::pair{PipelineSchedule::kZbH1, 1}, std::pair{PipelineSchedule::kInterleaved, 2},
        std::pair{PipelineSchedule::k1F1B, 1}}) {
    memory::RecomputeOptions ro;
    ro.memory = plain();
    ro.micro_batches = 8;
    ro.schedule = kind;
    ro.virtual_stages = v;
    const Partition split = v == 1 ? Partition{{2, 2, 2, 2}} : Partition{{1, 1, 1, 1, 1, 1, 1, 1}};
    const auto none = memory::plan_no_recompute(table, split, ro);
    const auto full = memory::plan_full_recompute(table, split, ro);
    CAPTURE(choice_name(kind));
    ro.budget_bytes = 0.5 * (none.memory[0].total() + full.memory[0].total());
    const auto plan = memory::plan_adaptive_recompute(table, split, ro);
    CHECK(plan.all_fit());
    CHECK(plan.memory.size() == 4u);                            // per rank
    CHECK(plan.recomputed_units.size() == split.sizes.size());  // per chunk
    int recomputed = 0;
    for (int n : plan.recomputed_units) recomputed += n;
    CHECK(recomputed >= 1);
    CHECK(recomputed < 8);  // the last ranks hold fewer graphs
  }
}

TEST_CASE("stage plan: schedule and v in the JSON, the hash and chunks_of",
          "[memory][stage_plan][schedule]") {
  const auto table = blocks(8);
  auto o = planner(2, 4, PipelineSchedule::kInterleaved, 2);
  const auto plan = memory::plan_stages(table, manual({2, 2, 2, 2}), no_recompute(), o);
  CHECK(plan.schedule == PipelineSchedule::kInterleaved);
  CHECK(plan.virtual_stages == 2);
  CHECK(plan.chunks() == 4);
  CHECK(plan.stages() == 2);
  CHECK(plan.chunks_of(1) == std::vector<int>{1, 3});
  CHECK(plan.predicted_bytes.size() == 2u);
  CHECK(plan.pipeline_s > 0);
  const auto back = memory::parse_stage_plan(memory::stage_plan_json(plan), "test");
  CHECK(back.schedule == PipelineSchedule::kInterleaved);
  CHECK(back.virtual_stages == 2);
  CHECK(back.partition == plan.partition);
  CHECK(back.pipeline_s == plan.pipeline_s);
  CHECK(memory::stage_plan_hash(back) == memory::stage_plan_hash(plan));
  // Plans from before schedules: 1F1B, v 1, the same hash as a 1F1B plan of that split.
  auto old = memory::stage_plan_json(memory::plan_stages(table, manual({4, 4}), no_recompute(),
                                                         planner(2, 4, PipelineSchedule::k1F1B)));
  const auto hash_1f1b = memory::stage_plan_hash(memory::parse_stage_plan(old, "test"));
  old.erase("schedule");
  old.erase("virtual_stages");
  old.erase("pipeline_s");
  const auto parsed = memory::parse_stage_plan(old, "old");
  CHECK(parsed.schedule == PipelineSchedule::k1F1B);
  CHECK(parsed.virtual_stages == 1);
  CHECK(memory::stage_plan_hash(parsed) == hash_1f1b);
  // Same split under ZB-H1: another hash (ranks compare the schedule too).
  const auto zb = memory::plan_stages(table, manual({4, 4}), no_recompute(),
                                      planner(2, 4, PipelineSchedule::kZbH1));
  CHECK(memory::stage_plan_hash(zb) != hash_1f1b);
}

TEST_CASE("stage plan: interleaved with fewer units than P x v is a clear error",
          "[memory][stage_plan][schedule]") {
  PartitionSpec balanced;
  balanced.method = PartitionMethod::kBalanced;
  CHECK_THROWS_WITH(memory::plan_stages(blocks(8), balanced, no_recompute(),
                                        planner(4, 8, PipelineSchedule::kInterleaved, 3)),
                    Catch::Contains("parallel.virtual_stages") && Catch::Contains("needs 12"));
  CHECK_THROWS_WITH(memory::plan_stages(blocks(8), balanced, no_recompute(),
                                        planner(4, 6, PipelineSchedule::kInterleaved, 2)),
                    Catch::Contains("parallel.micro_batches"));
}

TEST_CASE("stage plan: auto picks the fastest schedule that fits",
          "[memory][stage_plan][schedule]") {
  const auto table = blocks(8);
  PartitionSpec balanced;
  balanced.method = PartitionMethod::kBalanced;
  SECTION("no budget, m 3 (no interleaving): ZB-H1 wins") {
    auto o = planner(2, 3, PipelineSchedule::kAuto);
    const auto plan = memory::plan_stages(table, balanced, no_recompute(), o);
    CHECK(plan.schedule == PipelineSchedule::kZbH1);
    const auto one = memory::plan_stages(table, balanced, no_recompute(),
                                         planner(2, 3, PipelineSchedule::k1F1B));
    CHECK(plan.pipeline_s < one.pipeline_s);
    CHECK_THAT(plan.partition_source, Catch::StartsWith("auto: zb-h1") && Catch::Contains("1f1b") &&
                                          !Catch::Contains("interleaved"));
  }
  SECTION("a budget only 1F1B meets: 1F1B") {
    // m 4, P 2, every block recomputed: interleaved v 2 is compared too. The budget is what
    // 1F1B's best split needs; ZB-H1's pending W's keep their inputs whatever is recomputed
    // (rank 1: 2 x 16 MiB after a B), and interleaved warms up more micro-batches.
    const auto one = memory::plan_stages(table, balanced, full_recompute(),
                                         planner(2, 4, PipelineSchedule::k1F1B));
    auto o = planner(2, 4, PipelineSchedule::kAuto);
    o.budget_bytes = std::max(one.predicted_bytes[0], one.predicted_bytes[1]);
    const auto zb = memory::plan_stages(table, balanced, full_recompute(),
                                        planner(2, 4, PipelineSchedule::kZbH1));
    CHECK(zb.pipeline_s < one.pipeline_s);  // ZB-H1 would be faster, but needs more memory
    CHECK(std::max(zb.predicted_bytes[0], zb.predicted_bytes[1]) > o.budget_bytes);
    const auto plan = memory::plan_stages(table, balanced, full_recompute(), o);
    CHECK(plan.schedule == PipelineSchedule::k1F1B);
    CHECK(plan.partition == one.partition);
    CHECK_THAT(plan.partition_source, Catch::StartsWith("auto: 1f1b") &&
                                          Catch::Contains("zb-h1: ") &&
                                          Catch::Contains("interleaved v 2: "));
  }
}
