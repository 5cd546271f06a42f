// Initialising pipeline units from a Hugging Face InternVL checkpoint (model.init_from):
// every parameter of the given units is looked up through the name map (hf_name_map.h), split
// out of fused tensors (InternLM2 wqkv, LLaMA-fused qkv_proj / gate_up_proj) and copied into
// the parameter (cast to its dtype and device). Only the shard files holding these units'
// tensors are opened, so each pipeline stage reads only its own part.
// Missing tensors, unexpected tensors (in the checkpoint but used by no unit of the preset) and
// shape mismatches are all collected first and reported in one error; nothing is copied
// unless every problem is covered by an `allow_missing` glob (fnmatch) pattern, matched against
// the omnibal name or the Hugging Face name (e.g. "projector.*" for a fresh projector). Allowed
// parameters keep their initialisation. A tied preset (llm.tie_embeddings) takes its head from
// the embedding; a separate head tensor (as export_hf writes it) must then equal the embedding,
// else it is reported as unexpected.
// Not here: optimizer state (a fresh fine-tune starts it at zero), .bin checkpoints.
#pragma once

#include "checkpoint/hf_name_map.h"
#include "core/choices.h"
#include "core/model_preset.h"
#include "models/pipeline_unit.h"

#include <string>
#include <vector>

namespace omnibal::checkpoint {

/// What load_pretrained did. Entries read "<omnibal name> (<hf name>)" or "<hf name>: ...".
struct PretrainedLoadReport {
  HfStyle style = HfStyle::kInternLm2;    ///< as given, or detected from the checkpoint's names
  int64_t loaded = 0;                     ///< parameters set from the checkpoint
  std::vector<std::string> missing;       ///< allowed: parameters left at initialisation
  std::vector<std::string> unexpected;    ///< allowed: checkpoint tensors nobody uses
  std::vector<std::string> mismatched;    ///< allowed: shape mismatches, left at initialisation
  std::vector<std::string> opened_files;  ///< shard files this call mapped
};

/// Sets the parameters of `units` (a pipeline stage's units of `preset`, any contiguous range)
/// from the Hugging Face checkpoint in `dir`. `style`: the LLM naming (hf_style.h; the trainer
/// passes model.hf_style resolved from config.json); kAuto = detected from the tensor names.
/// Throws omnibal::Error listing every missing, unexpected and mismatched tensor not covered by
/// `allow_missing` (then no parameter changed), or when `style` contradicts the tensor names
/// (e.g. config.json says LlamaForCausalLM but the checkpoint holds attention.wqkv).
PretrainedLoadReport load_pretrained(const std::vector<models::UnitPtr>& units,
                                     const ModelPreset& preset, const std::string& dir,
                                     const std::vector<std::string>& allow_missing,
                                     HfStyle style = HfStyle::kAuto);

}  // namespace omnibal::checkpoint
