// The start-up planner's two questions (memory/plan_sources.h): where the split and where the
// recompute flags come from, and that a cost table is asked for only when one is needed.
#include "memory/plan_sources.h"

#include <catch2/catch.hpp>

using namespace omnibal;
using memory::RecomputeSource;
using memory::SplitSource;
using partition::Partition;
using partition::UnitKind;

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
  const UnitKind kinds[] = {UnitKind::VitEmbed,  UnitKind::VitBlock, UnitKind::VitBlock,
                            UnitKind::Projector, UnitKind::LlmEmbed, UnitKind::LlmBlock,
                            UnitKind::LlmBlock,  UnitKind::LlmBlock, UnitKind::LlmBlock,
                            UnitKind::Head};
  for (size_t u = 0; u < kNames.size(); ++u) {
    const double fwd = kinds[u] == UnitKind::VitBlock ? 10 : 1;
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
  in.options.memory.zero1 = false;
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
  stored.partition = Partition{{2, 8}};
  stored.unit_names = kNames;
  stored.micro_batches = 4;
  stored.recompute = memory::RecomputeFlags::none(10);
  r = request("balanced", "adaptive");
  r.stored = &stored;
  CHECK(memory::split_source(r) == SplitSource::kCheckpoint);
  CHECK(memory::recompute_source(r, SplitSource::kCheckpoint, stored.partition) ==
        RecomputeSource::kCheckpoint);
  // Another split (the config's) or another m: the flags are planned again.
  CHECK(memory::recompute_source(r, SplitSource::kConfig, Partition{{5, 5}}) ==
        RecomputeSource::kPlanner);
  r.micro_batches = 2;
  CHECK(memory::recompute_source(r, SplitSource::kCheckpoint, stored.partition) ==
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
