// The CUDA memory meter against the memory model for one pipeline stage: tiny preset in its
// CUDA dtype (bf16), PP = 2 with 4 micro-batches emulated in one process (stage 0, two
// micro-batches in flight), no recomputation. The per-unit table is profiled on the GPU, the
// planner predicts the stage's peak from it, and profile::probe_stage_memory measures the peak
// with the caching allocator's statistics. The CUDA meter counts every tensor on the device (the
// CPU meter only those allocated since it was installed), so the probe runs once to warm up
// (cuBLAS workspaces are allocated from the caching allocator) and the bytes live before the
// measured run are subtracted. Prints "MEMORY stage 0: predicted P B, measured M B" for
// scripts/gpu/check.sh's summary.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>

#include "core/model_preset.h"
#include "memory/memory_model.h"
#include "partition/stage_partition.h"
#include "profile/memory_meter.h"
#include "profile/profiling_pack.h"
#include "profile/stage_memory_probe.h"
#include "profile/unit_profiler.h"
#include "schedule/one_f_one_b.h"

using namespace omnibal;

TEST_CASE("CUDA memory meter: one stage's peak within 10% of the memory model", "[gpu][memory]") {
  REQUIRE(profile::cuda_memory_stats_available());
  const auto preset = load_model_preset("tiny");
  const torch::Device device(torch::kCUDA, 0);
  profile::ProfileOptions po;
  po.pack = {32, 224, 4, 3, -1};  // as tests/profile/memory_balance_test.cpp
  po.warmup = 1;
  po.repeats = 1;
  po.device = device;
  const auto table = profile::profile_units(preset, po).table;
  const int units = static_cast<int>(table.units.size());
  const int stages = 2, micro_batches = 4, stage = 0;
  const auto split = partition::Partition::from_boundaries({6}, units);
  const std::vector<bool> recompute(static_cast<size_t>(units), false);

  memory::MemoryOptions mo;  // what the probe holds: bf16 weights and gradients only
  mo.dp = 1;
  mo.shard = ShardMode::kNone;
  mo.weight_bytes_per_param = 2;
  mo.grad_bytes_per_param = 2;
  mo.optimizer_bytes_per_param = 0;
  mo.workspace_bytes = 0;
  const auto predicted = memory::stage_memory(table, split, stage, micro_batches, recompute, mo);

  models::VlmOptions vo;
  vo.with_img_context_id(profile::profiling_img_context_id(preset, po.pack))
      .with_seed(0)
      .with_device(device);
  std::vector<models::PackBatch> packs;
  for (uint64_t seed = 10; seed < 12; ++seed) {
    auto pack_options = po.pack;
    pack_options.seed = seed;
    packs.push_back(profile::make_profiling_pack(preset, pack_options));
  }
  profile::StageProbe probe;
  probe.preset = preset;
  probe.options = vo;
  probe.begin = split.begin(stage);
  probe.end = split.end(stage);
  probe.recompute = recompute;
  probe.in_flight = schedule::in_flight_micro_batches(stage, stages, micro_batches);
  probe.inputs = profile::stage_inputs(preset, vo, probe.begin, packs);
  (void)profile::probe_stage_memory(probe);  // warm-up: workspaces, allocator pools
  torch::cuda::synchronize();
  const int64_t before = profile::cuda_memory_stats(0).current_bytes;
  const auto measured = profile::probe_stage_memory(probe);
  const double peak = static_cast<double>(measured.peak_bytes - before);
  const double total = predicted.total();
  std::printf(
      "MEMORY stage %d: predicted %.0f B, measured %.0f B (static predicted %.0f, "
      "measured %lld; bytes live before %lld)\n",
      stage, total, peak, predicted.static_bytes(),
      static_cast<long long>(measured.static_bytes - before), static_cast<long long>(before));
  std::fflush(stdout);
  INFO("predicted " << total << " B (activations " << predicted.activations << ", transient "
                    << predicted.transient << "), measured " << peak << " B");
  CHECK(peak > 0);
  CHECK(std::abs(peak - total) <= 0.10 * total);
}
