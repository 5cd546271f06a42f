#include "models/llm.h"

#include "core/error.h"
#include "models/rotary.h"
#include "models/varlen_attention.h"

namespace omnibal::models {

namespace {
torch::nn::Linear linear_no_bias(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}
}  // namespace

LlmEmbedUnit::LlmEmbedUnit(const LlmPreset& preset, int64_t img_context_id)
    : PipelineUnit("llm_embed", UnitKind::kLlmEmbed),
      preset_(preset),
      img_context_id_(img_context_id) {
  OMNIBAL_CHECK(img_context_id >= 0 && img_context_id < preset.vocab_size,
                "llm_embed: img_context_id must be a token id in [0, ", preset.vocab_size,
                "), got ", img_context_id, " (take it from the tokenizer)");
  tok_embeddings =
      register_module("tok_embeddings", torch::nn::Embedding(preset.vocab_size, preset.width));
}

UnitState LlmEmbedUnit::forward(const UnitState& state) {
  expect_phase(state, Phase::kProjected);
  const torch::Tensor& ids = state.input_ids;
  const int64_t tokens = ids.size(0);
  OMNIBAL_CHECK(tokens <= preset_.max_seq_len, "llm_embed: the pack has ", tokens,
                " tokens, over the preset's llm.max_seq_len = ", preset_.max_seq_len);
  const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
  OMNIBAL_CHECK(lo >= 0 && hi < preset_.vocab_size, "llm_embed: token ids must be in [0, ",
                preset_.vocab_size, "), got min ", lo, " max ", hi);
  torch::Tensor x = tok_embeddings->forward(ids);  // [T, d]
  const torch::Tensor slots = ids.eq(img_context_id_).nonzero().squeeze(1);
  const int64_t features = state.hidden.defined() ? state.hidden.size(0) : 0;
  OMNIBAL_CHECK(slots.size(0) == features, "llm_embed: the pack has ", slots.size(0),
                " <IMG_CONTEXT> tokens (id ", img_context_id_, ") but the projector produced ",
                features, " image-feature tokens");
  if (state.hidden.defined()) x = x.index_copy(0, slots, state.hidden.to(x.scalar_type()));
  return state.with_hidden(x, Phase::kLlm);
}

LlmAttentionImpl::LlmAttentionImpl(const LlmPreset& preset)
    : heads_(preset.heads),
      kv_heads_(preset.kv_heads),
      head_dim_(preset.width / preset.heads),
      rope_theta_(preset.rope_theta) {
  wq = register_module("wq", linear_no_bias(preset.width, heads_ * head_dim_));
  wk = register_module("wk", linear_no_bias(preset.width, kv_heads_ * head_dim_));
  wv = register_module("wv", linear_no_bias(preset.width, kv_heads_ * head_dim_));
  wo = register_module("wo", linear_no_bias(heads_ * head_dim_, preset.width));
}

torch::Tensor LlmAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& position_ids,
                                        const torch::Tensor& cu_seqlens) {
  const int64_t tokens = x.size(0);
  const RotaryTables rope = rotary_tables(position_ids, head_dim_, rope_theta_);
  const torch::Tensor q = apply_rotary(wq->forward(x).view({tokens, heads_, head_dim_}), rope);
  const torch::Tensor k = apply_rotary(wk->forward(x).view({tokens, kv_heads_, head_dim_}), rope);
  const torch::Tensor v = wv->forward(x).view({tokens, kv_heads_, head_dim_});
  const torch::Tensor out = varlen_causal_attention(q, k, v, cu_seqlens);
  return wo->forward(out.reshape({tokens, heads_ * head_dim_}));
}

SwiGluImpl::SwiGluImpl(const LlmPreset& preset) {
  w1 = register_module("w1", linear_no_bias(preset.width, preset.mlp_dim));
  w3 = register_module("w3", linear_no_bias(preset.width, preset.mlp_dim));
  w2 = register_module("w2", linear_no_bias(preset.mlp_dim, preset.width));
}

torch::Tensor SwiGluImpl::forward(const torch::Tensor& x) {
  return w2->forward(torch::silu(w1->forward(x)) * w3->forward(x));
}

LlmBlockUnit::LlmBlockUnit(const LlmPreset& preset, int index)
    : PipelineUnit("llm_block_" + std::to_string(index), UnitKind::kLlmBlock) {
  attention_norm = register_module("attention_norm", RmsNorm(preset.width, preset.norm_eps));
  attention = register_module("attention", LlmAttention(preset));
  ffn_norm = register_module("ffn_norm", RmsNorm(preset.width, preset.norm_eps));
  feed_forward = register_module("feed_forward", SwiGlu(preset));
}

UnitState LlmBlockUnit::forward(const UnitState& state) {
  expect_phase(state, Phase::kLlm);
  const torch::Tensor& x = state.hidden;
  const torch::Tensor h =
      x + apply_dropout(attention->forward(attention_norm->forward(x), state.position_ids,
                                           state.cu_seqlens),
                        state, DropoutSite::kAttentionOutput);
  const torch::Tensor mlp =
      apply_dropout(feed_forward->forward(ffn_norm->forward(h)), state, DropoutSite::kMlpOutput);
  return state.with_hidden(h + mlp, Phase::kLlm);
}

std::pair<torch::Tensor, torch::Tensor> label_targets(const torch::Tensor& labels,
                                                      const torch::Tensor& cu_seqlens) {
  const int64_t tokens = labels.size(0);
  if (tokens < 2) {
    const auto empty = torch::zeros({0}, labels.options());
    return {empty, empty};
  }
  torch::Tensor next = labels.slice(0, 1).clone();  // next[t] = labels[t + 1]
  // A sample's first token is not predicted by the previous sample's last token.
  const torch::Tensor starts = cu_seqlens.slice(0, 1, -1).to(labels.device()) - 1;
  if (starts.numel() > 0) next.index_fill_(0, starts, -100);
  const torch::Tensor positions = next.ne(-100).nonzero().squeeze(1);
  return {positions, next.index_select(0, positions)};
}

LlmHeadUnit::LlmHeadUnit(const LlmPreset& preset, bool own_output)
    : PipelineUnit("llm_head", UnitKind::kLlmHead) {
  norm = register_module("norm", RmsNorm(preset.width, preset.norm_eps));
  if (own_output) {
    output = register_module("output", linear_no_bias(preset.width, preset.vocab_size));
    output_weight_ = output->weight;
  }
}

UnitState LlmHeadUnit::forward(const UnitState& state) {
  expect_phase(state, Phase::kLlm);
  OMNIBAL_CHECK(output_weight_.defined(), "llm_head: no output weight (tie_to() was not called)");
  auto [positions, targets] = label_targets(state.labels, state.cu_seqlens);
  UnitState out = state.with_hidden({}, Phase::kLoss);
  const torch::Tensor h = norm->forward(state.hidden.index_select(0, positions));
  out.logits = torch::matmul(h, output_weight_.t());  // [K, vocab]
  out.token_loss = torch::nn::functional::cross_entropy(
      out.logits.to(torch::kFloat32), targets,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  out.loss_sum = out.token_loss.sum();
  out.label_count = positions.size(0);
  out.label_positions = positions;
  return out;
}

}  // namespace omnibal::models
