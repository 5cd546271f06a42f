#include "balance/isf_packer.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace omnibal::balance {
namespace {

// One pool entry: the sample id and its load side by side, so a grouping pass reads one
// contiguous 12-byte record per sample after the shuffle.
struct Item {
  uint32_t id;
  std::array<int32_t, kLoadDims> v;
};

using Caps = std::array<int64_t, kLoadDims>;

// Builds the pool, applying the over-budget policy.
std::vector<Item> make_pool(const SampleTable& table, const std::vector<uint32_t>* ids,
                            const IsfOptions& o, std::vector<uint32_t>& skipped,
                            bool& tokens_decided) {
  const Caps caps = o.budgets.caps();
  const size_t n = ids ? ids->size() : table.size();
  std::vector<Item> pool;
  pool.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    const uint32_t id = ids ? (*ids)[k] : static_cast<uint32_t>(k);
    OMNIBAL_CHECK(id < table.size(), "IsfPacker: sample id ", id, " >= table size ", table.size());
    const Load& l = table.load[id];
    if (over_budget(l, caps)) {
      OMNIBAL_CHECK(o.on_bad_sample == OnBadSample::kSkip, table.describe(id), " has ", l.tiles(),
                    " tiles and ", l.tokens(),
                    " tokens, over the pack budget (Q_v = ", caps[kTiles],
                    " tiles, Q_t = ", caps[kTokens],
                    " tokens); raise the budget or set data.on_bad_sample: skip");
      skipped.push_back(id);
      tokens_decided |= l.tiles() <= caps[kTiles];
      continue;
    }
    pool.push_back(Item{id, l.v});
  }
  return pool;
}

// One ISF round: shuffle, greedy next-fit walk, and filter. Accepted packs (all packs when
// `keep_all`) go to `out`; members of the rest go to `rest`. Returns the packs kept unaccepted.
// Sets `tokens_decided` when a pack closes or passes for its tokens alone (PackResult).
int64_t group_round(std::vector<Item>& pool, uint64_t seed, const Caps& caps, const Caps& thresh,
                    bool keep_all, PackList& out, std::vector<Item>& rest, bool& tokens_decided) {
  Rng rng(seed);
  rng.shuffle(pool);
  int64_t unaccepted = 0;
  auto emit = [&](size_t b, size_t e, const PackLoad& load) {
    bool accept = false;
    for (int d = 0; d < kLoadDims; ++d) accept |= load.sum[d] >= thresh[d];
    tokens_decided |= accept && load.sum[kTiles] < thresh[kTiles];
    if (accept || keep_all) {
      for (size_t i = b; i < e; ++i) out.add_member(pool[i].id);
      out.close_pack(load);
      unaccepted += !accept;
    } else {
      rest.insert(rest.end(), pool.begin() + static_cast<std::ptrdiff_t>(b),
                  pool.begin() + static_cast<std::ptrdiff_t>(e));
    }
  };
  PackLoad open;
  size_t start = 0;
  for (size_t i = 0; i < pool.size(); ++i) {
    const auto& v = pool[i].v;
    bool overflow = false;
    for (int d = 0; d < kLoadDims; ++d) overflow |= open.sum[d] + v[d] > caps[d];
    if (overflow) {
      tokens_decided |= open.sum[kTiles] + v[kTiles] <= caps[kTiles];
      emit(start, i, open);
      open = PackLoad{};
      start = i;
    }
    for (int d = 0; d < kLoadDims; ++d) open.sum[d] += v[d];
    open.sum_sq_tokens += static_cast<int64_t>(v[kTokens]) * v[kTokens];
    open.max_tokens = std::max(open.max_tokens, v[kTokens]);
    ++open.count;
  }
  if (open.count > 0) emit(start, pool.size(), open);  // always flush the open pack
  return unaccepted;
}

PackResult run_isf(const SampleTable& table, const std::vector<uint32_t>* ids,
                   const IsfOptions& o) {
  PackResult result;
  result.tokens_decided = false;
  std::vector<Item> pool = make_pool(table, ids, o, result.skipped, result.tokens_decided);
  result.packs.reserve(pool.size() / 2 + 1, pool.size());
  const Caps caps = o.budgets.caps(), thresh = o.budgets.thresholds();
  std::vector<Item> rest;
  rest.reserve(pool.size());
  for (int r = 0; r < o.iterations && !pool.empty(); ++r) {
    const bool last = r + 1 == o.iterations;
    rest.clear();
    result.unaccepted_packs = group_round(pool, o.seed + static_cast<uint64_t>(r), caps, thresh,
                                          last, result.packs, rest, result.tokens_decided);
    result.rounds = r + 1;
    pool.swap(rest);
  }
  return result;
}

}  // namespace

void IsfBudgets::validate() const {
  OMNIBAL_CHECK(q_vit > 0, "balance.q_vit: expected a positive tile budget Q_v, got ", q_vit);
  OMNIBAL_CHECK(q_tok > 0, "balance.q_tok: expected a positive token budget Q_t, got ", q_tok);
  OMNIBAL_CHECK(q_tok_thresh > 0 && q_tok_thresh <= q_tok,
                "balance.q_tok_thresh: expected 0 < Q'_t <= Q_t = ", q_tok, ", got ", q_tok_thresh);
}

bool over_budget(const Load& load, const std::array<int64_t, kLoadDims>& caps) {
  for (int d = 0; d < kLoadDims; ++d)
    if (load.v[d] > caps[d]) return true;
  return false;
}

IsfPacker::IsfPacker(IsfOptions options) : options_(options) {
  options_.budgets.validate();
  OMNIBAL_CHECK(options_.iterations >= 1, "balance.iterations: expected T >= 1, got ",
                options_.iterations);
}

PackResult IsfPacker::pack(const SampleTable& table) const {
  return run_isf(table, nullptr, options_);
}

PackResult IsfPacker::pack(const SampleTable& table, const std::vector<uint32_t>& ids) const {
  return run_isf(table, &ids, options_);
}

}  // namespace omnibal::balance
