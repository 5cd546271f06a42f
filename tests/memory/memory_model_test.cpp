#include "memory/memory_model.h"

#include <catch2/catch.hpp>

#include "core/error.h"
#include "core/model_preset.h"
#include "partition/analytic_cost_model.h"

using namespace omnibal;
using omnibal::UnitKind;

namespace {
/// vit_embed (frozen), two ViT blocks, one LLM block; bytes chosen for easy arithmetic.
partition::UnitCostTable four_unit_table() {
  partition::UnitCostTable t;
  t.units = {{"vit_embed", UnitKind::kVitEmbed, 0.1, 0.0, 100, 1000, false, 10},
             {"vit_block.0", UnitKind::kVitBlock, 1.0, 2.0, 200, 2000, true, 20},
             {"vit_block.1", UnitKind::kVitBlock, 1.0, 2.0, 300, 2000, true, 30},
             {"llm_block.0", UnitKind::kLlmBlock, 2.0, 4.0, 500, 4000, true, 40}};
  return t;
}
}  // namespace

TEST_CASE("memory model: hand-computed stage memory", "[memory]") {
  const auto t = four_unit_table();
  const partition::Partition p{{2, 2}};
  memory::MemoryOptions o;
  o.dp = 4;
  o.workspace_bytes = 7;
  const std::vector<bool> none(4, false);
  // Stage 0 of 2 with m = 3: min(3, 2) = 2 micro-batches in flight.
  auto s0 = memory::stage_memory(t, p, 0, 3, none, o);
  CHECK(s0.weights == 3000);
  CHECK(s0.gradients == 1000 * 4);         // vit_embed frozen: only vit_block.0 (1000 params)
  CHECK(s0.optimizer == 1000 * 12 / 4.0);  // ZeRO-1 over dp = 4
  CHECK(s0.activations == 2 * (100 + 200));
  CHECK(s0.transient == 0);
  CHECK(s0.buffers == 2 * (0 + 20) + 7);
  CHECK(s0.total() == Approx(3000 + 4000 + 3000 + 600 + 47));
  // Stage 1 recomputes vit_block.1: keeps its input (20 bytes) instead of 300, plus 300 once.
  std::vector<bool> flags = {false, false, true, false};
  auto s1 = memory::stage_memory(t, p, 1, 3, flags, o);
  CHECK(s1.activations == 1 * (20 + 500));
  CHECK(s1.transient == 300);
  CHECK(s1.optimizer == 3000 * 12 / 4.0);
  CHECK(s1.buffers == 2 * (20 + 40) + 7);
  o.zero1 = false;
  CHECK(memory::stage_memory(t, p, 1, 3, flags, o).optimizer == 3000 * 12);
  CHECK_THROWS_AS(memory::stage_memory(t, p, 1, 3, {true}, o), Error);
  CHECK(memory::default_budget_bytes(80e9) == Approx(73.6e9));
}

TEST_CASE("memory model per TP rank: tiny preset, the replicated part counted by hand",
          "[memory][tp]") {
  const auto preset = load_model_preset("tiny");
  const auto load = partition::MicroBatchLoad::packed({2, 1}, {60, 40});
  const auto device = partition::device_spec("a100-80g");
  const auto t1 = partition::AnalyticCostModel(preset, device, 1).costs(load);
  const auto t2 = partition::AnalyticCostModel(preset, device, 2).costs(load);
  const partition::Partition whole{{10}};
  const std::vector<bool> none(10, false);
  const auto o1 = memory::trainer_memory_options(Precision::kBf16, true, 2, 1);
  const auto o2 = memory::trainer_memory_options(Precision::kBf16, true, 2, 2);
  CHECK(o2.tp == 2);
  const auto m1 = memory::stage_memory(t1, whole, 0, 1, none, o1);
  const auto m2 = memory::stage_memory(t2, whole, 0, 1, none, o2);
  // Parameters (tensor_parallel_test.cpp): 1,189,568 in all, of which R = 90,944 replicated
  // (vit_embed, projector, norms, row-parallel biases, layer scales); per TP rank at tp 2:
  // R + (all - R) / 2 = 640,256.
  const double all = 1189568, replicated = 90944, per_rank = replicated + (all - replicated) / 2;
  CHECK(per_rank == 640256);
  CHECK(m1.weights == 2 * all);
  CHECK(m2.weights == 2 * per_rank);
  CHECK(m2.gradients == 4 * per_rank);               // fp32 main (bf16 folded in the backward)
  CHECK(m2.optimizer == Approx(12 * per_rank / 2));  // ZeRO-1 over dp 2
  CHECK(m2.activations < m1.activations);
  CHECK(m2.buffers == m1.buffers);  // full activations travel between stages
  CHECK(m2.total() < m1.total());
  // A per-rank table with options of another tp is refused.
  CHECK_THROWS_WITH(memory::stage_memory(t2, whole, 0, 1, none, o1),
                    Catch::Contains("per rank of tp 2, the memory options have tp = 1"));
  CHECK_THROWS_WITH(memory::trainer_memory_options(Precision::kBf16, true, 2, 0),
                    Catch::Contains("tp must be >= 1"));
}
