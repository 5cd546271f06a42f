#include "models/pipeline_unit.h"

#include "core/error.h"

namespace omnibal::models {

Phase input_phase(UnitKind kind) {
  switch (kind) {
    case UnitKind::kVitEmbed: return Phase::kPixels;
    case UnitKind::kVitBlock:
    case UnitKind::kProjector: return Phase::kVit;
    case UnitKind::kLlmEmbed: return Phase::kProjected;
    case UnitKind::kLlmBlock:
    case UnitKind::kLlmHead: return Phase::kLlm;
  }
  OMNIBAL_FAIL("invalid UnitKind ", static_cast<int>(kind));
}

Phase output_phase(UnitKind kind) {
  switch (kind) {
    case UnitKind::kVitEmbed:
    case UnitKind::kVitBlock: return Phase::kVit;
    case UnitKind::kProjector: return Phase::kProjected;
    case UnitKind::kLlmEmbed:
    case UnitKind::kLlmBlock: return Phase::kLlm;
    case UnitKind::kLlmHead: return Phase::kLoss;
  }
  OMNIBAL_FAIL("invalid UnitKind ", static_cast<int>(kind));
}

int64_t PipelineUnit::num_parameters() const {
  int64_t total = 0;
  for (const auto& p : parameters()) total += p.numel();
  return total;
}

void PipelineUnit::set_dropout(double p) {
  OMNIBAL_CHECK(p >= 0.0 && p < 1.0, unit_name_, ": dropout must be in [0, 1), got ", p);
  dropout_ = p;
  name_hash_ = unit_name_hash(unit_name_);
}

torch::Tensor PipelineUnit::apply_dropout(const torch::Tensor& x, const UnitState& state,
                                          DropoutSite site) const {
  if (dropout_ == 0.0 || state.dropout_key == 0) return x;
  return counter_dropout(x, dropout_, state.dropout_key, name_hash_, site);
}

void PipelineUnit::expect_phase(const UnitState& state, Phase expected) const {
  OMNIBAL_CHECK(state.phase == expected, unit_name_, ": expected a state in phase '",
                phase_name(expected), "', got '", phase_name(state.phase),
                "' (units must run in model order)");
}

}  // namespace omnibal::models

namespace omnibal::models {

ShardSpec PipelineUnit::shard_spec(const std::string& local_name) const {
  const auto it = shards_.find(local_name);
  return it == shards_.end() || !tp_.active() ? ShardSpec{} : it->second;
}

void PipelineUnit::shard_parameters() {
  if (!tp_.active() || sharded_) return;
  sharded_ = true;
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters()) {
    const auto it = shards_.find(item.key());
    if (it == shards_.end()) continue;
    it->second.rows = item.value().size(it->second.dim);
    item.value().set_data(shard_of(item.value().detach(), it->second, tp_));
  }
}

}  // namespace omnibal::models
