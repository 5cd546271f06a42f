#include "partition/cost_model.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace omnibal::partition {

ScaledTableCostModel::ScaledTableCostModel(UnitCostTable reference)
    : reference_(std::move(reference)) {
  OMNIBAL_CHECK(reference_.load.tiles > 0 && reference_.load.tokens > 0,
                "scaled cost table: the reference load needs tiles > 0 and tokens > 0, got ",
                reference_.load.tiles, " tiles and ", reference_.load.tokens, " tokens");
}

UnitCostTable ScaledTableCostModel::costs(const MicroBatchLoad& load) const {
  UnitCostTable t = reference_;
  const double vit = static_cast<double>(load.tiles()) / reference_.load.tiles;
  const double llm = static_cast<double>(load.computed_tokens()) / reference_.load.tokens;
  for (auto& u : t.units) {
    const double f = is_vision(u.kind) ? vit : llm;
    u.forward_s *= f;
    u.backward_s *= f;
    u.activation_bytes *= f;
    if (u.backward_weight_s) *u.backward_weight_s *= f;
    if (u.weight_grad_bytes) *u.weight_grad_bytes *= f;
    if (u.checkpointed_forward_s) *u.checkpointed_forward_s *= f;
    if (u.checkpointed_backward_s) *u.checkpointed_backward_s *= f;
    u.output_bytes *= f;
    u.tp_all_reduce.forward_bytes *= f;  // every TP buffer is [tokens, ...]; calls stay
    u.tp_all_reduce.backward_bytes *= f;
  }
  t.load = {load.tiles(), load.computed_tokens(), load.samples(), load.attention_square_sum()};
  return t;
}

UnitCostTable table_at_load(const UnitCostTable& table, const TableLoad& load) {
  if (table.load.tiles == load.tiles && table.load.tokens == load.tokens) return table;
  const auto k = static_cast<size_t>(std::max<int64_t>(1, load.samples));
  std::vector<int32_t> tiles(k, 0), tokens(k, 0);
  tiles[0] = static_cast<int32_t>(load.tiles);  // only the sums matter to the scaled model
  tokens[0] = static_cast<int32_t>(load.tokens);
  return ScaledTableCostModel(table).costs(MicroBatchLoad::packed(tiles, tokens));
}

}  // namespace omnibal::partition
