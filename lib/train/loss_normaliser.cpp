#include "train/loss_normaliser.h"

#include "models/llm.h"

namespace omnibal::train {

LossNormaliser local_normaliser(const std::vector<models::PackBatch>& packs,
                                models::LossReduction reduction) {
  LossNormaliser n;
  for (const auto& p : packs) {
    if (!p.labels.defined() || p.labels.numel() == 0) continue;
    const torch::Tensor positions = models::label_targets(p.labels, p.cu_seqlens).first;
    n.label_tokens += positions.numel();
    n.normaliser += models::loss_normaliser(positions, p.cu_seqlens, reduction);
  }
  return n;
}

LossNormaliser global_normaliser(const LossNormaliser& local, comm::Communicator& world) {
  torch::Tensor v =
      torch::tensor({static_cast<double>(local.label_tokens), local.normaliser}, torch::kFloat64);
  world.all_reduce(v, comm::ReduceOp::kSum, "loss normaliser");
  return {static_cast<int64_t>(v[0].item<double>()), v[1].item<double>()};
}

torch::Tensor micro_batch_loss_term(const models::UnitState& out, models::LossReduction reduction) {
  return models::reduce_loss(out.token_loss, out.label_positions, out.cu_seqlens, reduction)
      .weighted_sum;
}

}  // namespace omnibal::train
