#include "checkpoint/hf_export.h"

#include "checkpoint/durable_file.h"
#include "checkpoint/hf_checkpoint_dir.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

namespace omnibal::checkpoint {
namespace fs = std::filesystem;
namespace {

std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return buf;
}

}  // namespace

std::string internvl_template_name(const std::string& name) {
  // internvl/conversation.py "internlm2-chat": system "<|im_start|>system\n{msg}", roles
  // "<|im_start|>user\n" / "<|im_start|>assistant\n", each turn closed by "<|im_end|>" with no
  // newline (SeparatorStyle.MPT), which is what data/chat_template.cpp renders ("internvl2_5"
  // adds a newline after <|im_end|>, "phi3-chat" uses <|user|> / <|end|>).
  if (name == "internlm2-chat") return "internlm2-chat";
  OMNIBAL_FAIL("data.template \"", name,
               "\": no InternVL conversation template is known to match it ",
               "(known: internlm2-chat)");
}

namespace {

void check_trained(const ModelPreset& preset, const HfTrainingSettings& trained) {
  OMNIBAL_CHECK(trained.pad_token_id >= 0 && trained.pad_token_id < preset.llm.vocab_size,
                "export: pad_token_id ", trained.pad_token_id, " is not a token of preset ",
                preset.name, " (vocab_size ", preset.llm.vocab_size,
                "); give the tokenizer's pad id");
  OMNIBAL_CHECK(trained.min_dynamic_patch >= 1 &&
                    trained.min_dynamic_patch <= trained.max_dynamic_patch,
                "export: expected 1 <= min_dynamic_patch <= max_dynamic_patch (data.min_tiles / "
                "data.max_tiles), got ",
                trained.min_dynamic_patch, " and ", trained.max_dynamic_patch);
}

/// InternVisionModel's vision_config.
nlohmann::json vision_config_json(const VitPreset& v, const std::string& torch_dtype) {
  const char* norm_type = "";
  switch (v.norm) {
    case VitNorm::kLayerNorm: norm_type = "layer_norm"; break;
    case VitNorm::kRmsNorm: norm_type = "rms_norm"; break;
  }
  return {{"architectures", {"InternVisionModel"}},
          {"model_type", "intern_vit_6b"},
          {"hidden_size", v.width},
          {"num_hidden_layers", v.depth},
          {"num_attention_heads", v.heads},
          {"intermediate_size", v.mlp_dim},
          {"image_size", v.tile_size},
          {"patch_size", v.patch_size},
          {"qkv_bias", v.qkv_bias},
          {"qk_normalization", v.qk_norm},
          {"norm_type", norm_type},
          {"layer_norm_eps", 1e-6},
          {"hidden_act", "gelu"},
          {"num_channels", 3},
          {"use_flash_attn", false},
          {"drop_path_rate", 0.0},
          {"torch_dtype", torch_dtype}};
}

/// The llm_config of `style`, with the architecture names hf_style.h reads back (Phi-3 is the
/// fused-LLaMA family InternVL uses). Throws omnibal::Error for an unresolved style (kAuto).
nlohmann::json llm_config_json(const LlmPreset& l, HfStyle style, const std::string& torch_dtype,
                               int64_t pad_token_id) {
  const char* arch = "";
  const char* type = "";
  switch (style) {
    case HfStyle::kInternLm2:
      arch = "InternLM2ForCausalLM";
      type = "internlm2";
      break;
    case HfStyle::kLlama:
      arch = "LlamaForCausalLM";
      type = "llama";
      break;
    case HfStyle::kLlamaFused:
      arch = "Phi3ForCausalLM";
      type = "phi3";
      break;
    case HfStyle::kAuto: OMNIBAL_FAIL("export: the LLM naming must be resolved, not auto");
  }
  // tie_word_embeddings is false even for a tied preset: InternVLChatConfig forces it, and the
  // export writes the head as its own tensor. pad_token_id becomes nn.Embedding's padding_idx.
  nlohmann::json llm = {
      {"architectures", {arch}},        {"model_type", type},
      {"hidden_size", l.width},         {"num_hidden_layers", l.depth},
      {"num_attention_heads", l.heads}, {"num_key_value_heads", l.kv_heads},
      {"intermediate_size", l.mlp_dim}, {"vocab_size", l.vocab_size},
      {"rope_theta", l.rope_theta},     {"max_position_embeddings", l.max_seq_len},
      {"rms_norm_eps", l.norm_eps},     {"tie_word_embeddings", false},
      {"pad_token_id", pad_token_id},   {"hidden_act", "silu"},
      {"torch_dtype", torch_dtype}};
  if (style == HfStyle::kInternLm2) llm["bias"] = false;
  return llm;
}

}  // namespace

nlohmann::json hf_config_json(const ModelPreset& preset, HfStyle style,
                              const std::string& torch_dtype, const HfTrainingSettings& trained) {
  check_trained(preset, trained);
  // system_message "": omnibal trains without a system turn (data/chat_template.h); without the
  // key InternVL would prepend its template's default system message.
  return {{"architectures", {"InternVLChatModel"}},
          {"model_type", "internvl_chat"},
          {"downsample_ratio", preset.projector.downsample_ratio},
          {"force_image_size", preset.vit.tile_size},
          {"ps_version", "v2"},
          {"select_layer", -1},
          {"template", internvl_template_name(trained.chat_template)},
          {"system_message", ""},
          {"dynamic_image_size", trained.dynamic_image_size},
          {"use_thumbnail", trained.use_thumbnail},
          {"min_dynamic_patch", trained.min_dynamic_patch},
          {"max_dynamic_patch", trained.max_dynamic_patch},
          {"tie_word_embeddings", false},
          {"torch_dtype", torch_dtype},
          {"vision_config", vision_config_json(preset.vit, torch_dtype)},
          {"llm_config", llm_config_json(preset.llm, style, torch_dtype, trained.pad_token_id)},
          {"omnibal",
           {{"preset", preset.name},
            {"llm_style", choice_name(style)},
            {"tie_embeddings", preset.llm.tie_embeddings}}}};
}

namespace {

/// The Hugging Face tensors of an export, in model order, and the input names they use.
struct ExportPlan {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::set<std::string> used;
};

/// Fuses `tensors` into the Hugging Face tensors of `preset`. A tied head maps to the
/// embedding's name, which is planned first; the head is then written as its own tensor with
/// the same values (see the header). Throws omnibal::Error listing every missing parameter.
ExportPlan plan_export(const std::map<std::string, torch::Tensor>& tensors,
                       const ModelPreset& preset, const std::string& out_dir,
                       const HfExportOptions& options) {
  ExportPlan plan;
  auto& planned = plan.tensors;
  std::set<std::string> written;
  std::vector<std::string> missing;
  for (const auto& m : hf_mappings(preset, options.style)) {
    if (written.count(m.hf_name)) {
      const auto embedding = std::find_if(planned.begin(), planned.end(),
                                          [&](const auto& p) { return p.first == m.hf_name; });
      if (m.parts[0] == "llm_head.output.weight" && embedding != planned.end()) {
        torch::Tensor t = embedding->second;
        planned.emplace_back(hf_lm_head_name(options.style), t);
        written.insert(hf_lm_head_name(options.style));
      }
      continue;
    }
    std::vector<torch::Tensor> parts;
    for (const auto& p : m.parts) {
      const auto it = tensors.find(p);
      if (it == tensors.end()) missing.push_back(p + " (for " + m.hf_name + ")");
      else parts.push_back(it->second), plan.used.insert(p);
    }
    if (parts.size() != m.parts.size()) continue;
    torch::Tensor t = fuse_for_hf(m, parts, preset.llm).detach();
    if (options.dtype) t = t.to(*options.dtype);
    planned.emplace_back(m.hf_name, t);
    written.insert(m.hf_name);
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += "\n  - " + m;
    OMNIBAL_FAIL("export to ", out_dir, ": ", missing.size(), " parameters of preset ", preset.name,
                 " are missing:", list);
  }
  return plan;
}

/// Greedy shards of `planned` in model order, each at most `max_bytes` unless one tensor is
/// larger; adds the tensor bytes to `total_bytes`.
std::vector<std::vector<size_t>> shard_layout(
    const std::vector<std::pair<std::string, torch::Tensor>>& planned, uint64_t max_bytes,
    uint64_t& total_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < planned.size(); ++i) {
    const uint64_t bytes =
        static_cast<uint64_t>(planned[i].second.numel()) * planned[i].second.element_size();
    if (!shards.back().empty() && shard_bytes + bytes > max_bytes)
      shards.emplace_back(), shard_bytes = 0;
    shards.back().push_back(i);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  return shards;
}

/// The config.json torch_dtype of the written tensors ("bfloat16", ...; float32 without any).
std::string config_torch_dtype(const std::vector<std::pair<std::string, torch::Tensor>>& planned) {
  const std::string dtype = planned.empty()
                                ? "float32"
                                : std::string(c10::toString(planned.front().second.scalar_type()));
  const std::map<std::string, std::string> torch_names{{"BFloat16", "bfloat16"},
                                                       {"Half", "float16"},
                                                       {"Float", "float32"},
                                                       {"Double", "float64"}};
  const auto it = torch_names.find(dtype);
  return it == torch_names.end() ? dtype : it->second;
}

}  // namespace

HfExportReport export_hf(const std::map<std::string, torch::Tensor>& tensors,
                         const ModelPreset& preset, const std::string& out_dir,
                         const HfExportOptions& options) {
  const ExportPlan plan = plan_export(tensors, preset, out_dir, options);
  const auto& planned = plan.tensors;
  const auto config_for = [&](const std::string& torch_dtype) {
    return hf_config_json(preset, options.style, torch_dtype, options.trained);
  };
  config_for("float32");  // a bad setting fails before anything is written
  HfExportReport report;
  for (const auto& [name, t] : tensors)
    if (!plan.used.count(name)) report.ignored.push_back(name);
  const auto shards = shard_layout(planned, options.max_shard_bytes, report.bytes);
  fs::create_directories(out_dir);
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = shard_name(k, shards.size());
    std::map<std::string, torch::Tensor> shard;
    for (const size_t i : shards[k]) {
      shard.emplace(planned[i].first, planned[i].second);
      weight_map[planned[i].first] = file;
    }
    write_safetensors((fs::path(out_dir) / file).string(), shard, {{"format", "pt"}});
    report.files.push_back(file);
  }
  report.tensors = static_cast<int64_t>(planned.size());
  const nlohmann::json index = {{"metadata", {{"total_size", report.bytes}}},
                                {"weight_map", weight_map}};
  write_text_file_durable((fs::path(out_dir) / HfCheckpointDir::kIndexFile).string(),
                          index.dump(2) + "\n");
  write_text_file_durable((fs::path(out_dir) / "config.json").string(),
                          config_for(config_torch_dtype(planned)).dump(2) + "\n");
  return report;
}

}  // namespace omnibal::checkpoint
