// The name map between omnibal's per-unit parameter names (models/: "<unit>.<local>", e.g.
// "llm_block_3.attention.wq.weight") and the Hugging Face InternVL-Chat layout:
//   vision_model.embeddings.{patch_embedding.*, class_embedding, position_embedding}  <- vit_embed
//   vision_model.encoder.layers.N.{norm1, attn.qkv, attn.q_norm, attn.k_norm, attn.proj, ls1,
//                                  norm2, mlp.fc1, mlp.fc2, ls2}                     <- vit_block_N
//   mlp1.0 (LayerNorm), mlp1.1 (Linear), mlp1.3 (Linear; mlp1.2 is the GELU)          <- projector
//   language_model.*: the LLM in one of three styles (HfStyle, model.hf_style):
//     InternLM2: model.tok_embeddings, model.layers.N.{attention_norm, attention.wqkv,
//                attention.wo, ffn_norm, feed_forward.w1/w2/w3}, model.norm, output
//     LLaMA:     model.embed_tokens, model.layers.N.{input_layernorm, self_attn.q_proj/k_proj/
//                v_proj/o_proj, post_attention_layernorm, mlp.gate_proj/up_proj/down_proj},
//                model.norm, lm_head
//     LLaMA fused (Phi-3 style): self_attn.qkv_proj = [q; k; v] and mlp.gate_up_proj =
//                [gate; up], concatenated along the output dimension.
// InternLM2's wqkv interleaves per KV group: its rows are [kv_heads, q_per_kv + 2, head_dim]
// (q_per_kv query heads, then the key, then the value of each group), as modeling_internlm2.py
// reads it (rearrange "(h gs d) -> h gs d", gs = q_per_kv + 2). Both LLaMA and InternLM2 in
// Hugging Face use the "rotate half" RoPE that models/rotary.cpp implements, so no q/k row
// permutation is needed (unlike Meta's original LLaMA checkpoints).
// With tied embeddings the head's output weight maps to the embedding's HF tensor; the export
// still writes the head under its own name (hf_lm_head_name), since InternVL's config forces
// tie_word_embeddings = False and would otherwise initialise a separate head at random.
// Not here: reading or writing files (hf_import.h, hf_export.h); Meta/original layouts,
// Qwen2-style biases, tensor-parallel shards.
#pragma once

#include "core/choices.h"
#include "core/model_preset.h"
#include "core/units.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace omnibal::checkpoint {

/// Every function below that takes an HfStyle throws omnibal::Error for kAuto: resolve it first
/// (hf_style.h).

/// A resolved LLM naming (model.hf_style without auto) from its name. Throws omnibal::Error
/// "unknown Hugging Face LLM style ... (expected internlm2, llama or llama-fused)" otherwise.
HfStyle parse_hf_style(const std::string& name);
/// The style of a checkpoint from its tensor names (attention.wqkv -> InternLM2,
/// self_attn.qkv_proj -> LLaMA fused, self_attn.q_proj -> LLaMA). Throws omnibal::Error when no
/// LLM attention tensor is present.
HfStyle detect_hf_style(const std::vector<std::string>& hf_names);

/// The token embedding's Hugging Face name ("language_model.model.tok_embeddings.weight" for
/// InternLM2, "language_model.model.embed_tokens.weight" for both LLaMA styles).
std::string hf_embedding_name(HfStyle style);
/// The LM head's Hugging Face name ("language_model.output.weight" for InternLM2,
/// "language_model.lm_head.weight" for both LLaMA styles), tied or not.
std::string hf_lm_head_name(HfStyle style);

/// How omnibal parts combine into one Hugging Face tensor.
enum class HfFusion {
  kNone,          ///< one part, same tensor
  kConcat,        ///< parts concatenated along dim 0 in order (qkv_proj, gate_up_proj)
  kInternLm2Qkv,  ///< parts {wq, wk, wv} interleaved per KV group (see the header comment)
};

/// One Hugging Face tensor and the omnibal parameters it holds.
struct HfTensorMapping {
  std::string hf_name;
  std::vector<std::string> parts;  ///< full omnibal names, in fusion order
  HfFusion fusion = HfFusion::kNone;
};

/// The mappings of one unit of `preset` (a block index below its tower's depth), covering
/// every parameter the unit has (optional ones such as qkv bias, q/k norm, layer scale,
/// LayerNorm bias follow the preset).
std::vector<HfTensorMapping> hf_mappings_for_unit(const ModelPreset& preset, UnitId unit,
                                                  HfStyle style);
/// The same by the unit's model name ("vit_block_3", "llm_head", ...). Throws omnibal::Error for
/// a name that is no unit of `preset`.
std::vector<HfTensorMapping> hf_mappings_for_unit(const ModelPreset& preset,
                                                  const std::string& unit, HfStyle style);
/// The mappings of every unit of `preset`, in model order.
std::vector<HfTensorMapping> hf_mappings(const ModelPreset& preset, HfStyle style);

/// Builds the Hugging Face tensor from its parts (shapes as the omnibal parameters).
torch::Tensor fuse_for_hf(const HfTensorMapping& mapping, const std::vector<torch::Tensor>& parts,
                          const LlmPreset& llm);
/// Splits a Hugging Face tensor into its parts of the given shapes. Throws omnibal::Error naming
/// the tensor when its shape is not the fused shape of `part_shapes`.
std::vector<torch::Tensor> split_from_hf(const HfTensorMapping& mapping, const torch::Tensor& hf,
                                         const std::vector<std::vector<int64_t>>& part_shapes,
                                         const LlmPreset& llm);
/// The shape of the Hugging Face tensor made of parts of `part_shapes`.
std::vector<int64_t> fused_shape(const HfTensorMapping& mapping,
                                 const std::vector<std::vector<int64_t>>& part_shapes);

}  // namespace omnibal::checkpoint
