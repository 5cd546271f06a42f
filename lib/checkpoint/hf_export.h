// Exporting omnibal parameters (by their per-unit names, e.g. from a training checkpoint) as a
// Hugging Face InternVL-Chat checkpoint: model-0000k-of-0000n.safetensors shards (greedy in
// model order up to max_shard_bytes), model.safetensors.index.json and a config.json with
// InternVL's keys (vision_config, llm_config, downsample_ratio, ps_version "v2", ...) plus what
// training used that InternVL would otherwise default (HfTrainingSettings: dynamic tiling with
// its min/max tiles, the thumbnail, the chat template, the pad id).
// A tied head (llm.tie_embeddings) is written explicitly, as a copy of the embedding, with
// tie_word_embeddings false: InternVLChatConfig forces tie_word_embeddings = False, so a missing
// head would be initialised at random.
// Fused tensors are built through the name map (hf_name_map.h). Tensors whose names no unit
// uses (optimizer state, counters) are skipped and reported.
// Not here: the tokenizer files and InternVL's Python modeling code (the config has no auto_map;
// lib/checkpoint/README.md says how to load the export with InternVL's classes).
#pragma once

#include "checkpoint/hf_name_map.h"
#include "core/model_preset.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace omnibal::checkpoint {

/// What the model was trained with, written to config.json so that InternVL runs it the same way
/// (InternVLChatConfig defaults dynamic_image_size False, use_thumbnail False, max_dynamic_patch
/// 6; Phi3Config defaults pad_token_id 32000, out of range for small vocabularies). The export
/// command fills it from the checkpoint's config (data::sample_options) and tokenizer.
struct HfTrainingSettings {
  bool dynamic_image_size = true;  ///< omnibal always tiles dynamically (data/dynamic_tiling.h)
  bool use_thumbnail = true;       ///< data::TilingOptions::thumbnail
  int min_dynamic_patch = 1;       ///< data.min_tiles (tiles per sample, thumbnail aside)
  int max_dynamic_patch = 6;       ///< data.max_tiles
  /// omnibal's chat template (data.template); config.json gets the InternVL conversation
  /// template with the same format (internlm2-chat -> "internlm2-chat").
  std::string chat_template = "internlm2-chat";
  /// The tokenizer's pad id (data::SpecialTokens::pad: the model's pad, else unk, else 0); must
  /// be in [0, vocab_size). Packs are never padded, so no pad token was trained on.
  int64_t pad_token_id = 0;
  HfTrainingSettings& with_tiles(int min_tiles, int max_tiles) {
    min_dynamic_patch = min_tiles, max_dynamic_patch = max_tiles;
    return *this;
  }
  HfTrainingSettings& with_thumbnail(bool on) {
    use_thumbnail = on;
    return *this;
  }
  HfTrainingSettings& with_chat_template(std::string name) {
    chat_template = std::move(name);
    return *this;
  }
  HfTrainingSettings& with_pad_token_id(int64_t id) {
    pad_token_id = id;
    return *this;
  }
};

struct HfExportOptions {
  HfStyle style = HfStyle::kInternLm2;    ///< the LLM naming, resolved (not kAuto)
  HfTrainingSettings trained;             ///< written to config.json
  std::optional<torch::Dtype> dtype;      ///< cast every tensor; default keeps each dtype
  uint64_t max_shard_bytes = 5000000000;  ///< like transformers' "5GB"
  HfExportOptions& with_style(HfStyle s) {
    style = s;
    return *this;
  }
  HfExportOptions& with_dtype(torch::Dtype d) {
    dtype = d;
    return *this;
  }
  HfExportOptions& with_max_shard_bytes(uint64_t b) {
    max_shard_bytes = b;
    return *this;
  }
  HfExportOptions& with_trained(HfTrainingSettings t) {
    trained = std::move(t);
    return *this;
  }
};

struct HfExportReport {
  std::vector<std::string> files;    ///< shard file names written
  int64_t tensors = 0;               ///< Hugging Face tensors written
  uint64_t bytes = 0;                ///< tensor bytes written (the index's total_size)
  std::vector<std::string> ignored;  ///< input names no unit uses
};

/// Writes `tensors` (every parameter of every unit of `preset`, by omnibal name) to `out_dir`
/// (created). Throws omnibal::Error listing every missing parameter, or naming a bad
/// HfTrainingSettings value, before writing anything.
HfExportReport export_hf(const std::map<std::string, torch::Tensor>& tensors,
                         const ModelPreset& preset, const std::string& out_dir,
                         const HfExportOptions& options = {});

/// InternVL-Chat's config.json for `preset` (torch_dtype e.g. "bfloat16") trained with `trained`.
/// Throws omnibal::Error for a pad id outside [0, vocab_size), tiles outside 1 <= min <= max, a
/// chat template with no InternVL counterpart, or an unresolved style (kAuto).
nlohmann::json hf_config_json(const ModelPreset& preset, HfStyle style,
                              const std::string& torch_dtype,
                              const HfTrainingSettings& trained = {});

/// The InternVL conversation template (internvl/conversation.py) whose prompt format equals
/// omnibal's chat template `name` (data.template). Throws omnibal::Error for an unknown name.
std::string internvl_template_name(const std::string& name);

}  // namespace omnibal::checkpoint
