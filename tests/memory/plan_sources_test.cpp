// The start-up planner's two questions (memory/plan_sources.h): where the split and where the
// recompute flags come from, and that a cost table is asked for only when one is needed; which
// stored plan fits (each mismatch named), reuse under parallel.schedule auto, and
// parallel.plan_from after a resumed checkpoint's plan.
#include "memory/plan_sources.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace omnibal;
using memory::RecomputeSource;
using memory::SplitSource;
using omnibal::UnitKind;
using partition::Partition;

namespace {

const std::vector<std::string> kNames = {"vit_embed",   "vit_block_0", "vit_block_1", "projector",
                                         "llm_embed",   "llm_block_0", "llm_block_1", "llm_block_2",
                                         "llm_block_3", "llm_head"};

/// The tiny chain with ViT blocks 10x as slow as everything else (balanced: [2, 8]).
partition::UnitCostTable tiny_table() {
  partition::UnitCostTable t;
  t.model = "tiny";
  t.source = "test";
  t.load = {32, 224, 4};
  const UnitKind kinds[] = {UnitKind::kVitEmbed,  UnitKind::kVitBlock, UnitKind::kVitBlock,
                            UnitKind::kProjector, UnitKind::kLlmEmbed, UnitKind::kLlmBlock,
                            UnitKind::kLlmBlock,  UnitKind::kLlmBlock, UnitKind::kLlmBlock,
                            UnitKind::kLlmHead};
  for (size_t u = 0; u < kNames.size(); ++u) {
    const double fwd = kinds[u] == UnitKind::kVitBlock ? 10 : 1;
    t.units.push_back({kNames[u], kinds[u], fwd, 2 * fwd, 4.0 * (1 << 20), 1 << 20, true, 1 << 19});
  }
  return t;
}

memory::StagePlanRequest request(const std::string& partition, const std::string& recompute) {
  memory::StagePlanRequest r;
  r.model = "tiny";
  r.unit_names = kNames;
  r.parameter_weights.assign(kNames.size(), 1.0);
  r.stages = 2;
  r.micro_batches = 4;
  r.partition.method = parse_choice<PartitionMethod>(partition, "test");
  r.recompute.mode = parse_choice<RecomputeMode>(recompute, "test");
  r.stored_origin = "checkpoint ckpt/step_3";
  return r;
}

memory::PlanningInputs inputs() {
  memory::PlanningInputs in;
  in.table = tiny_table();
  in.options.stages = 2;
  in.options.micro_batches = 4;
  in.options.unit_names = kNames;
  in.options.memory.shard = ShardMode::kNone;
  in.options.memory.workspace_bytes = 0;
  return in;
}

}  // namespace

TEST_CASE("plan sources: the split and the recompute flags each come from one place",
          "[memory][plan_sources]") {
  auto r = request("uniform", "full");
  CHECK(memory::split_source(r) == SplitSource::kConfig);
  CHECK(memory::recompute_source(r, SplitSource::kConfig, Partition{{5, 5}}) ==
        RecomputeSource::kConfig);
  r = request("balanced", "adaptive");
  CHECK(memory::split_source(r) == SplitSource::kSearch);
  CHECK(memory::recompute_source(r, SplitSource::kSearch, Partition{{5, 5}}) ==
        RecomputeSource::kPlanner);
  r.stages = 1;
  CHECK(memory::split_source(r) == SplitSource::kSingleStage);
  // A stored plan of the same stage count and units serves a resume.
  memory::StagePlan stored;
  stored.model = "tiny";
  stored.partition = Partition{{2, 8}};
  stored.unit_names = kNames;
  stored.micro_batches = 4;
  stored.recompute = memory::RecomputeFlags::none(10);
  r = request("balanced", "adaptive");
  r.stored = &stored;
  CHECK(memory::split_source(r) == SplitSource::kStored);
  CHECK(memory::recompute_source(r, SplitSource::kStored, stored.partition) ==
        RecomputeSource::kStored);
  // Another split (the config's) or another m: the flags are planned again.
  CHECK(memory::recompute_source(r, SplitSource::kConfig, Partition{{5, 5}}) ==
        RecomputeSource::kPlanner);
  r.micro_batches = 2;
  CHECK(memory::recompute_source(r, SplitSource::kStored, stored.partition) ==
        RecomputeSource::kPlanner);
  // Another stage count: the stored plan does not fit, the split is searched.
  r = request("balanced", "adaptive");
  r.stored = &stored;
  r.stages = 3;
  CHECK_FALSE(memory::stored_plan_fits(r));
  CHECK(memory::split_source(r) == SplitSource::kSearch);
}

TEST_CASE(
    "plan sources: a cost table is asked for only when the split is searched or the flags "
    "planned",
    "[memory][plan_sources]") {
  int calls = 0;
  auto counted = [&] {
    ++calls;
    return inputs();
  };
  // Fixed rules: no table; full recomputes every block (by name).
  const auto fixed = memory::resolve_stage_plan(request("uniform", "full"), counted);
  CHECK(calls == 0);
  CHECK(fixed.partition == Partition{{5, 5}});
  CHECK(fixed.recomputed_per_stage() == std::vector<int>{2, 4});
  CHECK(fixed.recompute_source == "config: full");
  CHECK(fixed.describe_stages() ==
        "stage 0: vit_embed..llm_embed (5 units, 2 recomputed), "
        "stage 1: llm_block_0..llm_head (5 units, 4 recomputed)");
  // Balanced + adaptive: one call, the search's plan (no budget: nothing recomputed).
  const auto searched = memory::resolve_stage_plan(request("balanced", "adaptive"), counted);
  CHECK(calls == 1);
  CHECK(searched.partition == Partition{{2, 8}});
  CHECK(searched.recompute == memory::RecomputeFlags::none(10));
  CHECK(searched.partition_source.rfind("balanced", 0) == 0);
  // Resume with the stored plan: no table, both halves from the checkpoint.
  memory::StagePlan stored = searched;
  stored.recompute.per_unit[1] = true;  // as if planned under another budget
  stored.recompute_source = "adaptive: test";
  auto r = request("balanced", "adaptive");
  r.stored = &stored;
  const auto resumed = memory::resolve_stage_plan(r, counted);
  CHECK(calls == 1);
  CHECK(resumed.partition == stored.partition);
  CHECK(resumed.recompute == stored.recompute);
  CHECK(resumed.partition_source.rfind("checkpoint ckpt/step_3 (balanced", 0) == 0);
  CHECK(resumed.recompute_source == "checkpoint ckpt/step_3 (adaptive: test)");
  // A manual split in the config wins over the stored one; adaptive is planned for it.
  r.partition.method = PartitionMethod::kManual;
  r.partition.manual = {3, 7};
  const auto manual = memory::resolve_stage_plan(r, counted);
  CHECK(calls == 2);
  CHECK(manual.partition == Partition{{3, 7}});
  CHECK(manual.partition_source == "config: manual");
  CHECK(manual.recompute_source.rfind("adaptive", 0) == 0);
}

TEST_CASE("fixed rules: parameters over counts or bytes of one dtype give the same split",
          "[memory][plan_sources]") {
  const std::vector<double> counts = {3, 40, 40, 5, 30, 20, 20, 20, 20, 30};
  std::vector<double> bf16, fp32;
  for (double c : counts) bf16.push_back(2 * c), fp32.push_back(4 * c);
  PartitionSpec spec;
  spec.method = PartitionMethod::kParameters;
  const int stages = GENERATE(2, 3, 4, 5);
  const auto split = memory::fixed_split(spec, counts, stages);
  CHECK(memory::fixed_split(spec, bf16, stages) == split);
  CHECK(memory::fixed_split(spec, fp32, stages) == split);
  // Empty flags are no longer a thing: none and full are both one flag per unit.
  CHECK(memory::RecomputeFlags::none(10).units() == 10);
  CHECK(memory::RecomputeFlags::full(memory::block_units(kNames)).count(0, 10) == 6);
}

namespace {

/// A stored 2-stage plan of the tiny chain under `schedule` with v chunks per rank.
memory::StagePlan stored_plan(PipelineSchedule schedule = PipelineSchedule::k1F1B, int v = 1) {
  memory::StagePlan p;
  p.model = "tiny";
  p.unit_names = kNames;
  p.micro_batches = 4;
  p.schedule = schedule;
  p.virtual_stages = v;
  p.partition = v == 1 ? Partition{{2, 8}} : Partition{{2, 3, 2, 3}};
  p.recompute = memory::RecomputeFlags::none(10);
  p.partition_source = "balanced: test";
  p.recompute_source = "adaptive: test";
  return p;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

}  // namespace

TEST_CASE("plan misfits: each mismatch names the plan's value and this run's key",
          "[memory][plan_sources]") {
  struct Case {
    const char* what;
    std::function<void(memory::StagePlanRequest&, memory::StagePlan&)> change;
    const char* expected;  // "" = fits
  };
  const std::vector<Case> cases = {
      {"same", [](auto&, auto&) {}, ""},
      {"pp", [](auto& r, auto&) { r.stages = 4; }, "2 pipeline stages vs parallel.pp 4"},
      {"model", [](auto&, auto& p) { p.model = "small"; }, "model 'small' vs model.preset 'tiny'"},
      {"unit count",
       [](auto&, auto& p) {
         p.unit_names.push_back("llm_block_4");
         p.partition = Partition{{2, 9}};
       },
       "11 units vs the model's 10"},
      {"unit name", [](auto&, auto& p) { p.unit_names[3] = "proj"; },
       "unit 3 'proj' vs the model's 'projector'"},
      {"schedule", [](auto& r, auto&) { r.schedule = PipelineSchedule::kZbH1; },
       "schedule 1f1b vs parallel.schedule zb-h1"},
      {"v",
       [](auto& r, auto& p) {
         p = stored_plan(PipelineSchedule::kInterleaved, 2);
         r.schedule = PipelineSchedule::kInterleaved;
         r.virtual_stages = 3;
       },
       "v 2 vs parallel.virtual_stages 3"},
      {"auto: another v",
       [](auto& r, auto& p) {
         p = stored_plan(PipelineSchedule::kInterleaved, 2);
         r.schedule = PipelineSchedule::kAuto;
         r.virtual_stages = 3;
       },
       "schedule interleaved v 2 vs parallel.schedule auto, which plans interleaved at v 3"},
      {"auto: m not a multiple of pp",
       [](auto& r, auto& p) {
         p = stored_plan(PipelineSchedule::kInterleaved, 2);
         r.schedule = PipelineSchedule::kAuto;
         r.micro_batches = 3;
       },
       "parallel.micro_batches (3) is a multiple of parallel.pp (2)"},
      {"auto: zb-h1 fits",
       [](auto& r, auto& p) {
         p.schedule = PipelineSchedule::kZbH1;
         r.schedule = PipelineSchedule::kAuto;
       },
       ""},
      {"two at once",
       [](auto& r, auto& p) {
         r.stages = 3;
         p.model = "small";
       },
       "model 'small' vs model.preset 'tiny'; 2 pipeline stages vs parallel.pp 3"},
  };
  for (const auto& c : cases) {
    auto r = request("balanced", "adaptive");
    auto plan = stored_plan();
    c.change(r, plan);
    CAPTURE(c.what);
    const std::string why = joined(memory::plan_misfits(plan, r));
    if (std::string(c.expected).empty()) {
      CHECK(why.empty());
    } else {
      CHECK_THAT(why, Catch::Contains(c.expected));
    }
    r.stored = &plan;
    CHECK(memory::stored_plan_fits(r) == why.empty());
  }
}

TEST_CASE("plan sources: a resume under schedule auto reuses the stored plan and its schedule",
          "[memory][plan_sources]") {
  const auto [schedule, v] = GENERATE(std::make_pair(PipelineSchedule::k1F1B, 1),
                                      std::make_pair(PipelineSchedule::kZbH1, 1),
                                      std::make_pair(PipelineSchedule::kInterleaved, 2),
                                      std::make_pair(PipelineSchedule::kZbV, 2));
  const memory::StagePlan stored = stored_plan(schedule, v);
  auto r = request("balanced", "adaptive");
  r.schedule = PipelineSchedule::kAuto;
  r.auto_zb_v = true;  // as the trainer's start-up planner
  r.stored = &stored;
  CHECK(memory::split_source(r) == SplitSource::kStored);
  CHECK(memory::recompute_source(r, SplitSource::kStored, stored.partition) ==
        RecomputeSource::kStored);
  int calls = 0;
  const auto plan = memory::resolve_stage_plan(r, [&] {
    ++calls;
    return inputs();
  });
  CHECK(calls == 0);  // no profile, no search, no schedule comparison
  CHECK(plan.schedule == schedule);
  CHECK(plan.virtual_stages == v);
  CHECK(plan.partition == stored.partition);
  CHECK(plan.partition_source == "checkpoint ckpt/step_3 (balanced: test)");
  // Under auto with a fixed split rule, the stored schedule is kept and the rule applied at its v.
  r.partition.method = PartitionMethod::kUniform;
  r.recompute.mode = RecomputeMode::kNone;
  const auto uniform = memory::resolve_stage_plan(r, [&] {
    ++calls;
    return inputs();
  });
  CHECK(calls == 0);
  CHECK(uniform.schedule == schedule);
  CHECK(uniform.partition.stages() == 2 * v);
  // A stored ZB-V plan where auto does not compare ZB-V is planned again.
  if (schedule == PipelineSchedule::kZbV) {
    r = request("balanced", "adaptive");
    r.schedule = PipelineSchedule::kAuto;
    r.stored = &stored;
    CHECK(memory::split_source(r) == SplitSource::kSearch);
  }
  // A stored plan auto would not pick for this run (m 3: no interleaved) is planned again.
  if (schedule == PipelineSchedule::kInterleaved) {
    r = request("balanced", "adaptive");
    r.schedule = PipelineSchedule::kAuto;
    r.micro_batches = 3;
    r.stored = &stored;
    CHECK(memory::split_source(r) == SplitSource::kSearch);
  }
}

TEST_CASE(
    "plan sources: parallel.plan_from after the checkpoint's plan, refused when it does "
    "not fit",
    "[memory][plan_sources]") {
  int calls = 0;
  const auto counted = [&] {
    ++calls;
    return inputs();
  };
  memory::StagePlan from = stored_plan();
  from.partition = Partition{{3, 7}};
  from.recompute.per_unit[1] = true;
  memory::StagePlan checkpoint = stored_plan();  // [2, 8]
  auto r = request("balanced", "adaptive");
  r.plan_from = &from;
  r.plan_from_origin = "parallel.plan_from 'runs/a/stage_plan.json'";
  // No checkpoint: the split, the flags and the schedule of plan_from; nothing profiled.
  auto plan = memory::resolve_stage_plan(r, counted);
  CHECK(calls == 0);
  CHECK(plan.partition == Partition{{3, 7}});
  CHECK(plan.recompute == from.recompute);
  CHECK(plan.partition_source == "parallel.plan_from 'runs/a/stage_plan.json' (balanced: test)");
  CHECK(plan.recompute_source == "parallel.plan_from 'runs/a/stage_plan.json' (adaptive: test)");
  // Another m: the split is reused, the adaptive flags planned for it (a table, no search).
  r.micro_batches = 8;
  plan = memory::resolve_stage_plan(r, counted);
  CHECK(calls == 1);
  CHECK(plan.partition == Partition{{3, 7}});
  CHECK(plan.recompute_source.rfind("adaptive", 0) == 0);
  r.micro_batches = 4;
  // A resumed checkpoint's plan comes first.
  r.stored = &checkpoint;
  CHECK(memory::resolve_stage_plan(r, counted).partition == Partition{{2, 8}});
  // A checkpoint's plan that does not fit: plan_from's serves.
  checkpoint.model = "small";
  CHECK(memory::resolve_stage_plan(r, counted).partition == Partition{{3, 7}});
  // plan_from that does not fit: refused, naming the file and both values.
  r.stored = nullptr;
  r.stages = 4;
  CHECK_THROWS_WITH(memory::resolve_stage_plan(r, counted),
                    Catch::Contains("parallel.plan_from 'runs/a/stage_plan.json': that plan "
                                    "does not fit this run: 2 pipeline stages vs parallel.pp 4"));
  CHECK_THROWS_WITH(memory::split_source(r), Catch::Contains("parallel.pp 4"));
  r.stages = 2;
  r.schedule = PipelineSchedule::kZbH1;
  CHECK_THROWS_WITH(memory::resolve_stage_plan(r, counted),
                    Catch::Contains("schedule 1f1b vs parallel.schedule zb-h1"));
  CHECK(calls == 1);
  // With the checkpoint's plan fitting, a plan_from that does not fit is not consulted.
  memory::StagePlan zb = stored_plan(PipelineSchedule::kZbH1);
  r.stored = &zb;
  CHECK(memory::resolve_stage_plan(r, counted).schedule == PipelineSchedule::kZbH1);
}
