#include "models/varlen_attention.h"

#include "core/error.h"
#include "models/torch_compat.h"

namespace omnibal::models {

namespace {

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& cu_seqlens) {
  OMNIBAL_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
                "varlen attention: expected q/k/v as [T, heads, head_dim], got ", q.sizes(), " ",
                k.sizes(), " ", v.sizes());
  OMNIBAL_CHECK(k.sizes() == v.sizes() && q.size(0) == k.size(0) && q.size(2) == k.size(2) &&
                    q.size(1) % k.size(1) == 0,
                "varlen attention: expected k, v of [T, Hkv, d] with Hq % Hkv == 0, got q ",
                q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  OMNIBAL_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.device().is_cpu() &&
                    cu_seqlens.scalar_type() == torch::kInt64,
                "varlen attention: cu_seqlens must be a 1-D int64 CPU tensor");
  OMNIBAL_CHECK(cu_seqlens[-1].item<int64_t>() == q.size(0),
                "varlen attention: cu_seqlens ends at ", cu_seqlens[-1].item<int64_t>(),
                " but the pack has T = ", q.size(0), " tokens");
}

}  // namespace

torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const torch::Tensor& cu_seqlens) {
  check_shapes(q, k, v, cu_seqlens);
  const auto cu = cu_seqlens.accessor<int64_t, 1>();
  std::vector<torch::Tensor> outputs;
  outputs.reserve(cu_seqlens.size(0) - 1);
  for (int64_t i = 0; i + 1 < cu_seqlens.size(0); ++i) {
    const int64_t begin = cu[i], len = cu[i + 1] - cu[i];
    // [L, H, d] -> [H, L, d] for the per-sample kernel, back to [L, H, d] afterwards.
    auto seg = [&](const torch::Tensor& t) { return t.narrow(0, begin, len).transpose(0, 1); };
    outputs.push_back(compat::causal_gqa_attention(seg(q), seg(k), seg(v)).transpose(0, 1));
  }
  return outputs.size() == 1 ? outputs[0].contiguous() : torch::cat(outputs, 0);
}

torch::Tensor block_causal_mask(const torch::Tensor& cu_seqlens, const torch::Tensor& like) {
  const int64_t tokens = cu_seqlens[-1].item<int64_t>();
  const torch::Tensor lengths = cu_seqlens.slice(0, 1) - cu_seqlens.slice(0, 0, -1);
  const torch::Tensor sample =
      torch::repeat_interleave(torch::arange(lengths.size(0), torch::kInt64),
                               lengths);  // [T] sample index of each token
  const torch::Tensor pos = torch::arange(tokens, torch::kInt64);
  const torch::Tensor visible = sample.unsqueeze(1)
                                    .eq(sample.unsqueeze(0))
                                    .logical_and(pos.unsqueeze(0).le(pos.unsqueeze(1)));
  return torch::zeros({tokens, tokens}, like.options())
      .masked_fill(visible.logical_not().to(like.device()),
                   -std::numeric_limits<float>::infinity());
}

torch::Tensor dense_reference_attention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& cu_seqlens) {
  check_shapes(q, k, v, cu_seqlens);
  const int64_t group = q.size(1) / k.size(1);
  const torch::Tensor ke = k.repeat_interleave(group, 1), ve = v.repeat_interleave(group, 1);
  const torch::Tensor out =
      compat::math_attention(q.transpose(0, 1), ke.transpose(0, 1), ve.transpose(0, 1),
                             block_causal_mask(cu_seqlens, q));
  return out.transpose(0, 1).contiguous();
}

}  // namespace omnibal::models
