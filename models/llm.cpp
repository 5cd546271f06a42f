#include "models/llm.h"

#include "core/error.h"
#include "models/mixed_precision.h"
#include "models/rotary.h"
#include "models/tensor_parallel.h"
#include "models/varlen_attention.h"
#include "models/weight_grad_store.h"

namespace omnibal::models {

namespace {
torch::nn::Linear linear_no_bias(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}
}  // namespace

ShardSpec vocab_shard_spec(int64_t vocab, int tp) { return {0, 1, vocab_per_rank(vocab, tp) * tp}; }

LlmEmbedUnit::LlmEmbedUnit(const LlmPreset& preset, int64_t img_context_id,
                           const TensorParallel& tp)
    : PipelineUnit({UnitKind::kLlmEmbed, 0}), preset_(preset), img_context_id_(img_context_id) {
  set_tensor_parallel(tp);
  mark_sharded("tok_embeddings.weight", vocab_shard_spec(preset.vocab_size, tp.size));
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
  const TensorParallel& tp = tensor_parallel();
  torch::Tensor x;  // [T, d]
  if (!tp.active()) {
    x = embedding_lookup(tok_embeddings->weight, ids);
  } else {  // this rank's rows of the vocabulary; the others' ids embed as 0, then summed
    const int64_t rows = tok_embeddings->weight.size(0), start = tp.rank * rows;
    const torch::Tensor mine = ids.ge(start).logical_and(ids.lt(start + rows));
    const torch::Tensor local = (ids - start).masked_fill(mine.logical_not(), 0);
    x = reduce_from_tp(embedding_lookup(tok_embeddings->weight, local)
                           .masked_fill(mine.logical_not().unsqueeze(1), 0),
                       tp);
  }
  const torch::Tensor slots = ids.eq(img_context_id_).nonzero().squeeze(1);
  const int64_t features = state.hidden.defined() ? state.hidden.size(0) : 0;
  OMNIBAL_CHECK(slots.size(0) == features, "llm_embed: the pack has ", slots.size(0),
                " <IMG_CONTEXT> tokens (id ", img_context_id_, ") but the projector produced ",
                features, " image-feature tokens");
  if (state.hidden.defined()) x = x.index_copy(0, slots, state.hidden.to(x.scalar_type()));
  return state.with_hidden(x, Phase::kLlm);
}

LlmAttentionImpl::LlmAttentionImpl(const LlmPreset& preset, const TensorParallel& tp)
    : heads_(preset.heads / tp.size),
      kv_heads_(preset.kv_heads / tp.size),
      head_dim_(preset.width / preset.heads),
      rope_theta_(preset.rope_theta),
      tp_(tp) {
  // Built at full size (initialised like TP 1); make_units slices them (PipelineUnit::shard).
  const int64_t hd = head_dim_;
  wq = register_module("wq", linear_no_bias(preset.width, preset.heads * hd));
  wk = register_module("wk", linear_no_bias(preset.width, preset.kv_heads * hd));
  wv = register_module("wv", linear_no_bias(preset.width, preset.kv_heads * hd));
  wo = register_module("wo", linear_no_bias(preset.heads * hd, preset.width));
}

torch::Tensor LlmAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& position_ids,
                                        const torch::Tensor& cu_seqlens) {
  const int64_t tokens = x.size(0);
  const RotaryTables rope = rotary_tables(position_ids, head_dim_, rope_theta_);
  const torch::Tensor q =
      apply_rotary(linear_layer(x, wq->weight).view({tokens, heads_, head_dim_}), rope);
  const torch::Tensor k =
      apply_rotary(linear_layer(x, wk->weight).view({tokens, kv_heads_, head_dim_}), rope);
  const torch::Tensor v = linear_layer(x, wv->weight).view({tokens, kv_heads_, head_dim_});
  const torch::Tensor out = varlen_causal_attention(q, k, v, cu_seqlens);
  return row_parallel_linear(out.reshape({tokens, heads_ * head_dim_}), wo->weight, {}, tp_);
}

SwiGluImpl::SwiGluImpl(const LlmPreset& preset, const TensorParallel& tp) : tp_(tp) {
  w1 = register_module("w1", linear_no_bias(preset.width, preset.mlp_dim));
  w3 = register_module("w3", linear_no_bias(preset.width, preset.mlp_dim));
  w2 = register_module("w2", linear_no_bias(preset.mlp_dim, preset.width));
}

torch::Tensor SwiGluImpl::forward(const torch::Tensor& x) {
  return row_parallel_linear(torch::silu(linear_layer(x, w1->weight)) * linear_layer(x, w3->weight),
                             w2->weight, {}, tp_);
}

LlmBlockUnit::LlmBlockUnit(const LlmPreset& preset, int index, const TensorParallel& tp)
    : PipelineUnit({UnitKind::kLlmBlock, index}) {
  set_tensor_parallel(tp);
  attention_norm = register_module("attention_norm", RmsNorm(preset.width, preset.norm_eps));
  attention = register_module("attention", LlmAttention(preset, tp));
  ffn_norm = register_module("ffn_norm", RmsNorm(preset.width, preset.norm_eps));
  feed_forward = register_module("feed_forward", SwiGlu(preset, tp));
  for (const char* w : {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                        "feed_forward.w1.weight", "feed_forward.w3.weight"})
    mark_sharded(w, {0, 1});
  mark_sharded("attention.wo.weight", {1, 1});
  mark_sharded("feed_forward.w2.weight", {1, 1});
}

UnitState LlmBlockUnit::forward(const UnitState& state) {
  expect_phase(state, Phase::kLlm);
  const torch::Tensor& x = state.hidden;
  const TensorParallel& tp = tensor_parallel();
  const torch::Tensor h =
      x + apply_dropout(attention->forward(copy_to_tp(attention_norm->forward(x), tp),
                                           state.position_ids, state.cu_seqlens),
                        state, DropoutSite::kAttentionOutput);
  const torch::Tensor mlp =
      apply_dropout(feed_forward->forward(copy_to_tp(ffn_norm->forward(h), tp)), state,
                    DropoutSite::kMlpOutput);
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

LlmHeadUnit::LlmHeadUnit(const LlmPreset& preset, bool own_output, const TensorParallel& tp)
    : PipelineUnit({UnitKind::kLlmHead, 0}), vocab_(preset.vocab_size) {
  set_tensor_parallel(tp);
  if (own_output) mark_sharded("output.weight", vocab_shard_spec(preset.vocab_size, tp.size));
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
  const TensorParallel& tp = tensor_parallel();
  const torch::Tensor h = copy_to_tp(norm->forward(state.hidden.index_select(0, positions)), tp);
  out.logits = linear_layer(h, output_weight_);  // [K, vocab] or this rank's [K, V']
  if (!tp.active()) {
    out.token_loss = torch::nn::functional::cross_entropy(
        out.logits.to(torch::kFloat32), targets,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    out.predictions = out.logits.detach().argmax(-1);
  } else {
    const int64_t start = tp.rank * output_weight_.size(0);
    out.token_loss =
        vocab_parallel_cross_entropy(out.logits.to(torch::kFloat32), targets, start, vocab_, tp);
    out.predictions = vocab_parallel_argmax(out.logits.detach(), start, vocab_, tp);
  }
  out.loss_sum = out.token_loss.sum();
  out.label_count = positions.size(0);
  out.label_positions = positions;
  return out;
}

}  // namespace omnibal::models
