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
  o.shard = ShardMode::kNone;
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
  const auto o1 = memory::trainer_memory_options(Precision::kBf16, ShardMode::kOptimizer, 2, 1);
  const auto o2 = memory::trainer_memory_options(Precision::kBf16, ShardMode::kOptimizer, 2, 2);
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
  CHECK_THROWS_WITH(memory::trainer_memory_options(Precision::kBf16, ShardMode::kOptimizer, 2, 0),
                    Catch::Contains("tp must be >= 1"));
}

TEST_CASE("memory model under ZeRO-3: 1/dp of the model state plus the gathered units in flight",
          "[memory][zero3]") {
  const auto t = four_unit_table();
  const partition::Partition whole{{4}};
  const std::vector<bool> none(4, false);
  memory::MemoryOptions o;
  o.workspace_bytes = 7;
  o.shard = ShardMode::kNone;
  const auto plain = memory::stage_memory(t, whole, 0, 1, none, o);
  // 9000 B of bf16 weights (4500 parameters); 4000 trainable parameters (vit_embed frozen):
  // fp32 gradients 16000 B, optimizer 48000 B.
  CHECK(plain.weights == 9000);
  CHECK(plain.gradients == 16000);
  CHECK(plain.optimizer == 48000);
  CHECK(plain.gathered == 0);
  CHECK(plain.buffers == 2 * (0 + 40) + 7);
  CHECK(plain.activations == 100 + 200 + 300 + 500);
  o.shard = ShardMode::kFull;
  // In flight, the largest moment is llm_block.0's backward: its 4000 B of parameters, its
  // fp32 gradient (2000 parameters x 4 B) and vit_block.1's 2000 B prefetched = 14000 B
  // (forwards hold at most vit_block.1 + llm_block.0 = 6000 B).
  const auto [dp, static_bytes] =
      GENERATE(table<int, double>({{1, 9000 + 16000 + 48000 + 87 + 14000},
                                   {2, 4500 + 8000 + 24000 + 87 + 14000},
                                   {4, 2250 + 4000 + 12000 + 87 + 14000}}));
  o.dp = dp;
  const auto full = memory::stage_memory(t, whole, 0, 1, none, o);
  CHECK(full.weights == 9000.0 / dp);
  CHECK(full.gradients == 16000.0 / dp);
  CHECK(full.optimizer == 48000.0 / dp);
  CHECK(full.gathered == 14000);
  CHECK(full.static_bytes() == static_bytes);
  CHECK(full.activations == plain.activations);  // activations are not sharded
  CHECK(full.total() == static_bytes + 1100);
  // Two stages: each holds its own units' largest moment. Stage 0: vit_block.0's backward
  // (2000 + 4000 + vit_embed's 1000); stage 1 as above.
  const partition::Partition two{{2, 2}};
  CHECK(memory::stage_memory(t, two, 0, 1, none, o).gathered == 7000);
  CHECK(memory::stage_memory(t, two, 1, 1, none, o).gathered == 14000);
  // A frozen unit gathers its parameters but has no gradient: llm_block.0 frozen leaves
  // vit_block.1's backward (2000 + 4000 + 2000) and the forward's 6000 as the largest.
  auto frozen = t;
  frozen.units[3].trainable = false;
  CHECK(memory::stage_memory(frozen, whole, 0, 1, none, o).gathered == 8000);
  CHECK(memory::gathered_unit_bytes(t, {3}, o) == 12000);
  // ZeRO-1 at the same dp divides only the optimizer state, as before.
  o.shard = ShardMode::kOptimizer;
  const auto z1 = memory::stage_memory(t, whole, 0, 1, none, o);
  CHECK(z1.weights == 9000);
  CHECK(z1.optimizer == 48000.0 / dp);
  CHECK(z1.gathered == 0);
  const auto trainer = memory::trainer_memory_options(Precision::kBf16, ShardMode::kFull, 4, 1);
  CHECK(trainer.shard == ShardMode::kFull);
  CHECK(trainer.dp == 4);
}
