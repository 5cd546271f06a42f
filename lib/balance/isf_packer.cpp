#include "balance/isf_packer.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace omnibal::balance {
namespace {

// One pool entry of the general path: the sample id and its load side by side, so a grouping
// pass reads one contiguous 12-byte record per sample after the shuffle.
struct Item {
  uint32_t id;
  std::array<int32_t, kLoadDims> v;

  static bool make(uint32_t id, const Load& l, Item& out) {
    out = Item{id, l.v};
    return true;
  }
};

// One pool entry of the packed path: a single word holding tokens in bits 0-15, tiles in bits
// 32-47 and the sample id's 30 bits in bits 16-30 and 48-62 (bits 31 and 63 stay 0). make()
// says whether a sample fits: loads in [0, 65535], id below 2^30.
struct PackedItem {
  uint64_t word;

  static constexpr uint64_t kLoadMask = 0x0000ffff0000ffffULL;  // tokens and tiles
  static bool make(uint32_t id, const Load& l, PackedItem& out) {
    constexpr int32_t kMax = 0xffff;
    if (l.tiles() < 0 || l.tiles() > kMax || l.tokens() < 0 || l.tokens() > kMax ||
        id >= (uint32_t{1} << 30))
      return false;
    out.word = static_cast<uint64_t>(l.tokens()) | static_cast<uint64_t>(l.tiles()) << 32 |
               static_cast<uint64_t>(id & 0x7fff) << 16 | static_cast<uint64_t>(id >> 15) << 48;
    return true;
  }
  uint64_t load() const { return word & kLoadMask; }  // tiles << 32 | tokens
  uint32_t id() const {
    return static_cast<uint32_t>(((word >> 16) & 0x7fff) | ((word >> 48) & 0x7fff) << 15);
  }
  int32_t tiles() const { return static_cast<int32_t>((word >> 32) & 0xffff); }
  int32_t tokens() const { return static_cast<int32_t>(word & 0xffff); }
};

using Caps = std::array<int64_t, kLoadDims>;

// Builds the pool, applying the over-budget policy. Returns false, with `pool` incomplete, when
// a sample inside the budgets does not fit an entry of type T.
template <class T> bool make_pool(const SampleTable& table, const std::vector<uint32_t>* ids,
                                  const IsfOptions& o, std::vector<uint32_t>& skipped,
                                  bool& tokens_decided, std::vector<T>& pool) {
  const Caps caps = o.budgets.caps();
  const size_t n = ids ? ids->size() : table.size();
  pool.clear();
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
    T item;
    if (!T::make(id, l, item)) return false;
    pool.push_back(item);
  }
  return true;
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
    open.add(v[kTiles], v[kTokens]);
  }
  if (open.count > 0) emit(start, pool.size(), open);  // always flush the open pack
  return unaccepted;
}

// The general path: any loads and budgets, one pack's running load at a time.
void run_isf_general(std::vector<Item>& pool, const IsfOptions& o, PackResult& result) {
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
}

// ---- the packed path ----
// The walk keeps the open pack's room left, (Q_v - tiles) and (Q_t - tokens), as two 32-bit
// fields of one word, each with its top bit set as a guard. Subtracting a sample's load word
// (tiles << 32 | tokens) clears a field's guard exactly when that sample does not fit in that
// dimension (fields stay below 2^31 and sample loads below 2^16, so no borrow crosses a field):
// one subtraction and one mask test per sample decide both budgets. The walk holds the room
// complemented (~(room - w) = ~room + w, so the test is an addition and one bit test) and only
// records where packs close and their room; acceptance, the token-decision flag and the moves
// are worked out per pack afterwards. Packs are identical to the general path's (tests compare).

constexpr uint64_t kGuard = uint64_t{1} << 31;         // guard bit of a 32-bit field
constexpr uint64_t kGuards = (kGuard << 32) | kGuard;  // both fields' guards
constexpr int64_t kPackedBudgetMax = static_cast<int64_t>(kGuard) - 1;

// Budgets as room words: `full` is an empty pack's room; a pack passes when its tile room is 0
// (tiles = Q'_v = Q_v) or its token room is at most Q_t - Q'_t.
struct PackedBudgets {
  uint64_t full;
  uint32_t pass_tokens_room;  // guard | (Q_t - Q'_t)

  explicit PackedBudgets(const IsfBudgets& b)
      : full((static_cast<uint64_t>(b.q_vit) << 32 | static_cast<uint64_t>(b.q_tok)) | kGuards),
        pass_tokens_room(
            static_cast<uint32_t>(kGuard | static_cast<uint64_t>(b.q_tok - b.q_tok_thresh))) {}
  static bool tiles_full(uint64_t room) { return (room >> 32) == kGuard; }
  bool passes(uint64_t room) const {
    return tiles_full(room) | (static_cast<uint32_t>(room) <= pass_tokens_room);
  }
};

// Where the packs of one walk close: pack k is pool[end[k - 1], end[k]) (end[-1] = 0), with
// room ~not_room[k] left when it closed; the last one is the flushed open pack.
struct PackCloses {
  std::vector<uint32_t> end;
  std::vector<uint64_t> not_room;
  uint32_t count = 0;

  uint64_t room(uint32_t k) const { return ~not_room[k]; }
};

// The greedy next-fit walk over the shuffled pool (not empty). Branch-free: a pack closes about
// every fourth sample, too irregularly to predict.
void packed_walk(const std::vector<PackedItem>& pool, uint64_t full, PackCloses& c) {
  const PackedItem* p = pool.data();
  const auto n = static_cast<uint32_t>(pool.size());
  uint32_t* end = c.end.data();
  uint64_t* not_room_at = c.not_room.data();
  const uint64_t not_full = ~full;
  uint32_t k = 0;
  uint64_t not_room = not_full;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t w = p[i].load();
    const uint64_t not_left = not_room + w;           // ~(room - w)
    const bool overflow = (not_left & kGuards) != 0;  // a guard borrowed: w does not fit
    end[k] = i;
    not_room_at[k] = not_room;
    k += overflow;
    not_room = overflow ? not_full + w : not_left;
  }
  end[k] = n;
  not_room_at[k] = not_room;
  c.count = k + 1;
}

// Whether packs closed or passed for their tokens alone: a pack closed by a sample whose tiles
// fit, or a pack that passed on tokens with tiles below Q_v (PackResult::tokens_decided).
bool packed_tokens_decided(const std::vector<PackedItem>& pool, const PackedBudgets& b,
                           const PackCloses& c) {
  uint64_t decided = 0;
  for (uint32_t k = 0; k < c.count; ++k) {
    const uint64_t room = c.room(k);
    if (k + 1 < c.count) decided |= (room - pool[c.end[k]].load()) >> 63;  // tiles fit
    decided |= static_cast<uint64_t>(b.passes(room) & !PackedBudgets::tiles_full(room));
  }
  return decided != 0;
}

// Appends pool[begin, end) to `out` as one pack, summing its load.
void emit_packed(const PackedItem* pool, uint32_t begin, uint32_t end, PackList& out) {
  PackLoad load;
  for (uint32_t i = begin; i < end; ++i) {
    const PackedItem& it = pool[i];
    out.add_member(it.id());
    load.add(it.tiles(), it.tokens());
  }
  out.close_pack(load);
}

// A round before the last, after the walk: moves the packs that pass to `out` and compacts the
// rest, in walk order, to the front of `pool`, one stretch of consecutive failing packs at a
// time (moving left never overwrites a pack not yet visited).
void packed_filter(std::vector<PackedItem>& pool, const PackedBudgets& b, const PackCloses& c,
                   PackList& out) {
  PackedItem* p = pool.data();
  uint32_t begin = 0, to = 0, stretch = 0;  // stretch: first sample of the failing packs
  auto move_stretch = [&](uint32_t until) {
    if (stretch != to) std::memmove(p + to, p + stretch, (until - stretch) * sizeof(PackedItem));
    to += until - stretch;
  };
  for (uint32_t k = 0; k < c.count; ++k) {
    const uint32_t end = c.end[k];
    if (b.passes(c.room(k))) {
      move_stretch(begin);
      emit_packed(p, begin, end, out);
      stretch = end;
    }
    begin = end;
  }
  move_stretch(begin);
  pool.resize(to);
}

// The last round, after the walk: every pack goes to `out`. Returns the packs that did not pass.
int64_t packed_keep_all(const std::vector<PackedItem>& pool, const PackedBudgets& b,
                        const PackCloses& c, PackList& out) {
  int64_t unaccepted = 0;
  uint32_t begin = 0;
  for (uint32_t k = 0; k < c.count; ++k) {
    unaccepted += !b.passes(c.room(k));
    emit_packed(pool.data(), begin, c.end[k], out);
    begin = c.end[k];
  }
  return unaccepted;
}

void run_isf_packed(std::vector<PackedItem>& pool, const IsfOptions& o, PackResult& result) {
  result.packs.reserve(pool.size() / 2 + 1, pool.size());
  const PackedBudgets b(o.budgets);
  PackCloses closes;
  closes.end.resize(pool.size() + 1);
  closes.not_room.resize(pool.size() + 1);
  for (int r = 0; r < o.iterations && !pool.empty(); ++r) {
    Rng rng(o.seed + static_cast<uint64_t>(r));
    rng.shuffle(pool);
    packed_walk(pool, b.full, closes);
    result.tokens_decided |= packed_tokens_decided(pool, b, closes);
    result.rounds = r + 1;
    if (r + 1 == o.iterations) {
      result.unaccepted_packs = packed_keep_all(pool, b, closes, result.packs);
      pool.clear();
    } else {
      result.unaccepted_packs = 0;
      packed_filter(pool, b, closes, result.packs);
    }
  }
}

PackResult run_isf(const SampleTable& table, const std::vector<uint32_t>* ids, const IsfOptions& o,
                   bool allow_packed) {
  PackResult result;
  result.tokens_decided = false;
  if (allow_packed && o.budgets.q_vit <= kPackedBudgetMax && o.budgets.q_tok <= kPackedBudgetMax) {
    std::vector<PackedItem> pool;
    if (make_pool(table, ids, o, result.skipped, result.tokens_decided, pool)) {
      run_isf_packed(pool, o, result);
      return result;
    }
    result.skipped.clear();  // a load over 65535: start again on the general path
    result.tokens_decided = false;
  }
  std::vector<Item> pool;
  make_pool(table, ids, o, result.skipped, result.tokens_decided, pool);
  run_isf_general(pool, o, result);
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
  return run_isf(table, nullptr, options_, true);
}

PackResult IsfPacker::pack(const SampleTable& table, const std::vector<uint32_t>& ids) const {
  return run_isf(table, &ids, options_, true);
}

PackResult IsfPacker::pack_general(const SampleTable& table,
                                   const std::vector<uint32_t>& ids) const {
  return run_isf(table, &ids, options_, false);
}

}  // namespace omnibal::balance
