// TiedHead: a tied LM head (llm.tie_embeddings) when the token embedding (unit llm_embed) and
// the head (unit llm_head, in the model's last chunk: on the last stage, or on stage 0 under
// ZB-V's V layout, where it then usually shares stage 0 with the embedding and is not split at
// all) sit on different pipeline stages. Below, "the last stage" is the head's stage. Each of
// the two stages holds a copy of the [vocab, d] weight, initialised identically (models/vlm.h);
// this class keeps them equal, as Megatron's embedding group does:
//   - after the DP all-reduce, the two ranks of each pipeline (one pair per DP replica) swap
//     their gradients with a paired non-blocking send/receive and both form
//     g_embedding + g_head in that order, so the two sums are bitwise equal;
//   - the gradient norm counts the weight once (the head's copy is left out);
//   - AdamW sees the same name, value, gradient, state and learning rate on both stages, so
//     both copies take identical steps (copies_equal() verifies it at the end of a run);
//   - the copy is named "llm_embed.tok_embeddings.weight" on the last stage too, so optimizer
//     state and checkpoints use one name (stored once, by the embedding's stage) and a
//     checkpoint loads under any PP split, including PP = 1, where the head shares the tensor.
// The DP reduction comes first: every replica then swaps identical values, and the pairwise
// sum is one commutative addition. The optimizer gives the weight a bucket of its own on both
// stages (OptimizerOptions::own_bucket), so both reduce it alike and, under ZeRO-1, DP rank r of
// both stages holds the same shard of it and swaps just that. Not here: tensor-parallel
// vocabulary sharding.
#pragma once

#include <torch/torch.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/model_preset.h"
#include "partition/stage_partition.h"
#include "schedule/instruction.h"

namespace omnibal::train {

/// The tied embedding / LM head pair of one pipeline stage (inactive on other stages).
class TiedHead {
 public:
  /// Name of the embedding weight; the head's copy takes it too.
  static constexpr const char* kEmbeddingName = "llm_embed.tok_embeddings.weight";
  /// Name of the head's weight as the model unit registers it.
  static constexpr const char* kHeadName = "llm_head.output.weight";
  /// Message tag of the gradient and weight swaps (TensorMessenger uses 1000 and up).
  static constexpr int kTag = 900;

  /// Looks at `stage`'s named parameters. When `preset` ties the head and `split` puts
  /// llm_embed on another stage than llm_head, the embedding's stage and the last stage become
  /// the two ends of the pair and the last stage's kHeadName entry is renamed kEmbeddingName.
  /// Several chunks per stage: `split` holds P x virtual_stages chunks (virtual stages), chunk k
  /// on stage schedule::stage_of_virtual(k, P, layout) (kLoop: k % P; kV, ZB-V: the head's
  /// last chunk on stage 0). Throws omnibal::Error when an end lacks the expected parameter.
  TiedHead(const ModelPreset& preset, const partition::Partition& split, int stage,
           std::vector<std::pair<std::string, torch::Tensor>>& params, int virtual_stages = 1,
           schedule::ChunkLayout layout = schedule::ChunkLayout::kLoop);

  /// True on every rank of a job whose tied weight is split over two stages.
  bool split() const { return split_; }
  /// True on the two ends of the pair (the embedding's stage and the head's stage).
  bool active() const { return peer_ >= 0; }
  /// True on the head's stage: it holds the head's copy (left out of norms, hashes, checkpoints).
  bool holds_copy() const { return active() && !embedding_end_; }
  /// Stage index of the embedding (-1 when not split).
  int embedding_stage() const { return embedding_stage_; }

  /// Replaces `grad`, this end's DP-reduced gradient of the weight (all of it, or under ZeRO-1
  /// this DP rank's shard of it: the same range on both ends), by g_embedding + g_head, swapped
  /// with the other end over `pipeline`, whose group ranks are stage indices. Call after the DP
  /// reduction, on both ends together. No-op when inactive or when `grad` is undefined (frozen).
  void sum_gradients(comm::Communicator& pipeline, torch::Tensor grad) const;
  /// Names this stage leaves out of the gradient norm (the head's copy: a tied weight counts
  /// once).
  std::set<std::string> norm_excluded() const;
  /// Whether this stage leaves `name` out of checkpoints and the parameter hash (the copy).
  bool not_written(const std::string& name) const { return holds_copy() && name == kEmbeddingName; }
  /// Swaps the two copies and compares them bitwise (true when inactive). Both ends together.
  bool copies_equal(comm::Communicator& pipeline) const;

 private:
  bool split_ = false;
  bool embedding_end_ = false;
  int peer_ = -1;
  int embedding_stage_ = -1;
  torch::Tensor weight_;
};

}  // namespace omnibal::train
