#include "memory/multi_state_knapsack.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>

#include "core/error.h"

namespace omnibal::memory {
namespace {

/// A point of a chunk's Pareto set: its K and W in granules, its value, and how it was reached
/// (the point of the previous layer and the option the item took).
struct Point {
  long k = 0, w = 0;
  double value = 0;
  int prev = -1, option = -1;
};

using Layer = std::vector<Point>;

/// Keeps the points no other point dominates (k <=, w <=, value >=); among equal points the
/// first. Sorted by k, then w, then value descending; the sweep keeps a staircase of the best
/// value at each w among the points kept so far (all with k <= the current one).
Layer pareto(Layer points) {
  std::stable_sort(points.begin(), points.end(), [](const Point& a, const Point& b) {
    if (a.k != b.k) return a.k < b.k;
    if (a.w != b.w) return a.w < b.w;
    return a.value > b.value;
  });
  std::map<long, double> stair;  // w -> best value; values rise strictly with w
  Layer kept;
  for (const Point& p : points) {
    auto it = stair.upper_bound(p.w);
    if (it != stair.begin() && std::prev(it)->second >= p.value) continue;
    kept.push_back(p);
    stair[p.w] = p.value;
    for (it = stair.upper_bound(p.w); it != stair.end() && it->second <= p.value;)
      it = stair.erase(it);
  }
  return kept;
}

/// Layers of chunk c's Pareto sets, one per item of the chunk (layer 0: nothing chosen), or
/// empty when a set grows past `limit` points.
std::vector<Layer> chunk_layers(const std::vector<KnapsackItem>& items,
                                const std::vector<int>& chunk_items, double granularity,
                                size_t limit) {
  std::vector<Layer> layers = {Layer{Point{}}};
  for (int j : chunk_items) {
    Layer next;
    const Layer& last = layers.back();
    for (int i = 0; i < static_cast<int>(last.size()); ++i)
      for (int o = 0; o < static_cast<int>(items[j].options.size()); ++o) {
        const KnapsackOption& opt = items[j].options[o];
        next.push_back({last[i].k + static_cast<long>(std::ceil(opt.graph_bytes / granularity)),
                        last[i].w + static_cast<long>(std::ceil(opt.deferred_bytes / granularity)),
                        last[i].value + opt.value, i, o});
      }
    layers.push_back(pareto(std::move(next)));
    if (layers.back().size() > limit) return {};
  }
  return layers;
}

/// Depth-first over the chunks' final sets (each sorted by value, highest first) for the best
/// sum whose load fits every state's room.
struct Combiner {
  const std::vector<InFlightState>& states;
  std::vector<const Layer*> sets;       ///< [chunk] final Pareto set
  std::vector<std::vector<int>> order;  ///< [chunk] indices into sets[c], value descending
  std::vector<double> best_after;       ///< [chunk] largest value reachable from chunk c on
  std::vector<int> pick, best_pick;
  bool found = false;
  double best = 0;

  long load(size_t i, int c, const Point& p) const {
    return states[i].graphs[c] * p.k + states[i].deferred[c] * p.w;
  }

  void run(int c, std::vector<long>& residual, double value) {
    const int v = static_cast<int>(sets.size());
    if (c == v) {
      if (!found || value > best) best_pick = pick;
      best = found ? std::max(best, value) : value;
      found = true;
      return;
    }
    for (int idx : order[c]) {
      const Point& p = (*sets[c])[idx];
      if (found && value + p.value + best_after[c + 1] <= best) break;  // the rest are worse
      bool fits = true;
      for (size_t i = 0; i < states.size() && fits; ++i) fits = load(i, c, p) <= residual[i];
      if (!fits) continue;
      for (size_t i = 0; i < states.size(); ++i) residual[i] -= load(i, c, p);
      pick[c] = idx;
      run(c + 1, residual, value + p.value);
      for (size_t i = 0; i < states.size(); ++i) residual[i] += load(i, c, p);
      if (c == v - 1) break;  // the first fitting point of the last chunk is its best
    }
  }
};

void check_input(const std::vector<KnapsackItem>& items, const std::vector<InFlightState>& states,
                 const std::vector<double>& room, double granularity, int chunks) {
  OMNIBAL_CHECK(granularity > 0, "multi-state knapsack: granularity must be > 0, got ",
                granularity);
  OMNIBAL_CHECK(room.size() == states.size(), "multi-state knapsack: ", room.size(), " rooms for ",
                states.size(), " states");
  for (const auto& st : states)
    OMNIBAL_CHECK(static_cast<int>(st.graphs.size()) == chunks &&
                      static_cast<int>(st.deferred.size()) == chunks,
                  "multi-state knapsack: a state of ", st.graphs.size(), " chunks, expected ",
                  chunks);
  for (size_t j = 0; j < items.size(); ++j) {
    OMNIBAL_CHECK(items[j].chunk >= 0 && items[j].chunk < chunks, "multi-state knapsack: item ", j,
                  " is in chunk ", items[j].chunk, " of ", chunks);
    OMNIBAL_CHECK(!items[j].options.empty(), "multi-state knapsack: item ", j, " has no option");
    for (const auto& o : items[j].options)
      OMNIBAL_CHECK(o.graph_bytes >= 0 && o.deferred_bytes >= 0, "multi-state knapsack: item ", j,
                    " has an option of negative bytes (", o.graph_bytes, ", ", o.deferred_bytes,
                    ")");
  }
}

/// One solve at a fixed granularity; false when a chunk's set grew past `limit` points.
bool solve_at(const std::vector<KnapsackItem>& items, const std::vector<InFlightState>& states,
              const std::vector<double>& room, double granularity, int chunks, size_t limit,
              MultiStateKnapsackResult& out) {
  std::vector<std::vector<int>> chunk_items(chunks);
  for (int j = 0; j < static_cast<int>(items.size()); ++j) chunk_items[items[j].chunk].push_back(j);
  std::vector<std::vector<Layer>> layers(chunks);
  for (int c = 0; c < chunks; ++c) {
    layers[c] = chunk_layers(items, chunk_items[c], granularity, limit);
    if (layers[c].empty()) return false;
  }
  Combiner comb{states, {}, {}, std::vector<double>(chunks + 1, 0.0), std::vector<int>(chunks), {}};
  for (int c = 0; c < chunks; ++c) {
    const Layer& set = layers[c].back();
    comb.sets.push_back(&set);
    std::vector<int> order(set.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return set[a].value > set[b].value; });
    comb.order.push_back(std::move(order));
  }
  for (int c = chunks - 1; c >= 0; --c)
    comb.best_after[c] = comb.best_after[c + 1] + (*comb.sets[c])[comb.order[c][0]].value;
  std::vector<long> residual;
  for (double r : room) residual.push_back(static_cast<long>(std::floor(r / granularity)));
  comb.run(0, residual, 0.0);
  out = {};
  if (!comb.found) return true;
  out.feasible = true;
  out.value = comb.best;
  out.option.assign(items.size(), 0);
  for (int c = 0; c < chunks; ++c) {  // walk each chunk's layers back from the chosen point
    int idx = comb.best_pick[c];
    for (size_t l = chunk_items[c].size(); l > 0; --l) {
      const Point& p = layers[c][l][idx];
      out.option[chunk_items[c][l - 1]] = p.option;
      idx = p.prev;
    }
  }
  return true;
}

}  // namespace

MultiStateKnapsackResult solve_multi_state_knapsack(const std::vector<KnapsackItem>& items,
                                                    const std::vector<InFlightState>& states,
                                                    const std::vector<double>& room,
                                                    double granularity_bytes) {
  int chunks = 1;  // the states' chunks; without states (no constraint) the items'
  if (!states.empty()) chunks = static_cast<int>(states[0].graphs.size());
  else
    for (const auto& it : items) chunks = std::max(chunks, it.chunk + 1);
  check_input(items, states, room, granularity_bytes, chunks);
  double largest = 0;  // once every option is at most one granule, coarsening gains nothing
  for (const auto& it : items)
    for (const auto& o : it.options) largest = std::max({largest, o.graph_bytes, o.deferred_bytes});
  MultiStateKnapsackResult out;
  for (double g = granularity_bytes;; g *= 4) {
    const size_t limit = g >= largest ? SIZE_MAX : kMaxParetoPoints;
    if (solve_at(items, states, room, g, chunks, limit, out)) return out;
  }
}

}  // namespace omnibal::memory
