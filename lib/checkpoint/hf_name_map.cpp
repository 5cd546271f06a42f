#include "checkpoint/hf_name_map.h"

#include "core/error.h"
#include "core/units.h"

#include <algorithm>

namespace omnibal::checkpoint {
namespace {

constexpr const char* kUnresolved =
    "Hugging Face names: the LLM naming (model.hf_style) must be resolved, not auto";

struct MappingList {
  std::vector<HfTensorMapping> items;
  /// hf_name <- unit.local (same tensor).
  void same(const std::string& hf, const std::string& omni) {
    items.push_back({hf, {omni}, HfFusion::kNone});
  }
  void fused(const std::string& hf, std::vector<std::string> parts, HfFusion fusion) {
    items.push_back({hf, std::move(parts), fusion});
  }
};

void vit_block(MappingList& m, const VitPreset& vit, int i) {
  const std::string o = unit_name({UnitKind::kVitBlock, i}) + ".";
  const std::string h = "vision_model.encoder.layers." + std::to_string(i) + ".";
  std::vector<std::string> locals{"norm1.weight",   "attn.qkv.weight", "attn.proj.weight",
                                  "attn.proj.bias", "norm2.weight",    "mlp.fc1.weight",
                                  "mlp.fc1.bias",   "mlp.fc2.weight",  "mlp.fc2.bias"};
  if (vit.norm == VitNorm::kLayerNorm) locals.insert(locals.end(), {"norm1.bias", "norm2.bias"});
  if (vit.qkv_bias) locals.push_back("attn.qkv.bias");
  if (vit.qk_norm) locals.insert(locals.end(), {"attn.q_norm.weight", "attn.k_norm.weight"});
  if (vit.layer_scale) locals.insert(locals.end(), {"ls1", "ls2"});
  for (const auto& l : locals) m.same(h + l, o + l);
}

void llm_block(MappingList& m, HfStyle style, int i) {
  const std::string o = unit_name({UnitKind::kLlmBlock, i}) + ".";
  const std::string h = "language_model.model.layers." + std::to_string(i) + ".";
  const std::vector<std::string> qkv{o + "attention.wq.weight", o + "attention.wk.weight",
                                     o + "attention.wv.weight"};
  // The LLaMA family shares the norms, the output projection and the down projection.
  const auto llama_common = [&] {
    m.same(h + "input_layernorm.weight", o + "attention_norm.weight");
    m.same(h + "post_attention_layernorm.weight", o + "ffn_norm.weight");
    m.same(h + "self_attn.o_proj.weight", o + "attention.wo.weight");
    m.same(h + "mlp.down_proj.weight", o + "feed_forward.w2.weight");
  };
  switch (style) {
    case HfStyle::kInternLm2:
      m.same(h + "attention_norm.weight", o + "attention_norm.weight");
      m.fused(h + "attention.wqkv.weight", qkv, HfFusion::kInternLm2Qkv);
      m.same(h + "attention.wo.weight", o + "attention.wo.weight");
      m.same(h + "ffn_norm.weight", o + "ffn_norm.weight");
      for (const char* w : {"w1", "w2", "w3"})
        m.same(h + "feed_forward." + w + ".weight", o + "feed_forward." + w + ".weight");
      return;
    case HfStyle::kLlamaFused:
      llama_common();
      m.fused(h + "self_attn.qkv_proj.weight", qkv, HfFusion::kConcat);
      m.fused(h + "mlp.gate_up_proj.weight",
              {o + "feed_forward.w1.weight", o + "feed_forward.w3.weight"}, HfFusion::kConcat);
      return;
    case HfStyle::kLlama:
      llama_common();
      m.same(h + "self_attn.q_proj.weight", qkv[0]);
      m.same(h + "self_attn.k_proj.weight", qkv[1]);
      m.same(h + "self_attn.v_proj.weight", qkv[2]);
      m.same(h + "mlp.gate_proj.weight", o + "feed_forward.w1.weight");
      m.same(h + "mlp.up_proj.weight", o + "feed_forward.w3.weight");
      return;
    case HfStyle::kAuto: break;
  }
  OMNIBAL_FAIL(kUnresolved);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string hf_embedding_name(HfStyle style) {
  switch (style) {
    case HfStyle::kInternLm2: return "language_model.model.tok_embeddings.weight";
    case HfStyle::kLlama:
    case HfStyle::kLlamaFused: return "language_model.model.embed_tokens.weight";
    case HfStyle::kAuto: break;
  }
  OMNIBAL_FAIL(kUnresolved);
}

std::string hf_lm_head_name(HfStyle style) {
  switch (style) {
    case HfStyle::kInternLm2: return "language_model.output.weight";
    case HfStyle::kLlama:
    case HfStyle::kLlamaFused: return "language_model.lm_head.weight";
    case HfStyle::kAuto: break;
  }
  OMNIBAL_FAIL(kUnresolved);
}

HfStyle parse_hf_style(const std::string& name) {
  const auto style = find_choice<HfStyle>(name);
  OMNIBAL_CHECK(style && *style != HfStyle::kAuto, "unknown Hugging Face LLM style \"", name,
                "\" (expected internlm2, llama or llama-fused)");
  return *style;
}

HfStyle detect_hf_style(const std::vector<std::string>& hf_names) {
  auto any = [&](const char* part) {
    return std::any_of(hf_names.begin(), hf_names.end(),
                       [&](const std::string& n) { return n.find(part) != std::string::npos; });
  };
  if (any(".attention.wqkv.")) return HfStyle::kInternLm2;
  if (any(".self_attn.qkv_proj.")) return HfStyle::kLlamaFused;
  if (any(".self_attn.q_proj.")) return HfStyle::kLlama;
  OMNIBAL_FAIL(
      "cannot tell the LLM layout: no attention.wqkv (InternLM2), self_attn.qkv_proj "
      "(LLaMA fused) or self_attn.q_proj (LLaMA) tensor among ",
      hf_names.size(), " names");
}

std::vector<HfTensorMapping> hf_mappings_for_unit(const ModelPreset& preset, UnitId unit,
                                                  HfStyle style) {
  MappingList m;
  switch (unit.kind) {
    case UnitKind::kVitEmbed:
      for (const char* l : {"patch_embedding.weight", "patch_embedding.bias", "class_embedding",
                            "position_embedding"})
        m.same(std::string("vision_model.embeddings.") + l, std::string("vit_embed.") + l);
      break;
    case UnitKind::kVitBlock: vit_block(m, preset.vit, unit.index); break;
    case UnitKind::kProjector:
      m.same("mlp1.0.weight", "projector.norm.weight");
      m.same("mlp1.0.bias", "projector.norm.bias");
      m.same("mlp1.1.weight", "projector.fc1.weight");
      m.same("mlp1.1.bias", "projector.fc1.bias");
      m.same("mlp1.3.weight", "projector.fc2.weight");
      m.same("mlp1.3.bias", "projector.fc2.bias");
      break;
    case UnitKind::kLlmEmbed:
      m.same(hf_embedding_name(style), "llm_embed.tok_embeddings.weight");
      break;
    case UnitKind::kLlmBlock: llm_block(m, style, unit.index); break;
    case UnitKind::kLlmHead:
      m.same("language_model.model.norm.weight", "llm_head.norm.weight");
      m.same(preset.llm.tie_embeddings ? hf_embedding_name(style) : hf_lm_head_name(style),
             "llm_head.output.weight");
      break;
  }
  return m.items;
}

std::vector<HfTensorMapping> hf_mappings_for_unit(const ModelPreset& preset,
                                                  const std::string& unit, HfStyle style) {
  // The model's spelling of a unit of this preset (a block index below its tower's depth).
  const auto id = find_unit_id(unit);
  const int blocks = !id                               ? 0
                     : id->kind == UnitKind::kVitBlock ? preset.vit.depth
                                                       : preset.llm.depth;
  OMNIBAL_CHECK(id && unit_name(*id) == unit && (!is_block(id->kind) || id->index < blocks),
                "no Hugging Face names for unit \"", unit, "\" of preset ", preset.name,
                " (expected vit_embed, vit_block_0..", preset.vit.depth - 1,
                ", projector, llm_embed, llm_block_0..", preset.llm.depth - 1, ", llm_head)");
  return hf_mappings_for_unit(preset, *id, style);
}

std::vector<HfTensorMapping> hf_mappings(const ModelPreset& preset, HfStyle style) {
  std::vector<HfTensorMapping> all;
  for (const UnitId& u : unit_chain(preset)) {
    auto m = hf_mappings_for_unit(preset, u, style);
    all.insert(all.end(), m.begin(), m.end());
  }
  return all;
}

std::vector<int64_t> fused_shape(const HfTensorMapping& mapping,
                                 const std::vector<std::vector<int64_t>>& part_shapes) {
  OMNIBAL_CHECK(part_shapes.size() == mapping.parts.size(), mapping.hf_name, ": expected ",
                mapping.parts.size(), " parts, got ", part_shapes.size());
  std::vector<int64_t> shape = part_shapes.at(0);
  for (size_t i = 1; i < part_shapes.size(); ++i) {
    OMNIBAL_CHECK(part_shapes[i].size() == 2 && shape.size() == 2 && part_shapes[i][1] == shape[1],
                  mapping.hf_name, ": parts to fuse must be matrices with equal columns, got ",
                  shape_string(part_shapes[0]), " and ", shape_string(part_shapes[i]));
    shape[0] += part_shapes[i][0];
  }
  return shape;
}

torch::Tensor fuse_for_hf(const HfTensorMapping& mapping, const std::vector<torch::Tensor>& parts,
                          const LlmPreset& llm) {
  OMNIBAL_CHECK(parts.size() == mapping.parts.size(), mapping.hf_name, ": expected ",
                mapping.parts.size(), " parts, got ", parts.size());
  switch (mapping.fusion) {
    case HfFusion::kNone: return parts[0];
    case HfFusion::kConcat: return torch::cat(parts, 0);
    case HfFusion::kInternLm2Qkv: {
      const int64_t hd = llm.width / llm.heads, groups = llm.heads / llm.kv_heads,
                    d = parts[0].size(1);
      const torch::Tensor q = parts[0].reshape({llm.kv_heads, groups, hd, d});
      const torch::Tensor k = parts[1].reshape({llm.kv_heads, 1, hd, d});
      const torch::Tensor v = parts[2].reshape({llm.kv_heads, 1, hd, d});
      return torch::cat({q, k, v}, 1).reshape({-1, d});
    }
  }
  OMNIBAL_FAIL("unreachable");
}

std::vector<torch::Tensor> split_from_hf(const HfTensorMapping& mapping, const torch::Tensor& hf,
                                         const std::vector<std::vector<int64_t>>& part_shapes,
                                         const LlmPreset& llm) {
  const std::vector<int64_t> expected = fused_shape(mapping, part_shapes);
  OMNIBAL_CHECK(hf.sizes().vec() == expected, mapping.hf_name, ": shape ",
                shape_string(hf.sizes().vec()), ", the model expects ", shape_string(expected));
  switch (mapping.fusion) {
    case HfFusion::kNone: return {hf};
    case HfFusion::kConcat: {
      std::vector<torch::Tensor> out;
      int64_t row = 0;
      for (const auto& s : part_shapes) {
        out.push_back(hf.narrow(0, row, s[0]));
        row += s[0];
      }
      return out;
    }
    case HfFusion::kInternLm2Qkv: {
      const int64_t hd = llm.width / llm.heads, groups = llm.heads / llm.kv_heads, d = hf.size(1);
      OMNIBAL_CHECK(part_shapes[0][0] == llm.heads * hd && part_shapes[1][0] == llm.kv_heads * hd,
                    mapping.hf_name, ": q/k rows do not match heads ", llm.heads, " / kv_heads ",
                    llm.kv_heads);
      const torch::Tensor grouped = hf.reshape({llm.kv_heads, groups + 2, hd, d});
      return {grouped.narrow(1, 0, groups).reshape({-1, d}),
              grouped.select(1, groups).reshape({-1, d}),
              grouped.select(1, groups + 1).reshape({-1, d})};
    }
  }
  OMNIBAL_FAIL("unreachable");
}

}  // namespace omnibal::checkpoint
