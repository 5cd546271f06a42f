// model.init_from at trainer start-up: a fresh run (no checkpoint resumed) initialises this
// pipeline stage's units from a Hugging Face InternVL checkpoint with
// checkpoint::load_pretrained, which maps only the shard files holding these units. The LLM
// naming comes from model.hf_style, settled before the trainer by resolve_run_config
// (train/run_config.h: auto = the directory's config.json) and saved with every checkpoint so
// that `omnibal-plan export` writes the same naming back. Missing / unexpected / mismatched tensors are refused, listed, unless
// covered by model.allow_missing globs.
// When a checkpoint is resumed the trainer does not call this: the checkpoint wins and
// init_from is ignored (with a log line).
// Not here: optimizer state (a fine-tune starts AdamW's moments at zero), the resume path
// (train_checkpoint.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.h"
#include "core/model_preset.h"
#include "models/pipeline_unit.h"

namespace omnibal::train {

/// When model.init_from is set, loads `units` (this stage's units of `preset`) from it under
/// model.hf_style, which must be resolved (not auto). Returns the number of parameters loaded
/// (0 without init_from). Throws omnibal::Error naming the key, the file or every offending
/// tensor.
int64_t init_stage_weights(const ModelConfig& model, const ModelPreset& preset,
                           const std::vector<models::UnitPtr>& units);

}  // namespace omnibal::train
