#include "train/init_weights.h"

#include "checkpoint/hf_import.h"
#include "checkpoint/hf_style.h"
#include "core/error.h"

namespace omnibal::train {

int64_t init_stage_weights(const ModelConfig& model, const ModelPreset& preset,
                           const std::vector<models::UnitPtr>& units) {
  OMNIBAL_CHECK(model.hf_style != HfStyle::kAuto,
                "init_stage_weights: model.hf_style is still auto (resolve_run_config settles it)");
  if (model.init_from.empty()) return 0;
  return checkpoint::load_pretrained(units, preset, model.init_from, model.allow_missing,
                                     checkpoint::resolve_hf_style(model.hf_style, model.init_from))
      .loaded;
}

}  // namespace omnibal::train
