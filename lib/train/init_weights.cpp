#include "train/init_weights.h"

#include "checkpoint/hf_import.h"
#include "checkpoint/hf_style.h"

namespace omnibal::train {

int64_t init_stage_weights(ModelConfig& model, const ModelPreset& preset,
                           const std::vector<models::UnitPtr>& units) {
  const checkpoint::HfLlmStyle style = checkpoint::resolve_hf_style(model.hf_style, model.init_from);
  model.hf_style = checkpoint::config_hf_style(style);
  if (model.init_from.empty()) return 0;
  return checkpoint::load_pretrained(units, preset, model.init_from, model.allow_missing, style).loaded;
}

}  // namespace omnibal::train
