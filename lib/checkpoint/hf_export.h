// Exporting omnibal parameters (by their per-unit names, e.g. from a training checkpoint) as a
// Hugging Face InternVL-Chat checkpoint: model-0000k-of-0000n.safetensors shards (greedy in
// model order up to max_shard_bytes), model.safetensors.index.json and a config.json with
// InternVL's keys (vision_config, llm_config, downsample_ratio, ps_version "v2", ...).
// Fused tensors are built through the name map (hf_name_map.h). Tensors whose names no unit
// uses (optimizer state, counters) are skipped and reported.
// Not here: the tokenizer files and InternVL's Python modeling code (copy them from the base
// model to load the export with transformers' trust_remote_code).
#pragma once

#include "checkpoint/hf_name_map.h"
#include "core/model_preset.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace omnibal::checkpoint {

struct HfExportOptions {
  HfLlmStyle style = HfLlmStyle::kInternLm2;
  std::optional<torch::Dtype> dtype;       ///< cast every tensor; default keeps each dtype
  uint64_t max_shard_bytes = 5000000000;   ///< like transformers' "5GB"
  HfExportOptions& with_style(HfLlmStyle s) { style = s; return *this; }
  HfExportOptions& with_dtype(torch::Dtype d) { dtype = d; return *this; }
  HfExportOptions& with_max_shard_bytes(uint64_t b) { max_shard_bytes = b; return *this; }
};

struct HfExportReport {
  std::vector<std::string> files;    ///< shard file names written
  int64_t tensors = 0;               ///< Hugging Face tensors written
  uint64_t bytes = 0;                ///< tensor bytes written (the index's total_size)
  std::vector<std::string> ignored;  ///< input names no unit uses
};

/// Writes `tensors` (every parameter of every unit of `preset`, by omnibal name) to `out_dir`
/// (created). Throws omnibal::Error listing every missing parameter, before writing anything.
HfExportReport export_hf(const std::map<std::string, torch::Tensor>& tensors, const ModelPreset& preset,
                         const std::string& out_dir, const HfExportOptions& options = {});

/// InternVL-Chat's config.json for `preset` (torch_dtype e.g. "bfloat16").
nlohmann::json hf_config_json(const ModelPreset& preset, HfLlmStyle style, const std::string& torch_dtype);

}  // namespace omnibal::checkpoint
