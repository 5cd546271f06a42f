#include "models/pipeline_unit.h"

#include "core/error.h"

namespace omnibal::models {

const char* unit_kind_name(UnitKind kind) {
  switch (kind) {
    case UnitKind::kVitEmbed: return "vit_embed";
    case UnitKind::kVitBlock: return "vit_block";
    case UnitKind::kProjector: return "projector";
    case UnitKind::kLlmEmbed: return "llm_embed";
    case UnitKind::kLlmBlock: return "llm_block";
    case UnitKind::kLlmHead: return "llm_head";
  }
  return "unknown";
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
