// The language model as pipeline units, LLaMA / InternLM2 style: token embedding with the
// image-feature merge, pre-norm decoder blocks (RMSNorm, rotary positions, grouped-query
// attention over the packed sequence, SwiGLU MLP), and the final norm + LM head + loss.
// Attention is causal within each sample of the pack and never crosses samples
// (varlen_attention.h); positions restart at 0 per sample (docs/paper.md#attention-isolation).
// The head runs only on positions that have a label (image tokens are most of a pack), and
// returns the loss *sum* and the label count so the trainer normalises over the global batch.
// Not here: KV caches / generation, RoPE scaling, InternLM2's fused wqkv weight layout (q, k, v
// are separate matrices; a checkpoint converter would split wqkv).
#pragma once

#include <torch/torch.h>

#include "core/model_preset.h"
#include "models/pipeline_unit.h"
#include "models/rms_norm.h"

namespace omnibal::models {

/// Unit "llm_embed": kProjected [img_tokens, d] -> kLlm [T, d]. Embeds input_ids and replaces
/// the rows at <IMG_CONTEXT> positions (in order) with the image features.
/// Parameter: tok_embeddings.weight [vocab, d]. Tensor parallel (t ranks): vocab-parallel, rank r
/// holds rows [r V', (r+1) V') of the vocabulary padded to t V' (V' = vocab_per_rank); ids of
/// other ranks embed as zero and one all-reduce (reduce_from_tp) sums the ranks' rows.
/// Throws omnibal::Error when T > llm.max_seq_len, when an id is outside [0, vocab), or when the
/// number of <IMG_CONTEXT> tokens differs from the number of image-feature rows (both named).
class LlmEmbedUnit : public PipelineUnit {
 public:
  /// img_context_id: the tokenizer's id of <IMG_CONTEXT> (taken at run time, not a constant).
  LlmEmbedUnit(const LlmPreset& preset, int64_t img_context_id, const TensorParallel& tp = {});
  UnitState forward(const UnitState& state) override;

  torch::nn::Embedding tok_embeddings{nullptr};

 private:
  LlmPreset preset_;
  int64_t img_context_id_;
};

/// The ShardSpec of a [vocab, d] table (llm_embed, llm_head): rows padded to a multiple of tp.
ShardSpec vocab_shard_spec(int64_t vocab, int tp);

/// Grouped-query self-attention with rotary positions over a pack.
/// Parameters: wq [H*hd, d], wk [Hkv*hd, d], wv [Hkv*hd, d], wo [d, H*hd], no biases.
/// Tensor parallel (t ranks): split by KV group, rank r holds query heads [r H/t, (r+1) H/t)
/// and the KV heads [r Hkv/t, (r+1) Hkv/t) they read (wq, wk, wv column-parallel), wo
/// row-parallel. x is expected already passed through copy_to_tp.
class LlmAttentionImpl : public torch::nn::Module {
 public:
  explicit LlmAttentionImpl(const LlmPreset& preset, const TensorParallel& tp = {});
  /// x [T, d], position_ids [T], cu_seqlens [n + 1] (CPU) -> [T, d].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& position_ids,
                        const torch::Tensor& cu_seqlens);
  torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};

 private:
  int64_t heads_, kv_heads_, head_dim_;  ///< this TP rank's heads
  double rope_theta_;
  TensorParallel tp_;
};
TORCH_MODULE(LlmAttention);

/// SwiGLU MLP: w2(silu(w1 x) * w3 x). Parameters: w1, w3 [mlp, d], w2 [d, mlp], no biases.
/// Tensor parallel: w1, w3 column-parallel, w2 row-parallel (x through copy_to_tp first).
class SwiGluImpl : public torch::nn::Module {
 public:
  explicit SwiGluImpl(const LlmPreset& preset, const TensorParallel& tp = {});
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};

 private:
  TensorParallel tp_;
};
TORCH_MODULE(SwiGlu);

/// Unit "llm_block_<i>": kLlm -> kLlm, h = x + drop(attention(attention_norm(x)));
/// out = h + drop(feed_forward(ffn_norm(h))), drop = residual dropout (models/dropout.h, off at
/// p = 0). Tensor parallel: attention and feed_forward as above, the norms replicated.
class LlmBlockUnit : public PipelineUnit {
 public:
  LlmBlockUnit(const LlmPreset& preset, int index, const TensorParallel& tp = {});
  UnitState forward(const UnitState& state) override;

  RmsNorm attention_norm{nullptr}, ffn_norm{nullptr};
  LlmAttention attention{nullptr};
  SwiGlu feed_forward{nullptr};
};

/// Which pack positions carry a loss term: position t predicts labels[t + 1] when that label is
/// not -100 and t + 1 starts no sample (a sample's first token has no prediction inside the
/// pack). Returns {positions [K] int64, targets [K] int64} on labels' device.
std::pair<torch::Tensor, torch::Tensor> label_targets(const torch::Tensor& labels,
                                                      const torch::Tensor& cu_seqlens);

/// Unit "llm_head": kLlm [T, d] -> kLoss. Final RMSNorm, LM head and token cross-entropy on the
/// label positions only; sets loss_sum (fp32 sum over tokens), label_count, token_loss,
/// label_positions, predictions and logits. Parameters: norm.weight [d], output.weight [vocab, d]
/// (absent when tied to llm_embed in the same process, see tie_to()).
/// Tensor parallel: norm replicated, output.weight vocab-parallel like llm_embed's table (so a
/// tied head shares the same shard), logits [K, V'] are this rank's columns only and the loss
/// is vocab_parallel_cross_entropy (full logits are never gathered).
class LlmHeadUnit : public PipelineUnit {
 public:
  /// own_output: register output.weight (false only when tie_to() is called next).
  LlmHeadUnit(const LlmPreset& preset, bool own_output, const TensorParallel& tp = {});
  UnitState forward(const UnitState& state) override;
  /// Shares `embedding` [vocab, d] as the LM head weight (tie_embeddings in one process).
  void tie_to(const torch::Tensor& embedding) { output_weight_ = embedding; }
  /// The embedding's weight when tied in this process (tie_to), else nothing.
  std::vector<torch::Tensor> borrowed_parameters() const override {
    return output ? std::vector<torch::Tensor>{} : std::vector<torch::Tensor>{output_weight_};
  }

  RmsNorm norm{nullptr};
  torch::nn::Linear output{nullptr};  ///< null when tied

 private:
  torch::Tensor output_weight_;
  int64_t vocab_;
};

}  // namespace omnibal::models
