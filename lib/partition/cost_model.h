// The interface the partition search and the simulator use to cost a micro-batch: given a
// load, the per-unit cost table. Two implementations: AnalyticCostModel (FLOPs and bytes from a
// preset and a device, analytic_cost_model.h) and ScaledTableCostModel (a profiled table at one
// reference load, scaled linearly to other loads; below).
#pragma once

#include "partition/micro_batch_load.h"
#include "partition/unit_cost_table.h"

namespace omnibal::partition {

/// Costs every pipeline unit for one micro-batch.
class CostModel {
 public:
  virtual ~CostModel() = default;
  /// The per-unit costs of one micro-batch with `load`.
  virtual UnitCostTable costs(const MicroBatchLoad& load) const = 0;
};

/// A measured table scaled to other loads: ViT units (vit_embed, vit_block, projector) in
/// proportion to tiles, LLM units in proportion to computed tokens. This ignores the quadratic
/// attention term, which is small for packs of a few thousand tokens; the analytic model keeps it.
/// TP all-reduce bytes scale the same way (their buffers are [tokens, ...]), their calls do not;
/// the table's tp is kept.
class ScaledTableCostModel : public CostModel {
 public:
  /// Throws omnibal::Error when the reference load has no tiles or no tokens.
  explicit ScaledTableCostModel(UnitCostTable reference);
  UnitCostTable costs(const MicroBatchLoad& load) const override;

 private:
  UnitCostTable reference_;
};

/// `table` scaled by ScaledTableCostModel to `load.tiles` tiles and `load.tokens` computed
/// tokens over max(1, load.samples) samples; `table` itself when its load already has those
/// tiles and tokens. Throws omnibal::Error when `table`'s load has no tiles or no tokens.
UnitCostTable table_at_load(const UnitCostTable& table, const TableLoad& load);

}  // namespace omnibal::partition
