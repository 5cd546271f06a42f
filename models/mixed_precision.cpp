#include "models/mixed_precision.h"

#include <torch/csrc/autograd/custom_function.h>

namespace omnibal::models {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool reduced_precision(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

/// torch::embedding whose backward sums in fp32: the rows of the distinct ids are accumulated in
/// an fp32 [distinct, d] buffer (index_add_ over the occurrences, in order), then rounded once
/// into a zero [V, d] gradient of the weight's dtype.
struct EmbeddingFp32Grad : torch::autograd::Function<EmbeddingFp32Grad> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& weight,
                               const torch::Tensor& ids) {
    ctx->save_for_backward({ids});
    ctx->saved_data["rows"] = weight.size(0);
    return torch::embedding(weight, ids);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const torch::Tensor ids = ctx->get_saved_variables()[0].reshape({-1});
    const int64_t rows = ctx->saved_data["rows"].toInt(), d = grad[0].size(-1);
    const torch::Tensor g = grad[0].reshape({-1, d});
    const auto [distinct, inverse] = at::_unique(ids, /*sorted=*/true, /*return_inverse=*/true);
    const torch::Tensor sums =
        torch::zeros({distinct.size(0), d}, g.options().dtype(torch::kFloat32))
            .index_add_(0, inverse, g.to(torch::kFloat32));
    torch::Tensor weight_grad = torch::zeros({rows, d}, g.options());
    weight_grad.index_copy_(0, distinct, sums.to(g.scalar_type()));
    return {weight_grad, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor layer_norm_fp32(const torch::Tensor& x, const torch::Tensor& weight,
                              const torch::Tensor& bias, double eps) {
  if (!reduced_precision(x)) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  const torch::Tensor b = bias.defined() ? bias.to(torch::kFloat32) : bias;
  return torch::layer_norm(x.to(torch::kFloat32), {x.size(-1)}, weight.to(torch::kFloat32), b, eps)
      .to(x.scalar_type());
}

torch::Tensor embedding_lookup(const torch::Tensor& weight, const torch::Tensor& ids) {
  if (!reduced_precision(weight)) return torch::embedding(weight, ids);
  return EmbeddingFp32Grad::apply(weight, ids);
}

}  // namespace omnibal::models
