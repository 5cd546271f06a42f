#include "core/model_preset.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/paths.h"
#include "core/yaml_struct.h"

namespace omnibal {

int ModelPreset::vit_tokens_per_tile() const {
  const int side = vit.tile_size / vit.patch_size;
  return side * side + 1;
}

int ModelPreset::tokens_per_tile() const {
  const int side = vit.tile_size / vit.patch_size;
  const int shuffled = static_cast<int>(side * projector.downsample_ratio + 0.5);
  return shuffled * shuffled;
}

void ModelPreset::validate(const std::string& origin) const {
  auto positive = [&](const char* key, double v) {
    OMNIBAL_CHECK(v > 0, origin, ": ", key, ": expected a positive value, got ", v);
  };
  positive("vit.tile_size", vit.tile_size);
  positive("vit.patch_size", vit.patch_size);
  positive("vit.width", vit.width);
  positive("vit.depth", vit.depth);
  positive("vit.heads", vit.heads);
  positive("vit.mlp_dim", vit.mlp_dim);
  OMNIBAL_CHECK(vit.tile_size % (2 * vit.patch_size) == 0, origin,
                ": vit.tile_size: expected a multiple of 2 * patch_size (", 2 * vit.patch_size,
                ") for pixel shuffle, got ", vit.tile_size);
  OMNIBAL_CHECK(vit.width % vit.heads == 0, origin, ": vit.heads: expected a divisor of width ",
                vit.width, ", got ", vit.heads);
  OMNIBAL_CHECK(vit.mean.size() == 3 && vit.std.size() == 3, origin,
                ": vit.mean / vit.std: expected 3 values each");
  OMNIBAL_CHECK(
      projector.downsample_ratio == 0.5, origin,
      ": projector.downsample_ratio: only 0.5 (InternVL pixel shuffle v2) is supported, got ",
      projector.downsample_ratio);
  positive("llm.vocab_size", llm.vocab_size);
  positive("llm.width", llm.width);
  positive("llm.depth", llm.depth);
  positive("llm.heads", llm.heads);
  positive("llm.kv_heads", llm.kv_heads);
  positive("llm.mlp_dim", llm.mlp_dim);
  positive("llm.max_seq_len", llm.max_seq_len);
  OMNIBAL_CHECK(llm.width % llm.heads == 0, origin, ": llm.heads: expected a divisor of width ",
                llm.width, ", got ", llm.heads);
  OMNIBAL_CHECK(llm.heads % llm.kv_heads == 0, origin,
                ": llm.kv_heads: expected a divisor of heads ", llm.heads, ", got ", llm.kv_heads);
  OMNIBAL_CHECK((llm.width / llm.heads) % 2 == 0, origin,
                ": llm: head dimension must be even for rotary embeddings, got ",
                llm.width / llm.heads);
}

std::string model_preset_path(const std::string& name_or_path) {
  if (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".yaml")
    return name_or_path;
  return (std::filesystem::path(source_dir()) / "models" / "presets" / (name_or_path + ".yaml"))
      .string();
}

ModelPreset load_model_preset(const std::string& name_or_path) {
  const std::string path = model_preset_path(name_or_path);
  std::ifstream in(path);
  OMNIBAL_CHECK(in.good(), "model preset '", name_or_path, "': cannot open '", path,
                "' (presets live in models/presets/<name>.yaml)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(buffer.str());
  } catch (const YAML::Exception& e) {
    OMNIBAL_FAIL(path, ":", e.mark.line + 1, ": invalid YAML: ", e.msg);
  }
  OMNIBAL_CHECK(root.IsMap(), path, ": expected a mapping with name, vit, projector, llm");
  ModelPreset preset;
  yaml_struct::read_section(root, path, preset);
  if (preset.name.empty()) preset.name = std::filesystem::path(path).stem().string();
  preset.validate(path);
  return preset;
}

void check_tensor_parallel(const ModelPreset& preset, int tp) {
  OMNIBAL_CHECK(tp >= 1, "parallel.tp: expected >= 1, got ", tp);
  if (tp == 1) return;
  const struct {
    const char* key;
    int value;
  } dims[] = {{"vit.heads", preset.vit.heads},
              {"vit.mlp_dim", preset.vit.mlp_dim},
              {"llm.heads", preset.llm.heads},
              {"llm.kv_heads", preset.llm.kv_heads},
              {"llm.mlp_dim", preset.llm.mlp_dim}};
  for (const auto& d : dims)
    OMNIBAL_CHECK(d.value % tp == 0, "model preset '", preset.name,
                  "' cannot split over parallel.tp = ", tp, ": ", d.key, " = ", d.value,
                  " is not divisible by ", tp,
                  " (tensor parallelism splits heads, KV heads and MLP widths evenly)");
}

int64_t padded_vocab_size(int64_t vocab, int tp) {
  OMNIBAL_CHECK(tp >= 1, "padded vocabulary: tp must be >= 1, got ", tp);
  return (vocab + tp - 1) / tp * tp;
}

std::string preset_architecture_yaml(const ModelPreset& preset) {
  ModelPreset unnamed = preset;
  unnamed.name.clear();
  return yaml_struct::write_section(unnamed);
}

}  // namespace omnibal
