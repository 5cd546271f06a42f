// Memory balance: tiny preset, PP = 2 emulated in one process, a budget low enough to force a
// mixed recompute plan chosen by lib/memory's adaptive planner from a table profiled in the
// run's precision; for fp32 / bf16 x ZeRO-1 off / on (DP rank 0 of 2), with the trainer's
// optimizer allocated in the stage (main gradient, master weights, moments), each stage's
// static bytes (weights, gradients, optimizer state) and its counted peak are within 10% of the
// prediction made with the trainer's accounting (memory::trainer_memory_options), and the peak
// stays within the budget. (Measured: within 2.2% in fp32, 1.5% in bf16. Before bf16 stages
// took their pixels in bf16, stage 0 kept an fp32 copy per micro-batch in flight that no unit's
// profile sees: +18%.)
// ZB-V (two chunks per rank in a V, deferred W's): each rank's counted peak while walking its own
// list (profile/program_memory_probe.h) within 10% of lib/memory's per-rank model, with no,
// full and mixed recomputation (a recomputed block's W runs in its B, a kept block's waits).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <string>

#include "core/model_preset.h"
#include "memory/memory_model.h"
#include "memory/recompute_planner.h"
#include "partition/analytic_cost_model.h"
#include "partition/device_spec.h"
#include "profile/program_memory_probe.h"
#include "profile/stage_memory_probe.h"
#include "profile/unit_profiler.h"
#include "schedule/one_f_one_b.h"
#include "schedule/schedules.h"
#include "train/distributed_optimizer.h"

using namespace omnibal;

namespace {

/// The trainer's accounting at DP 2 without workspace (the counter sees tensors only).
memory::MemoryOptions probe_options(Precision precision, bool zero1) {
  memory::MemoryOptions m =
      memory::trainer_memory_options(precision, zero1 ? ShardMode::kOptimizer : ShardMode::kNone,
                                     2);
  m.workspace_bytes = 0;
  return m;
}

}  // namespace

TEST_CASE(
    "memory balance: tiny PP=2, adaptive recompute from a profiled table fits and is predicted",
    "[profile][memory]") {
  torch::set_num_threads(1);  // deterministic allocation pattern
  const auto combination = GENERATE(table<Precision, bool>({{Precision::kFp32, false},
                                                            {Precision::kFp32, true},
                                                            {Precision::kBf16, false},
                                                            {Precision::kBf16, true}}));
  const Precision precision = std::get<0>(combination);  // plain locals: lambdas capture them
  const bool zero1 = std::get<1>(combination);
  INFO(choice_name(precision) << ", zero1 " << zero1);
  const torch::Dtype dtype = train::precision_dtype(precision);
  const auto preset = load_model_preset("tiny");
  profile::ProfileOptions po;
  po.dtype = dtype;
  po.pack = {32, 224, 4, 3, -1};  // Q_v 32 tiles (128 image tokens), Q_t 224 tokens, 4 samples
  po.warmup = 0;
  po.repeats = 1;
  po.checkpointed = false;  // every second analytic (below), recomputation included
  auto table = profile::profile_units(preset, po).table;
  // The adaptive plan minimises recompute seconds, and measured seconds vary between runs on a
  // shared machine; analytic seconds keep the chosen plan (hence the test) deterministic. The
  // bytes, which are what this test checks, are the profiled ones.
  const auto analytic = partition::AnalyticCostModel(preset, partition::device_spec("a100-80g"))
                            .costs(partition::MicroBatchLoad::packed({32}, {224}));
  for (size_t i = 0; i < table.units.size(); ++i) {
    table.units[i].forward_s = analytic.units[i].forward_s;
    table.units[i].backward_s = analytic.units[i].backward_s;
  }
  const int units = static_cast<int>(table.units.size());
  const int stages = 2, micro_batches = 4;
  const auto split =
      partition::Partition::from_boundaries({6}, units);  // ViT+projector+embed+1 | 3+head

  memory::RecomputeOptions ro;
  ro.memory = probe_options(precision, zero1);
  ro.micro_batches = micro_batches;
  ro.granularity_bytes = 4096;
  memory::RecomputeOptions any_budget = ro;
  any_budget.budget_bytes = 1.0;
  const auto none = memory::plan_no_recompute(table, split, any_budget);
  const auto full = memory::plan_full_recompute(table, split, any_budget);
  // Halfway between full and no recomputation on stage 0 (two micro-batches in flight), and
  // never below what full recomputation needs on either stage.
  ro.budget_bytes = std::max({0.5 * (none.memory[0].total() + full.memory[0].total()),
                              full.memory[0].total(), full.memory[1].total()});
  const auto plan = memory::plan_adaptive_recompute(table, split, ro);
  REQUIRE(plan.all_fit());
  int recomputed = 0, kept = 0;
  for (int u = 0; u < units; ++u)
    if (table.units[u].recomputable()) (plan.recompute[u] ? recomputed : kept) += 1;
  std::string flags;
  for (int u = 0; u < units; ++u) flags += plan.recompute[u] ? 'R' : '.';
  INFO("recomputed " << recomputed << ", kept " << kept << " (" << flags << ")");
  REQUIRE(recomputed > 0);  // a mixed plan
  REQUIRE(kept > 0);

  models::VlmOptions vo;
  vo.with_img_context_id(profile::profiling_img_context_id(preset, po.pack))
      .with_seed(0)
      .with_dtype(dtype);
  std::vector<models::PackBatch> packs;
  for (uint64_t seed = 10; seed < 12; ++seed) {
    auto pack_options = po.pack;
    pack_options.seed = seed;  // same load, other lengths and values
    packs.push_back(profile::make_profiling_pack(preset, pack_options));
  }
  for (int s = 0; s < stages; ++s) {
    profile::StageProbe probe;
    probe.preset = preset;
    probe.options = vo;
    probe.begin = split.begin(s);
    probe.end = split.end(s);
    probe.recompute = plan.recompute;
    probe.in_flight = schedule::in_flight_micro_batches(s, stages, micro_batches);
    probe.inputs = profile::stage_inputs(preset, vo, probe.begin, packs);
    std::unique_ptr<train::DistributedOptimizer> optimizer;
    probe.on_built = [&](const std::vector<models::UnitPtr>& units) {
      train::DistributedOptimizer::NamedParams params;
      for (const auto& u : units)
        for (const auto& np : u->named_parameters()) params.emplace_back(np.key(), np.value());
      train::OptimizerOptions oo;
      oo.precision = precision;
      oo.zero1 = zero1;
      optimizer =
          std::make_unique<train::DistributedOptimizer>(params, oo, nullptr, train::DpShard{0, 2});
    };
    const auto measured = profile::probe_stage_memory(probe);
    REQUIRE(optimizer);
    const int64_t params = static_cast<int64_t>(optimizer->main_grad_bytes() / 4);
    CHECK(optimizer->state_bytes() ==
          static_cast<int64_t>(params * ro.memory.optimizer_bytes_per_param / (zero1 ? 2 : 1)));
    const double predicted = plan.memory[s].total();
    INFO("stage " << s << ": counted peak " << measured.peak_bytes << " B (static "
                  << measured.static_bytes << "), predicted " << predicted << " B (static "
                  << plan.memory[s].static_bytes() << ", activations " << plan.memory[s].activations
                  << ", transient " << plan.memory[s].transient << "), budget " << ro.budget_bytes
                  << " B");
    // Weights, gradients and optimizer state, counted after the warm-up, as predicted.
    CHECK(std::abs(measured.static_bytes - plan.memory[s].static_bytes()) <=
          0.10 * plan.memory[s].static_bytes());
    CHECK(measured.peak_bytes <= ro.budget_bytes);
    CHECK(std::abs(measured.peak_bytes - predicted) <= 0.10 * predicted);
  }
}

TEST_CASE("memory balance: tiny PP=2 under ZB-V, each rank's counted peak is predicted",
          "[profile][memory]") {
  torch::set_num_threads(1);  // deterministic allocation pattern
  const auto preset = load_model_preset("tiny");
  profile::ProfileOptions po;
  po.dtype = torch::kFloat32;
  po.pack = {32, 224, 4, 3, -1};  // as above
  po.warmup = 0;
  po.repeats = 1;
  po.checkpointed = false;
  po.split_backward = true;  // W's bytes: what a deferred W keeps
  const auto table = profile::profile_units(preset, po).table;
  const int units = static_cast<int>(table.units.size());  // 10
  const int stages = 2, micro_batches = 4;
  // Virtual stages [0,3) [3,6) [6,8) [8,10) on ranks 0 1 1 0.
  const auto split = partition::Partition::from_boundaries({3, 6, 8}, units);
  const std::string mode = GENERATE("none", "full", "mixed");
  INFO("recompute " << mode);
  std::vector<bool> flags(units, false);
  for (int u = 0; u < units; ++u) {
    const bool block = table.units[u].recomputable();
    flags[u] = block && (mode == "full" || (mode == "mixed" && u % 2 == 0));
  }
  memory::RecomputeOptions ro;
  ro.memory = probe_options(Precision::kFp32, false);
  ro.micro_batches = micro_batches;
  ro.schedule = PipelineSchedule::kZbV;
  ro.budget_bytes = 1.0;  // only the prediction is used
  const auto plan = memory::plan_with_flags(table, split, flags, ro);
  REQUIRE(plan.memory.size() == 2);

  models::VlmOptions vo;
  vo.with_img_context_id(profile::profiling_img_context_id(preset, po.pack)).with_seed(0);
  std::vector<models::PackBatch> packs;
  for (uint64_t seed = 10; seed < 10 + micro_batches; ++seed) {
    auto pack_options = po.pack;
    pack_options.seed = seed;  // same load, other lengths and values
    packs.push_back(profile::make_profiling_pack(preset, pack_options));
  }
  const auto programs = schedule::build_schedule(PipelineSchedule::kZbV, stages, micro_batches);
  for (int s = 0; s < stages; ++s) {
    profile::ProgramProbe probe;
    probe.preset = preset;
    probe.options = vo;
    for (int c = 0; c < 2; ++c) {
      const int k = schedule::virtual_stage(c, s, stages, schedule::ChunkLayout::kV);
      probe.chunks.emplace_back(split.begin(k), split.end(k));
      probe.inputs.push_back(profile::stage_inputs(preset, vo, split.begin(k), packs));
    }
    probe.recompute = flags;
    probe.program = programs[s];
    probe.defer_recomputed = false;  // ZB-V: a recomputed block's W in its B
    std::unique_ptr<train::DistributedOptimizer> optimizer;
    probe.on_built = [&](const std::vector<models::UnitPtr>& built) {
      train::DistributedOptimizer::NamedParams params;
      for (const auto& u : built)
        for (const auto& np : u->named_parameters())
          params.emplace_back(u->unit_name() + "." + np.key(), np.value());
      train::OptimizerOptions oo;
      oo.precision = Precision::kFp32;
      optimizer =
          std::make_unique<train::DistributedOptimizer>(params, oo, nullptr, train::DpShard{0, 2});
    };
    const auto measured = profile::probe_program_memory(probe);
    REQUIRE(optimizer);
    const memory::StageMemory& m = plan.memory[s];
    INFO("rank " << s << ": counted peak " << measured.peak_bytes << " B (static "
                 << measured.static_bytes << "), predicted " << m.total() << " B (static "
                 << m.static_bytes() << ", activations " << m.activations << ", transient "
                 << m.transient << ")");
    CHECK(std::abs(measured.static_bytes - m.static_bytes()) <= 0.10 * m.static_bytes());
    CHECK(std::abs(measured.peak_bytes - m.total()) <= 0.10 * m.total());
  }
}
