// The load of one micro-batch as the cost model sees it: the samples it holds (tiles and LLM
// tokens of each) and how the LLM sequence is laid out. An ISF pack is packed (variable-length
// attention isolates its samples, no padding); a baseline micro-batch of b samples is padded to
// its longest sample (b sequences of padded_len tokens). The simulator takes, per step and per
// DP rank, a list of these (m micro-batches), so micro-batches can differ in shape.
#pragma once

#include <cstdint>
#include <vector>

namespace omnibal::partition {

/// One micro-batch: per-sample tiles and tokens plus the padding layout.
struct MicroBatchLoad {
  std::vector<int32_t> sample_tiles;   ///< ViT tiles of each sample (thumbnail included)
  std::vector<int32_t> sample_tokens;  ///< LLM tokens of each sample (image tokens included)
  int32_t padded_len = 0;  ///< 0: packed (one sequence, no padding); else every sample is padded
                           ///< to this many tokens (>= its length), batch of samples() sequences

  /// Number of samples.
  int64_t samples() const { return static_cast<int64_t>(sample_tokens.size()); }
  /// Total ViT tiles (the ViT never pads: each tile is its own batch element).
  int64_t tiles() const;
  /// Real LLM tokens: sum of sample_tokens.
  int64_t real_tokens() const;
  /// LLM positions computed: real_tokens() when packed, samples() * padded_len when padded.
  int64_t computed_tokens() const;
  /// Sum over attention sequences of length^2 (causal attention cost): per-sample lengths when
  /// packed (varlen attention), padded_len^2 per sample when padded.
  double attention_square_sum() const;
  /// The same samples without padding (what the micro-batch would cost packed).
  MicroBatchLoad unpadded() const;

  /// A packed micro-batch (ISF pack). Throws omnibal::Error when the vectors differ in length.
  static MicroBatchLoad packed(std::vector<int32_t> tiles, std::vector<int32_t> tokens);
  /// A micro-batch padded to its longest sample (random / length-grouped baselines).
  static MicroBatchLoad padded_to_longest(std::vector<int32_t> tiles, std::vector<int32_t> tokens);
};

}  // namespace omnibal::partition
