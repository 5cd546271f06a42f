#include "train/tied_head.h"

#include <fmt/format.h>

#include "core/error.h"

namespace omnibal::train {

namespace {

// Swaps `mine` with the peer's tensor of the same shape; returns the peer's.
torch::Tensor swap_with_peer(comm::Communicator& pipeline, const torch::Tensor& mine, int peer,
                             const std::string& what) {
  const torch::Tensor out = mine.detach().contiguous().clone();
  torch::Tensor in = torch::empty_like(out);
  pipeline.group_start();
  comm::Request send =
      pipeline.isend(out, peer, TiedHead::kTag, fmt::format("send {} to stage {}", what, peer));
  comm::Request recv =
      pipeline.irecv(in, peer, TiedHead::kTag, fmt::format("receive {} from stage {}", what, peer));
  pipeline.group_end();
  send.wait();
  recv.wait();
  return in;
}

}  // namespace

TiedHead::TiedHead(const ModelPreset& preset, const partition::Partition& split, int stage,
                   std::vector<std::pair<std::string, torch::Tensor>>& params, int virtual_stages,
                   schedule::ChunkLayout layout) {
  if (!preset.llm.tie_embeddings) return;
  const int embed_unit = preset.vit.depth + 2;  // vit_embed, vit blocks, projector, llm_embed
  OMNIBAL_CHECK(virtual_stages >= 1 && split.stages() % virtual_stages == 0,
                "tied head: ", split.stages(), " model chunks do not split into ", virtual_stages,
                " per pipeline stage");
  const int stages = split.stages() / virtual_stages;
  // The head is the model's last unit: P - 1 under the loop layout, stage 0 under ZB-V's V.
  const int last = schedule::stage_of_virtual(split.stages() - 1, stages, layout);
  for (int k = 0; k < split.stages(); ++k)
    if (split.begin(k) <= embed_unit && embed_unit < split.end(k))
      embedding_stage_ = schedule::stage_of_virtual(k, stages, layout);
  OMNIBAL_CHECK(embedding_stage_ >= 0, "tied head: no stage holds unit llm_embed");
  split_ = embedding_stage_ != last;
  if (!split_) {
    embedding_stage_ = -1;
    return;
  }
  if (stage != embedding_stage_ && stage != last) return;
  embedding_end_ = stage == embedding_stage_;
  peer_ = embedding_end_ ? last : embedding_stage_;
  const std::string wanted = embedding_end_ ? kEmbeddingName : kHeadName;
  for (auto& [name, p] : params) {
    if (name != wanted) continue;
    weight_ = p;
    name = kEmbeddingName;  // the copy answers to the embedding's name (see the file comment)
  }
  OMNIBAL_CHECK(weight_.defined(), "tied head: stage ", stage, " should hold '", wanted,
                "' (llm.tie_embeddings with llm_embed on stage ", embedding_stage_,
                " and llm_head on stage ", last, ")");
}

void TiedHead::sum_gradients(comm::Communicator& pipeline, torch::Tensor grad) const {
  if (!active() || !grad.defined()) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor other = swap_with_peer(pipeline, grad, peer_, "tied embedding gradient");
  // Same operand order on both ends (embedding first): one IEEE addition, bitwise equal sums.
  const torch::Tensor sum = embedding_end_ ? grad + other : other + grad;
  grad.copy_(sum);
}

std::set<std::string> TiedHead::norm_excluded() const {
  if (!holds_copy()) return {};
  return {kEmbeddingName};
}

bool TiedHead::copies_equal(comm::Communicator& pipeline) const {
  if (!active()) return true;
  const torch::Tensor other = swap_with_peer(pipeline, weight_, peer_, "tied embedding weight");
  return torch::equal(weight_.detach(), other);
}

}  // namespace omnibal::train
