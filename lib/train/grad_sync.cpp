#include "train/grad_sync.h"

#include <cmath>

namespace omnibal::train {

namespace {

void reduce_bucket(std::vector<torch::Tensor>& grads, comm::Communicator& dp) {
  if (grads.empty()) return;
  std::vector<torch::Tensor> flat;
  for (const auto& g : grads) flat.push_back(g.reshape(-1));
  torch::Tensor bucket = torch::cat(flat);
  dp.all_reduce(bucket, comm::ReduceOp::kSum, "gradient all-reduce");
  int64_t offset = 0;
  for (auto& g : grads) {
    const int64_t n = g.numel();
    g.copy_(bucket.slice(0, offset, offset + n).view_as(g));
    offset += n;
  }
  grads.clear();
}

}  // namespace

void all_reduce_gradients(const std::vector<torch::Tensor>& params, comm::Communicator& dp,
                          int64_t bucket_bytes) {
  if (dp.size() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> bucket;
  int64_t bytes = 0;
  for (const auto& p : params) {
    if (!p.grad().defined()) const_cast<torch::Tensor&>(p).mutable_grad() = torch::zeros_like(p);
    const int64_t b = p.numel() * static_cast<int64_t>(p.element_size());
    if (!bucket.empty() && bytes + b > bucket_bytes) reduce_bucket(bucket, dp), bytes = 0;
    bucket.push_back(p.grad());
    bytes += b;
  }
  reduce_bucket(bucket, dp);
}

double global_grad_norm(const std::vector<torch::Tensor>& params, comm::Communicator* pipeline) {
  torch::Tensor sq = torch::zeros({1}, torch::kFloat64);
  for (const auto& p : params)
    if (p.grad().defined()) sq += p.grad().to(torch::kFloat64).pow(2).sum();
  if (pipeline != nullptr && pipeline->size() > 1)
    pipeline->all_reduce(sq, comm::ReduceOp::kSum, "gradient norm");
  return std::sqrt(sq.item<double>());
}

double clip_gradients(const std::vector<torch::Tensor>& params, double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  if (coef < 1.0) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params)
      if (p.grad().defined()) p.grad().mul_(coef);
  }
  return coef;
}

}  // namespace omnibal::train
