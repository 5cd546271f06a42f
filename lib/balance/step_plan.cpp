#include "balance/step_plan.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace omnibal::balance {
namespace {

void check_grid(int dp, int m) {
  OMNIBAL_CHECK(dp >= 1, "parallel.dp: expected >= 1 data-parallel ranks, got ", dp);
  OMNIBAL_CHECK(m >= 1, "parallel.micro_batches: expected m >= 1, got ", m);
}

// Sorts `ids` ascending by device cost, tiles first, then tokens, then id (a total order, so the
// result does not depend on the sort implementation). The key is packed into one 64-bit word
// (tiles in the top 20 bits, tokens in the low 44) and sorted with the id as a contiguous pair,
// which keeps the sort cache-friendly at 250k+ packs.
void sort_by_cost(const PackList& packs, std::vector<uint32_t>& ids) {
  static_assert(kLoadDims == 2, "sort_by_cost packs (tiles, tokens); extend the key for more");
  constexpr int64_t kTileLimit = int64_t{1} << 20, kTokenLimit = int64_t{1} << 44;
  std::vector<std::pair<uint64_t, uint32_t>> key(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t tiles = packs.cost(ids[i], kTiles), tokens = packs.cost(ids[i], kTokens);
    OMNIBAL_CHECK(tiles < kTileLimit && tokens < kTokenLimit, "placement: pack ", ids[i], " load (",
                  tiles, " tiles, ", tokens, " tokens) exceeds the sort key range");
    key[i] = {(static_cast<uint64_t>(tiles) << 44) | static_cast<uint64_t>(tokens), ids[i]};
  }
  std::sort(key.begin(), key.end());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = key[i].second;
}

// Appends the steps of one source (its packs sorted by cost) to `steps`; the tail goes to
// `carried`. Each step's packs are dealt in snake order over ranks, then ranks are permuted.
void cut_steps(const std::vector<uint32_t>& sorted, int dp, int m, Rng& rng,
               std::vector<std::vector<uint32_t>>& steps, std::vector<uint32_t>& carried) {
  const size_t per_step = static_cast<size_t>(dp) * m;
  const size_t tail = sorted.size() % per_step;
  carried.insert(carried.end(), sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(tail));
  std::vector<uint32_t> rank_order(dp);
  for (size_t b = tail; b < sorted.size(); b += per_step) {
    std::vector<uint32_t> step(per_step);
    std::iota(rank_order.begin(), rank_order.end(), 0u);
    rng.shuffle(rank_order);
    for (size_t k = 0; k < per_step; ++k) {
      const size_t micro = k / dp, pos = k % dp;
      const size_t rank = (micro % 2 == 0) ? pos : dp - 1 - pos;
      step[rank_order[rank] * m + micro] = sorted[b + k];
    }
    steps.push_back(std::move(step));
  }
}

StepPlan finish(std::vector<std::vector<uint32_t>>& steps, std::vector<uint32_t> carried, int dp,
                int m, Rng& rng) {
  std::vector<uint32_t> order(steps.size());
  std::iota(order.begin(), order.end(), 0u);
  rng.shuffle(order);  // no length curriculum: step order is independent of step load
  StepPlan plan;
  plan.dp = dp;
  plan.micro_batches = m;
  plan.slots.reserve(steps.size() * plan.packs_per_step());
  for (uint32_t s : order) plan.slots.insert(plan.slots.end(), steps[s].begin(), steps[s].end());
  plan.carried = std::move(carried);
  return plan;
}

}  // namespace

StepPlan place_in_order(size_t packs, int dp, int m) {
  check_grid(dp, m);
  StepPlan plan;
  plan.dp = dp;
  plan.micro_batches = m;
  const size_t full = packs - packs % plan.packs_per_step();
  plan.slots.resize(full);
  std::iota(plan.slots.begin(), plan.slots.end(), 0u);
  for (size_t p = full; p < packs; ++p) plan.carried.push_back(static_cast<uint32_t>(p));
  return plan;
}

StepPlan place_load_grouped(const PackList& packs, int dp, int m, uint64_t seed) {
  return place_by_source(packs, std::vector<uint32_t>(packs.size(), 0u), dp, m, seed);
}

StepPlan place_by_source(const PackList& packs, const std::vector<uint32_t>& pack_source, int dp,
                         int m, uint64_t seed) {
  check_grid(dp, m);
  OMNIBAL_CHECK(pack_source.size() == packs.size(), "place_by_source: ", pack_source.size(),
                " source ids for ", packs.size(), " packs");
  uint32_t sources = 0;
  for (uint32_t s : pack_source) sources = std::max(sources, s + 1);
  std::vector<std::vector<uint32_t>> by_source(sources);
  for (uint32_t p = 0; p < packs.size(); ++p) by_source[pack_source[p]].push_back(p);
  Rng rng(seed ^ 0x5eed51ace0ULL);
  std::vector<std::vector<uint32_t>> steps;
  std::vector<uint32_t> carried;
  for (auto& ids : by_source) {
    sort_by_cost(packs, ids);
    cut_steps(ids, dp, m, rng, steps, carried);
  }
  return finish(steps, std::move(carried), dp, m, rng);
}

}  // namespace omnibal::balance
