#include "models/varlen_attention.h"

#include <torch/version.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "core/error.h"
#include "models/torch_compat.h"

// at::_flash_attention_forward / _backward with optional cumulative lengths, a 5-tuple forward
// (output, logsumexp, rng_state, unused, debug mask) and GQA in the kernel: LibTorch 2.5 on.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define OMNIBAL_FLASH_VARLEN 1
#else
#define OMNIBAL_FLASH_VARLEN 0
#endif

namespace omnibal::models {

namespace {

constexpr int64_t kFlashMaxHeadDim = 256;  // LibTorch's flash kernels: d <= 256, d % 8 == 0

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

/// Throws std::invalid_argument("flash_varlen_attention: <parts>").
template <typename... Parts> [[noreturn]] void throw_flash_argument(const Parts&... parts) {
  std::ostringstream os;
  os << "flash_varlen_attention: ";
  (os << ... << parts);
  throw std::invalid_argument(os.str());
}

void check_flash_qkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3)
    throw_flash_argument("expected q [T, Hq, d] and k, v [T, Hkv, d], got q ", q.sizes(), ", k ",
                         k.sizes(), ", v ", v.sizes());
  if (k.sizes() != v.sizes())
    throw_flash_argument("k and v must have the same shape, got k ", k.sizes(), ", v ", v.sizes());
  if (k.size(0) != q.size(0))
    throw_flash_argument("k/v have T = ", k.size(0), " tokens but q has T = ", q.size(0));
  if (k.size(2) != q.size(2))
    throw_flash_argument("k/v have head dim ", k.size(2), " but q has ", q.size(2));
  if (k.size(1) == 0 || q.size(1) % k.size(1) != 0)
    throw_flash_argument("the K/V heads (Hkv = ", k.size(1),
                         ") must divide the query heads (Hq = ", q.size(1), ")");
  if (k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type())
    throw_flash_argument("q, k, v must have one dtype, got ", q.scalar_type(), ", ",
                         k.scalar_type(), ", ", v.scalar_type());
}

/// Checks cu_seqlens against a pack of `tokens` rows; returns the longest sample's length.
int64_t check_flash_cu_seqlens(const torch::Tensor& cu_seqlens, int64_t tokens) {
  if (cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 2)
    throw_flash_argument("cu_seqlens must be 1-D with n + 1 >= 2 entries, got shape ",
                         cu_seqlens.sizes());
  if (cu_seqlens.scalar_type() != torch::kInt32 || !cu_seqlens.device().is_cpu())
    throw_flash_argument("cu_seqlens must be an int32 CPU tensor, got ", cu_seqlens.scalar_type(),
                         " on ", cu_seqlens.device());
  const torch::Tensor cu = cu_seqlens.contiguous();
  const int32_t* c = cu.data_ptr<int32_t>();
  const int64_t n = cu.size(0) - 1;
  if (c[0] != 0) throw_flash_argument("cu_seqlens must start at 0, got ", c[0]);
  if (c[n] != tokens)
    throw_flash_argument("cu_seqlens ends at ", c[n], " but the pack has T = ", tokens, " tokens");
  int64_t longest = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (c[i + 1] < c[i])
      throw_flash_argument("cu_seqlens must be non-decreasing, got cu_seqlens[", i + 1,
                           "] = ", c[i + 1], " < cu_seqlens[", i, "] = ", c[i]);
    longest = std::max<int64_t>(longest, c[i + 1] - c[i]);
  }
  return longest;
}

void check_flash_kernel_inputs(const torch::Tensor& q) {
  if (!q.is_cuda()) throw_flash_argument("q/k/v must be CUDA tensors, got ", q.device());
  if (q.scalar_type() != torch::kHalf && q.scalar_type() != torch::kBFloat16)
    throw_flash_argument("q/k/v must be fp16 or bf16, got ", q.scalar_type());
  const int64_t d = q.size(2);
  if (d <= 0 || d % 8 != 0 || d > kFlashMaxHeadDim)
    throw_flash_argument("head dim must be a multiple of 8 in (0, ", kFlashMaxHeadDim, "], got ",
                         d);
  if (!flash_varlen_built())
    throw_flash_argument("this build's LibTorch ", TORCH_VERSION, " is older than 2.5");
}

torch::Tensor last_dim_contiguous(const torch::Tensor& t) {
  return t.stride(-1) == 1 ? t : t.contiguous();
}

#if OMNIBAL_FLASH_VARLEN
/// The flash varlen kernel as an autograd function. Saves q, k, v, out, logsumexp [Hq, T] (fp32),
/// the kernel's rng state and its companion tensor and cu_seqlens for at::_flash_attention_backward,
/// exactly what LibTorch's own autograd formula of the op passes it.
struct FlashVarlenFunction : public torch::autograd::Function<FlashVarlenFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& cu, int64_t max_seqlen, bool causal) {
    auto [out, lse, rng_state, unused, debug_mask] =
        at::_flash_attention_forward(q, k, v, cu, cu, max_seqlen, max_seqlen, /*dropout_p=*/0.0,
                                     causal, /*return_debug_mask=*/false);
    ctx->save_for_backward({q, k, v, out, lse, rng_state, unused, cu});
    ctx->saved_data["max_seqlen"] = max_seqlen;
    ctx->saved_data["causal"] = causal;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto s = ctx->get_saved_variables();  // q, k, v, out, lse, rng_state, unused, cu
    const int64_t max_seqlen = ctx->saved_data["max_seqlen"].toInt();
    const bool causal = ctx->saved_data["causal"].toBool();
    auto [dq, dk, dv] = at::_flash_attention_backward(grads[0].contiguous(), s[0], s[1], s[2], s[3],
                                                      s[4], s[7], s[7], max_seqlen, max_seqlen,
                                                      /*dropout_p=*/0.0, causal, s[5], s[6]);
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
#endif

/// The per-sample loop; shapes already checked.
torch::Tensor per_sample_loop(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& cu_seqlens) {
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

}  // namespace

bool flash_varlen_built() { return OMNIBAL_FLASH_VARLEN != 0; }

VarlenKernel choose_varlen_kernel(c10::DeviceType device, c10::ScalarType dtype, int64_t head_dim) {
  const bool flash_dtype = dtype == torch::kHalf || dtype == torch::kBFloat16;
  const bool flash_head_dim = head_dim > 0 && head_dim % 8 == 0 && head_dim <= kFlashMaxHeadDim;
  return flash_varlen_built() && device == c10::DeviceType::CUDA && flash_dtype && flash_head_dim
             ? VarlenKernel::kFlashVarlen
             : VarlenKernel::kPerSample;
}

torch::Tensor flash_varlen_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& cu_seqlens,
                                     bool causal) {
  check_flash_qkv(q, k, v);
  const int64_t max_seqlen = check_flash_cu_seqlens(cu_seqlens, q.size(0));
  check_flash_kernel_inputs(q);
#if OMNIBAL_FLASH_VARLEN
  const torch::Tensor cu = cu_seqlens.to(q.device());
  return FlashVarlenFunction::apply(last_dim_contiguous(q), last_dim_contiguous(k),
                                    last_dim_contiguous(v), cu, max_seqlen, causal);
#else
  (void)max_seqlen;
  (void)causal;
  return {};  // unreachable: check_flash_kernel_inputs threw
#endif
}

torch::Tensor varlen_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const torch::Tensor& cu_seqlens) {
  check_shapes(q, k, v, cu_seqlens);
  if (choose_varlen_kernel(q.device().type(), q.scalar_type(), q.size(2)) ==
      VarlenKernel::kFlashVarlen) {
    OMNIBAL_CHECK(q.size(0) <= std::numeric_limits<int32_t>::max(), "varlen attention: the pack's ",
                  q.size(0), " tokens overflow flash attention's int32 cu_seqlens");
    return flash_varlen_attention(q, k, v, cu_seqlens.to(torch::kInt32), /*causal=*/true);
  }
  return per_sample_loop(q, k, v, cu_seqlens);
}

torch::Tensor varlen_attention_per_sample(const torch::Tensor& q, const torch::Tensor& k,
                                          const torch::Tensor& v, const torch::Tensor& cu_seqlens) {
  check_shapes(q, k, v, cu_seqlens);
  return per_sample_loop(q, k, v, cu_seqlens);
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
