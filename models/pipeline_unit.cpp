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

void PipelineUnit::expect_phase(const UnitState& state, Phase expected) const {
  OMNIBAL_CHECK(state.phase == expected, unit_name_, ": expected a state in phase '",
                phase_name(expected), "', got '", phase_name(state.phase),
                "' (units must run in model order)");
}

}  // namespace omnibal::models
