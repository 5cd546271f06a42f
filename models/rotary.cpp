#include "models/rotary.h"

namespace omnibal::models {

RotaryTables rotary_tables(const torch::Tensor& positions, int64_t head_dim, double theta) {
  const auto f64 = torch::dtype(torch::kFloat64).device(positions.device());
  // inv_freq_i = theta^(-2i / d), computed in fp64 then used in fp32 as HF LLaMA does.
  const torch::Tensor exponents =
      torch::arange(0, head_dim, 2, f64) / static_cast<double>(head_dim);
  const torch::Tensor inv_freq = torch::pow(theta, -exponents).to(torch::kFloat32);
  const torch::Tensor angles = positions.to(torch::kFloat32).unsqueeze(1) * inv_freq.unsqueeze(0);
  const torch::Tensor full = torch::cat({angles, angles}, 1);  // [T, head_dim]
  return {full.cos(), full.sin()};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables) {
  // In fp32 whatever x's dtype (bf16 training), as Megatron applies RoPE; back to x's dtype.
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor xf = x.to(torch::kFloat32);
  const torch::Tensor cos = tables.cos.unsqueeze(1);  // [T, 1, d], fp32
  const torch::Tensor sin = tables.sin.unsqueeze(1);
  const torch::Tensor rotated =
      torch::cat({-xf.narrow(-1, half, half), xf.narrow(-1, 0, half)}, -1);
  return (xf * cos + rotated * sin).to(x.scalar_type());
}

}  // namespace omnibal::models
