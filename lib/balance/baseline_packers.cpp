#include "balance/baseline_packers.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace omnibal::balance {
namespace {

std::vector<uint32_t> shuffled_ids(size_t n, uint64_t seed) {
  std::vector<uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  Rng rng(seed);
  rng.shuffle(ids);
  return ids;
}

// LLaVA split_to_even_chunks: `idx` sorted by length descending goes to `chunks` chunks; each
// index joins the chunk with the smallest total (first on ties) until the chunk holds its share.
std::vector<std::vector<uint32_t>> split_to_even_chunks(const std::vector<uint32_t>& idx,
                                                        const SampleTable& table, int chunks) {
  std::vector<std::vector<uint32_t>> out(chunks);
  const size_t per_chunk = idx.size() / chunks;
  std::vector<int64_t> total(chunks, 0);
  const int64_t full = std::numeric_limits<int64_t>::max();
  for (uint32_t id : idx) {
    const auto c =
        static_cast<size_t>(std::min_element(total.begin(), total.end()) - total.begin());
    out[c].push_back(id);
    total[c] += table.load[id].tokens();
    if (out[c].size() == per_chunk) total[c] = full;
  }
  return out;
}

void sort_by_tokens_desc(std::vector<uint32_t>& ids, const SampleTable& table) {
  std::stable_sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
    return table.load[a].tokens() > table.load[b].tokens();
  });
}

// Moves the samples over `cap` tokens (0: no cap) out of `ids` into `skipped`; under kError the
// first one throws, naming it.
void drop_over_cap(std::vector<uint32_t>& ids, const SampleTable& table, int64_t cap,
                   OnBadSample on_bad_sample, std::vector<uint32_t>& skipped) {
  if (cap <= 0) return;
  auto kept = ids.begin();
  for (uint32_t id : ids) {
    const int64_t t = table.load[id].tokens();
    if (t <= cap) {
      *kept++ = id;
      continue;
    }
    OMNIBAL_CHECK(on_bad_sample == OnBadSample::kSkip, table.describe(id), " has ", t,
                  " tokens, over the model's llm.max_seq_len ", cap,
                  " (no pack can hold it); shorten it or set data.on_bad_sample: skip");
    skipped.push_back(id);
  }
  ids.erase(kept, ids.end());
}

// Pushes ids[0, n) as consecutive packs of at most `batch` samples and `cap` tokens (0: no cap):
// a pack closes before a sample would take it over the cap (every sample fits by itself).
void push_capped(const uint32_t* ids, size_t n, size_t batch, int64_t cap, const SampleTable& table,
                 PackList& packs) {
  size_t start = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t t = table.load[ids[i]].tokens();
    if (i > start && (i - start == batch || (cap > 0 && tokens + t > cap))) {
      packs.push(ids + start, i - start, table);
      start = i;
      tokens = 0;
    }
    tokens += t;
  }
  if (n > start) packs.push(ids + start, n - start, table);
}

}  // namespace

PackResult random_micro_batches(const SampleTable& table, int batch, uint64_t seed,
                                int64_t max_tokens, OnBadSample on_bad_sample) {
  OMNIBAL_CHECK(batch >= 1, "balance.samples_per_pack: expected >= 1, got ", batch);
  auto ids = shuffled_ids(table.size(), seed);
  PackResult r{PackList(PackLayout::kPadded), {}, 0, 0};
  drop_over_cap(ids, table, max_tokens, on_bad_sample, r.skipped);
  push_capped(ids.data(), ids.size(), static_cast<size_t>(batch), max_tokens, table, r.packs);
  return r;
}

PackResult length_grouped_micro_batches(const SampleTable& table, int batch, int dp, int m,
                                        uint64_t seed, int64_t max_tokens,
                                        OnBadSample on_bad_sample) {
  OMNIBAL_CHECK(batch >= 1 && dp >= 1 && m >= 1, "length_grouped_micro_batches: expected ",
                "batch, dp, m >= 1, got ", batch, ", ", dp, ", ", m);
  auto ids = shuffled_ids(table.size(), seed);
  const size_t mega = static_cast<size_t>(dp) * batch, per_step = mega * m;
  PackResult r{PackList(PackLayout::kPadded), {}, 0, 0};
  drop_over_cap(ids, table, max_tokens, on_bad_sample, r.skipped);
  const auto per_pack = static_cast<size_t>(batch);
  size_t b = 0;
  for (; b + per_step <= ids.size(); b += per_step) {
    std::vector<std::vector<std::vector<uint32_t>>> micro(m);  // [micro][rank] chunk
    for (int k = 0; k < m; ++k) {
      std::vector<uint32_t> mb(ids.begin() + static_cast<std::ptrdiff_t>(b + k * mega),
                               ids.begin() + static_cast<std::ptrdiff_t>(b + (k + 1) * mega));
      sort_by_tokens_desc(mb, table);
      micro[k] = split_to_even_chunks(mb, table, dp);
    }
    for (int rank = 0; rank < dp; ++rank)
      for (int k = 0; k < m; ++k)
        push_capped(micro[k][rank].data(), micro[k][rank].size(), per_pack, max_tokens, table,
                    r.packs);
  }
  std::vector<uint32_t> tail(ids.begin() + static_cast<std::ptrdiff_t>(b), ids.end());
  sort_by_tokens_desc(tail, table);
  push_capped(tail.data(), tail.size(), per_pack, max_tokens, table, r.packs);
  return r;
}

PackResult best_fit_packing(const SampleTable& table, int64_t q_tok, OnBadSample on_bad_sample,
                            uint64_t seed) {
  OMNIBAL_CHECK(q_tok > 0, "best_fit_packing: expected a positive token budget, got ", q_tok);
  PackResult r{PackList(PackLayout::kConcatenated), {}, 0, 0};
  std::vector<uint32_t> ids(table.size());
  std::iota(ids.begin(), ids.end(), 0u);
  sort_by_tokens_desc(ids, table);
  std::vector<std::vector<uint32_t>> bins;
  std::multimap<int64_t, uint32_t> by_room;  // remaining tokens -> bin
  for (uint32_t id : ids) {
    const int64_t t = table.load[id].tokens();
    if (t > q_tok) {
      OMNIBAL_CHECK(on_bad_sample == OnBadSample::kSkip, table.describe(id), " has ", t,
                    " tokens, over the token budget Q_t = ", q_tok,
                    "; raise it or set data.on_bad_sample: skip");
      r.skipped.push_back(id);
      continue;
    }
    auto it = by_room.lower_bound(t);  // fullest bin that still fits: best fit
    uint32_t bin;
    int64_t room;
    if (it == by_room.end()) {
      bin = static_cast<uint32_t>(bins.size());
      bins.emplace_back();
      room = q_tok;
    } else {
      bin = it->second;
      room = it->first;
      by_room.erase(it);
    }
    bins[bin].push_back(id);
    by_room.emplace(room - t, bin);
  }
  auto order = shuffled_ids(bins.size(), seed);
  r.packs.reserve(bins.size(), table.size());
  for (uint32_t b : order) r.packs.push(bins[b].data(), bins[b].size(), table);
  return r;
}

}  // namespace omnibal::balance
