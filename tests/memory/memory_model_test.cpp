#include "memory/memory_model.h"

#include <catch2/catch.hpp>

#include "core/error.h"

using namespace omnibal;
using partition::UnitKind;

namespace {
/// vit_embed (frozen), two ViT blocks, one LLM block; bytes chosen for easy arithmetic.
partition::UnitCostTable table() {
  partition::UnitCostTable t;
  t.units = {{"vit_embed", UnitKind::VitEmbed, 0.1, 0.0, 100, 1000, false, 10},
             {"vit_block.0", UnitKind::VitBlock, 1.0, 2.0, 200, 2000, true, 20},
             {"vit_block.1", UnitKind::VitBlock, 1.0, 2.0, 300, 2000, true, 30},
             {"llm_block.0", UnitKind::LlmBlock, 2.0, 4.0, 500, 4000, true, 40}};
  return t;
}
}  // namespace

TEST_CASE("memory model: hand-computed stage memory", "[memory]") {
  const auto t = table();
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
