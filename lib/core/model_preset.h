// "What the model is": the architecture hyper-parameters of a VLM (ViT + pixel shuffle + MLP
// projector + LLM), read from models/presets/<name>.yaml. Torch-free, so the partition and memory
// planners can cost presets that are never instantiated (InternVL-Chat-1.5 6B+20B, 6B+34B).
// "How we run it" (parallelism, data, optimiser) is core/config.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/choices.h"

namespace omnibal {

/// Vision encoder (InternViT style): patch embedding, class token, learned positions, pre-norm
/// blocks. Tiles are tile_size x tile_size pixels; tokens per tile = (tile_size / patch_size)^2 + 1.
struct VitPreset {
  int tile_size = 448;  ///< pixels; must divide by 2 * patch_size (pixel shuffle at 0.5)
  int patch_size = 14;  ///< pixels
  int width = 1024;     ///< d_vit
  int depth = 24;       ///< blocks
  int heads = 16;
  int mlp_dim = 4096;
  bool layer_scale = true;
  bool qkv_bias = true;
  bool qk_norm = false;                           ///< InternViT-6B normalises q and k
  VitNorm norm = VitNorm::kLayerNorm;             ///< layernorm | rmsnorm
  std::vector<double> mean{0.485, 0.456, 0.406};  ///< per-channel pixel normalisation
  std::vector<double> std{0.229, 0.224, 0.225};
  template <class V> void visit_fields(V& v) {
    v("tile_size", tile_size);
    v("patch_size", patch_size);
    v("width", width);
    v("depth", depth);
    v("heads", heads);
    v("mlp_dim", mlp_dim);
    v("layer_scale", layer_scale);
    v("qkv_bias", qkv_bias);
    v("qk_norm", qk_norm);
    v("norm", norm);
    v("mean", mean);
    v("std", std);
  }
};

/// MLP projector after pixel shuffle: LayerNorm(4 d_vit) -> Linear(-> d_llm) -> GELU -> Linear.
struct ProjectorPreset {
  double downsample_ratio = 0.5;  ///< pixel-shuffle ratio; 0.5 turns 32x32 patches into 16x16
  template <class V> void visit_fields(V& v) { v("downsample_ratio", downsample_ratio); }
};

/// Language model (LLaMA / InternLM2 style): RMSNorm, RoPE, grouped-query attention, SwiGLU.
struct LlmPreset {
  int vocab_size = 32000;
  int width = 4096;  ///< d_llm
  int depth = 32;
  int heads = 32;
  int kv_heads = 32;    ///< grouped-query attention: heads % kv_heads == 0
  int mlp_dim = 11008;  ///< SwiGLU hidden size
  double rope_theta = 10000;
  int max_seq_len = 4096;  ///< tokens of one pack
  bool tie_embeddings = false;
  double norm_eps = 1e-5;
  template <class V> void visit_fields(V& v) {
    v("vocab_size", vocab_size);
    v("width", width);
    v("depth", depth);
    v("heads", heads);
    v("kv_heads", kv_heads);
    v("mlp_dim", mlp_dim);
    v("rope_theta", rope_theta);
    v("max_seq_len", max_seq_len);
    v("tie_embeddings", tie_embeddings);
    v("norm_eps", norm_eps);
  }
};

/// A whole VLM architecture.
struct ModelPreset {
  std::string name;
  VitPreset vit;
  ProjectorPreset projector;
  LlmPreset llm;
  template <class V> void visit_fields(V& v) {
    v("name", name);
    v("vit", vit);
    v("projector", projector);
    v("llm", llm);
  }

  /// LLM tokens one tile becomes after pixel shuffle: (tile/patch)^2 * ratio^2 (256 for 448/14).
  int tokens_per_tile() const;
  /// Patch tokens the ViT sees per tile, class token included ((tile/patch)^2 + 1).
  int vit_tokens_per_tile() const;
  /// Checks divisibility and ranges; throws omnibal::Error naming `origin` and the key.
  void validate(const std::string& origin) const;
};

/// Loads models/presets/<name>.yaml (or a path ending in .yaml). Throws omnibal::Error with file,
/// line and key on a bad or unknown field.
ModelPreset load_model_preset(const std::string& name_or_path);

/// Throws omnibal::Error unless `preset` splits over `tp` tensor-parallel ranks (Megatron TP as
/// models/tensor_parallel.h does it): vit.heads, vit.mlp_dim, llm.heads, llm.kv_heads and
/// llm.mlp_dim divisible by tp. The message names the preset, the key, its value and
/// parallel.tp. The trainer and the planners refuse the same layouts.
void check_tensor_parallel(const ModelPreset& preset, int tp);

/// Vocabulary rows with padding to a multiple of tp (Megatron's make-vocab-size-divisible-by
/// with a divisor of tp): ceil(vocab / tp) * tp. Throws omnibal::Error when tp < 1.
int64_t padded_vocab_size(int64_t vocab, int tp);

/// The architecture of `preset` as YAML (vit, projector, llm; not the name), as checkpoints
/// record it.
std::string preset_architecture_yaml(const ModelPreset& preset);

/// Path of a named preset under <source_dir>/models/presets.
std::string model_preset_path(const std::string& name_or_path);

}  // namespace omnibal
