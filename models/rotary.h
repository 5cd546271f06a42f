// Rotary position embedding (RoFormer, Su et al. 2021) in the LLaMA / InternLM2 "rotate half"
// layout: the first and second halves of each head dimension form the rotated pairs.
// Positions come from the pack's position_ids, which restart at 0 for every sample, so each
// sample sees the same rotations it would see alone. Not here: RoPE scaling (dynamic NTK etc.).
#pragma once

#include <torch/torch.h>

namespace omnibal::models {

/// cos and sin tables for `positions` [T] int64: each [T, head_dim] in fp32, with
/// angle(t, i) = positions[t] * theta^(-2 (i mod head_dim/2) / head_dim).
struct RotaryTables {
  torch::Tensor cos, sin;
};

/// Builds the tables for head_dim (even) and base theta (10000 for LLaMA, 1e6 for InternLM2).
RotaryTables rotary_tables(const torch::Tensor& positions, int64_t head_dim, double theta);

/// Rotates x [T, heads, head_dim]: x * cos + rotate_half(x) * sin with
/// rotate_half([a, b]) = [-b, a]. Returns x's dtype.
torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables);

}  // namespace omnibal::models
