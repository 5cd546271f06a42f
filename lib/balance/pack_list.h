// PackList: the packs a packer produced, in compressed-row form (one flat member array plus
// offsets), with each pack's load kept beside it so placement and metrics never revisit samples.
//
// A pack is one micro-batch on one device (docs/conventions.md). Two layouts exist:
//  - concatenated (ISF, best-fit): members are packed into one sequence; the device cost of
//    every dimension is the sum over members, and there is no padding;
//  - padded (random / length-grouped micro-batches): members are separate rows padded to the
//    longest, so the LLM cost is max_tokens * members (docs/paper.md), tiles still add up.
// This file does not decide which samples go together; packers do.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "balance/sample_table.h"
#include "core/choices.h"

namespace omnibal::balance {

/// How a pack's members are laid out on the device (decides the LLM cost and the padding).
enum class PackLayout { kConcatenated, kPadded };

/// Summed load of one pack, plus what padding and attention cost need.
struct PackLoad {
  std::array<int64_t, kLoadDims> sum{};  ///< sum of member loads (tiles, tokens)
  int64_t sum_sq_tokens = 0;             ///< sum of squared member token lengths (tokens^2)
  int32_t max_tokens = 0;                ///< longest member in tokens
  int32_t count = 0;                     ///< members

  /// Adds one member of `tiles` ViT tiles and `tokens` LLM tokens.
  void add(int32_t tiles, int32_t tokens) {
    sum[kTiles] += tiles;
    sum[kTokens] += tokens;
    sum_sq_tokens += static_cast<int64_t>(tokens) * tokens;
    max_tokens = std::max(max_tokens, tokens);
    ++count;
  }
};

/// Packs in compressed-row form: pack p holds members[offsets[p] .. offsets[p+1]).
class PackList {
 public:
  explicit PackList(PackLayout layout = PackLayout::kConcatenated) : layout_(layout) {
    offsets_.push_back(0);
  }

  PackLayout layout() const { return layout_; }
  size_t size() const { return load_.size(); }
  /// Samples over all packs.
  size_t samples() const { return members_.size(); }
  const uint32_t* begin(size_t p) const { return members_.data() + offsets_[p]; }
  const uint32_t* end(size_t p) const { return members_.data() + offsets_[p + 1]; }
  const PackLoad& load(size_t p) const { return load_[p]; }
  const std::vector<uint32_t>& members() const { return members_; }

  /// Device cost of pack p in dimension d: the sum, except padded tokens (max * count).
  int64_t cost(size_t p, int d) const {
    const PackLoad& l = load_[p];
    if (d == kTokens && layout_ == PackLayout::kPadded)
      return static_cast<int64_t>(l.max_tokens) * l.count;
    return l.sum[d];
  }
  /// Sum over the sequences of pack p of their squared length (tokens^2), what causal
  /// attention costs: each member's own length when concatenated (variable-length attention),
  /// the padded length max_tokens for every member when padded.
  int64_t token_sq_cost(size_t p) const {
    const PackLoad& l = load_[p];
    if (layout_ == PackLayout::kPadded)
      return static_cast<int64_t>(l.max_tokens) * l.max_tokens * l.count;
    return l.sum_sq_tokens;
  }
  /// Padding tokens of pack p (0 when concatenated).
  int64_t pad_tokens(size_t p) const { return cost(p, kTokens) - load_[p].sum[kTokens]; }

  /// Appends one pack of `n` sample ids, computing its load from `table`.
  void push(const uint32_t* ids, size_t n, const SampleTable& table);
  /// Appends one pack whose load the caller already summed (the ISF hot path).
  void push(const uint32_t* ids, size_t n, const PackLoad& load);
  /// Adds one member to the open pack; close_pack() ends it (no per-pack allocation).
  void add_member(uint32_t id) { members_.push_back(id); }
  /// Closes the pack opened by add_member calls, with its load summed by the caller.
  void close_pack(const PackLoad& load) {
    offsets_.push_back(static_cast<uint32_t>(members_.size()));
    load_.push_back(load);
  }
  /// Appends every pack of `other`, mapping its sample ids through `id_map` (other id -> id).
  void append(const PackList& other, const std::vector<uint32_t>& id_map);
  /// Appends every pack of `other` as is (same sample ids).
  void append(const PackList& other);
  /// Reserves room for `packs` packs and `samples` members.
  void reserve(size_t packs, size_t samples);

 private:
  PackLayout layout_;
  std::vector<uint32_t> members_;
  std::vector<uint32_t> offsets_;
  std::vector<PackLoad> load_;
};

using ::omnibal::OnBadSample;  ///< data.on_bad_sample (core/choices.h)

/// Parses "error" | "skip" (`data.on_bad_sample`: what to do with a sample that cannot be
/// packed, over a pack budget); throws omnibal::Error naming `key` otherwise.
inline OnBadSample parse_on_bad_sample(const std::string& value, const std::string& key) {
  return parse_choice<OnBadSample>(value, key);
}

/// Output of every packer: the packs, plus the samples it skipped (sample ids, counted in the
/// metrics), plus ISF's bookkeeping.
struct PackResult {
  PackList packs;
  std::vector<uint32_t> skipped;  ///< samples over a budget under OnBadSample::kSkip
  int rounds = 0;                 ///< ISF grouping rounds run (0 for one-pass packers)
  int64_t unaccepted_packs = 0;   ///< ISF packs emitted by the last round without passing
  /// ISF only: whether the token budget decided anything — a sample skipped, a pack closed or
  /// accepted for its tokens where its tiles alone would not have. When false, ISF with the same
  /// Q_v, seed and rounds and larger token budgets (Q_t and Q'_t both no smaller) packs exactly
  /// the same (the budget search reuses the run).
  bool tokens_decided = true;
};

}  // namespace omnibal::balance
