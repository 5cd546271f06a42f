// ZeRO-3 memory against the memory model (issue 40): tiny preset, one stage (PP 1) at DP 2, with
// FullShard attached to the units (prefetch on, as comm.overlap's default), in fp32 and bf16,
// without and with recomputation. Per rank, the counted static bytes (shards, gradient
// accumulator, master weights and moments) and the counted peak of a forward + backward are
// within 10 % of lib/memory's prediction with the trainer's accounting for train.shard full
// (memory::trainer_memory_options: weights, gradients and state / DP, plus the unsharded units in
// flight). The counter (lib/profile) sees tensors only: no workspace.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <string>

#include "../comm/mpi_test_support.h"
#include "core/model_preset.h"
#include "memory/memory_model.h"
#include "memory/recompute_planner.h"
#include "models/vlm.h"
#include "partition/stage_partition.h"
#include "profile/memory_meter.h"
#include "profile/stage_memory_probe.h"
#include "profile/unit_profiler.h"
#include "train/full_shard.h"

using namespace omnibal;

TEST_CASE("ZeRO-3 at DP 2: counted static and peak bytes per rank within 10 % of the model",
          "[train][mpi][full_shard][memory]") {
  auto world = comm::testing::world_comm();
  REQUIRE(world->size() == 2);
  torch::set_num_threads(1);
  const auto combination = GENERATE(table<Precision, bool>(
      {{Precision::kFp32, false}, {Precision::kFp32, true}, {Precision::kBf16, false}}));
  const Precision precision = std::get<0>(combination);
  const bool recompute = std::get<1>(combination);
  INFO(choice_name(precision) << (recompute ? ", every unit recomputed" : ", no recompute"));
  const torch::Dtype dtype = train::precision_dtype(precision);
  const auto preset = load_model_preset("tiny");
  profile::ProfileOptions po;
  po.dtype = dtype;
  po.pack = {32, 224, 4, 3, -1};
  po.warmup = 0;
  po.repeats = 1;
  po.checkpointed = false;
  const auto table = profile::profile_units(preset, po).table;
  const int units = static_cast<int>(table.units.size());
  const auto split = partition::Partition::from_boundaries({}, units);

  memory::RecomputeOptions ro;
  ro.memory = memory::trainer_memory_options(precision, ShardMode::kFull, 2);
  ro.memory.workspace_bytes = 0;
  ro.micro_batches = 2;
  ro.budget_bytes = 1.0;  // any: the plan below is fixed
  const auto plan = recompute ? memory::plan_full_recompute(table, split, ro)
                              : memory::plan_no_recompute(table, split, ro);

  models::VlmOptions vo;
  vo.with_img_context_id(profile::profiling_img_context_id(preset, po.pack))
      .with_seed(0)
      .with_dtype(dtype);
  std::vector<models::PackBatch> packs;
  for (uint64_t seed = 10; seed < 12; ++seed) {
    auto pack_options = po.pack;
    pack_options.seed = seed + 10 * world->rank();  // each DP rank its own data
    packs.push_back(profile::make_profiling_pack(preset, pack_options));
  }
  profile::StageProbe probe;
  probe.preset = preset;
  probe.options = vo;
  probe.begin = 0;
  probe.end = units;
  probe.recompute = plan.recompute;
  probe.in_flight = 1;  // PP 1: one micro-batch in flight
  probe.inputs = profile::stage_inputs(preset, vo, 0, packs);
  std::unique_ptr<train::FullShard> shard;
  probe.on_built = [&](const std::vector<models::UnitPtr>& built) {
    train::OptimizerOptions oo;
    oo.precision = precision;
    oo.overlap = true;
    shard = std::make_unique<train::FullShard>(built, oo, world.get(),
                                               train::DpShard{world->rank(), 2});
    shard->attach();
  };
  const auto measured = profile::probe_stage_memory(probe);
  REQUIRE(shard);
  CHECK(shard->prefetches() > 0);
  const memory::StageMemory& predicted = plan.memory[0];
  INFO("counted static " << measured.static_bytes << " B, peak " << measured.peak_bytes
                         << " B; predicted static " << predicted.static_bytes() << " B, total "
                         << predicted.total() << " B (activations " << predicted.activations
                         << ", transient " << predicted.transient << ", gathered "
                         << predicted.gathered << ")");
  // Between computations nothing is gathered: the model's static bytes less `gathered`.
  const double resting = predicted.static_bytes() - predicted.gathered;
  CHECK(std::abs(measured.static_bytes - resting) <= 0.10 * resting);
  CHECK(std::abs(measured.peak_bytes - predicted.total()) <= 0.10 * predicted.total());
}

TEST_CASE("ZeRO-3 builds a stage unit by unit: the build never holds the model whole",
          "[train][mpi][full_shard][memory]") {
  auto world = comm::testing::world_comm();
  REQUIRE(world->size() == 2);
  const auto preset = load_model_preset("tiny");
  const int64_t n = unit_count(preset);
  int64_t whole = 0, largest = 0;  // parameter bytes (fp32) of the model and of its largest unit
  for (const int64_t c : models::unit_parameter_counts(preset)) {
    whole += 4 * c;
    largest = std::max(largest, 4 * c);
  }
  models::VlmOptions vo;
  vo.with_img_context_id(7).with_seed(0).with_dtype(torch::kFloat32);
  profile::MemoryMeter meter(torch::kCPU);
  train::FullShard shard(train::OptimizerOptions{}, world.get(), {world->rank(), 2});
  const auto state = [&] {
    const train::ShardBytes b = shard.resident_bytes();
    return b.params + b.grads + b.optimizer;
  };
  // Whole parameters alive as each unit is completed (before it is sharded): that unit only. A
  // build of the whole stage first (FullShard's other constructor) has every unit built so far.
  int64_t most_whole = 0, units_built = 0;
  const auto chunks = models::make_chunk_units(preset, vo, {{0, n}}, [&](const models::UnitPtr& u) {
    most_whole = std::max(most_whole, meter.current_bytes() - state());
    shard.add_unit(u);
    ++units_built;
  });
  INFO("model " << whole << " B, largest unit " << largest << " B; most whole parameter bytes "
                << "alive during the build " << most_whole << " B; build peak "
                << meter.peak_bytes() << " B, held after " << meter.current_bytes() << " B");
  CHECK(units_built == n);
  CHECK(most_whole <= largest + 4096);
  CHECK(most_whole < whole / 4);
  // Held: parameters, gradient accumulator, moments: 4 x half of the model (fp32, master = shard).
  CHECK(state() <= 4 * (whole / 2 + 64 * n));
  CHECK(meter.peak_bytes() <= meter.current_bytes() + 3 * largest);
}
