#include "balance/budget_search.h"

#include <fmt/format.h>

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "balance/balance_metrics.h"
#include "balance/step_plan.h"
#include "core/error.h"
#include "core/rng.h"

namespace omnibal::balance {
namespace {

constexpr double kTokenFactors[] = {0.9, 1.0, 1.1, 1.2, 1.3, 1.45, 1.6};
constexpr int kMaxTileValues = 12;

int64_t round_up(double x, int64_t to) {
  return static_cast<int64_t>(std::ceil(x / static_cast<double>(to))) * to;
}

// A fixed uniform subsample (without replacement) of `ids`, or `ids` itself when small enough.
std::vector<uint32_t> scoring_ids(const std::vector<uint32_t>& ids, const SearchOptions& o) {
  if (ids.size() <= o.max_scored_samples) return ids;
  std::vector<uint32_t> pool = ids;
  Rng rng(o.seed ^ 0x5ea2c4ULL);
  for (size_t i = 0; i < o.max_scored_samples; ++i)  // partial Fisher–Yates
    std::swap(pool[i], pool[i + rng.below(pool.size() - i)]);
  pool.resize(o.max_scored_samples);
  return pool;
}

PackResult pack_candidate(const SampleTable& table, const std::vector<uint32_t>& ids,
                          const IsfBudgets& b, const SearchOptions& o) {
  IsfOptions io;
  io.budgets = b;
  io.iterations = o.iterations;
  io.seed = o.seed;
  io.on_bad_sample = OnBadSample::kSkip;  // the grid never cuts a sample; see search_grid
  return IsfPacker(io).pack(table, ids);
}

SearchCandidate score(const PackResult& r, const IsfBudgets& b, const SearchOptions& o) {
  SearchCandidate c;
  c.budgets = b;
  c.packs = static_cast<int64_t>(r.packs.size());
  c.samples_per_pack = c.packs ? static_cast<double>(r.packs.samples()) / c.packs : 0.0;
  c.in_range =
      c.samples_per_pack >= o.samples_per_pack && c.samples_per_pack <= o.samples_per_pack + 1;
  if (!c.in_range) return c;  // early exit: no placement for infeasible candidates
  const StepPlan plan = place_load_grouped(r.packs, o.dp, o.micro_batches, o.seed);
  const BalanceMetrics m = compute_metrics(r.packs, plan, {b.q_vit, b.q_tok}, 0);
  c.dist_ratio_vit = m.dist_ratio_vit;
  c.dist_ratio_llm = m.dist_ratio_llm;
  c.token_fill = m.token_fill;
  return c;
}

int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Scores every grid point; candidate i lands at index i whichever thread scored it, and the
// error of the lowest failing index is rethrown, so threads change nothing but the time. The
// grid lists each Q_v's token budgets in ascending order, and a Q_v's candidates are scored in
// that order, one at a time, reusing the packs of the previous budget when its token budget
// decided nothing (PackResult::tokens_decided): ISF then packs exactly the same. Threads take
// one candidate at a time from the Q_v with the most candidates left that no other thread is
// scoring, so the Q_v's progress side by side and the threads finish close together.
std::vector<SearchCandidate> score_all(const SampleTable& table, const std::vector<uint32_t>& ids,
                                       const std::vector<IsfBudgets>& grid,
                                       const SearchOptions& o) {
  struct Group {
    size_t next = 0, end = 0;  // next grid index to score, one past the last
    bool busy = false;         // a thread is scoring its candidate `next - 1`
    bool have_prev = false;
    PackResult prev;  // packs of the last candidate scored
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < grid.size(); ++i) {
    if (i == 0 || grid[i].q_vit != grid[i - 1].q_vit) {
      groups.emplace_back();
      groups.back().next = i;
    }
    groups.back().end = i + 1;
  }
  std::vector<SearchCandidate> out(grid.size());
  std::vector<std::exception_ptr> errors(grid.size());
  std::mutex mutex;
  std::condition_variable changed;
  // Under the lock: the idle group with the most candidates left (the first such), or none.
  auto take = [&]() -> Group* {
    Group* best = nullptr;
    for (Group& g : groups)
      if (!g.busy && g.next < g.end && (!best || g.end - g.next > best->end - best->next))
        best = &g;
    return best;
  };
  auto work = [&] {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      Group* g = take();
      if (!g) {  // every group with candidates left is being scored: wait for one
        const bool left = std::any_of(groups.begin(), groups.end(),
                                      [](const Group& x) { return x.next < x.end; });
        if (!left) return;
        changed.wait(lock);
        continue;
      }
      const size_t i = g->next++;
      g->busy = true;
      lock.unlock();
      try {
        const bool reuse = g->have_prev && !g->prev.tokens_decided &&
                           grid[i].q_tok >= grid[i - 1].q_tok &&
                           grid[i].q_tok_thresh >= grid[i - 1].q_tok_thresh;
        if (!reuse) g->prev = pack_candidate(table, ids, grid[i], o);
        g->have_prev = true;
        out[i] = score(g->prev, grid[i], o);
      } catch (...) {
        errors[i] = std::current_exception();
        g->have_prev = false;
      }
      lock.lock();
      g->busy = false;
      changed.notify_all();
    }
  };
  const int threads =
      std::min<int>(o.threads > 0 ? o.threads : available_cpus(), static_cast<int>(groups.size()));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

size_t pick_best(const std::vector<SearchCandidate>& cs, int target, bool& found) {
  size_t best = 0;
  found = false;
  for (size_t i = 0; i < cs.size(); ++i) {
    const auto& c = cs[i];
    if (!c.in_range) continue;
    const double obj = c.dist_ratio_vit + c.dist_ratio_llm;
    const double best_obj = found ? cs[best].dist_ratio_vit + cs[best].dist_ratio_llm : 0;
    if (!found || obj < best_obj - 1e-12 || (obj <= best_obj + 1e-12 && c.packs < cs[best].packs))
      best = i;
    found = true;
  }
  if (found) return best;
  auto miss = [target](const SearchCandidate& c) {  // distance to [target, target + 1]
    return std::max({0.0, target - c.samples_per_pack, c.samples_per_pack - target - 1.0});
  };
  for (size_t i = 1; i < cs.size(); ++i)
    if (miss(cs[i]) < miss(cs[best])) best = i;
  return best;
}

}  // namespace

std::vector<IsfBudgets> search_grid(const SampleTable& table, const std::vector<uint32_t>& ids,
                                    int samples_per_pack, int64_t max_pack_tokens) {
  OMNIBAL_CHECK(!ids.empty(), "search_budgets: no samples to search budgets for");
  OMNIBAL_CHECK(samples_per_pack >= 1, "balance.samples_per_pack: expected >= 1, got ",
                samples_per_pack);
  double mean_v = 0, mean_t = 0;
  int64_t max_v = 1, max_t = 1;
  for (uint32_t id : ids) {
    const Load& l = table.load[id];
    mean_v += l.tiles();
    mean_t += l.tokens();
    max_v = std::max<int64_t>(max_v, l.tiles());
    max_t = std::max<int64_t>(max_t, l.tokens());
  }
  mean_v = std::max(mean_v / static_cast<double>(ids.size()), 1e-9);
  mean_t /= static_cast<double>(ids.size());
  const double tokens_per_tile = mean_t / mean_v;
  const int64_t lo = std::max(max_v, static_cast<int64_t>(std::floor(samples_per_pack * mean_v)));
  const int64_t hi =
      std::max(lo, static_cast<int64_t>(std::ceil((samples_per_pack + 1) * mean_v)) + 1);
  const int64_t step = std::max<int64_t>(1, (hi - lo + kMaxTileValues) / kMaxTileValues);
  std::vector<IsfBudgets> grid;
  for (int64_t qv = lo; qv <= hi; qv += step) {
    int64_t prev = -1;
    for (double f : kTokenFactors) {
      int64_t qt = std::max(round_up(static_cast<double>(qv) * tokens_per_tile * f, 256), max_t);
      if (max_pack_tokens > 0) qt = std::min(qt, max_pack_tokens);
      if (qt == prev) continue;
      prev = qt;
      grid.push_back(IsfBudgets{qv, qt, std::max<int64_t>(1, qt - 128)});
    }
  }
  return grid;
}

SearchResult search_budgets(const SampleTable& table, const SearchOptions& options) {
  std::vector<uint32_t> ids(table.size());
  std::iota(ids.begin(), ids.end(), 0u);
  return search_budgets(table, ids, options);
}

SearchResult search_budgets(const SampleTable& table, const std::vector<uint32_t>& ids,
                            const SearchOptions& options) {
  OMNIBAL_CHECK(options.dp >= 1 && options.micro_batches >= 1 && options.iterations >= 1,
                "search_budgets: expected dp, micro_batches, iterations >= 1");
  const auto grid = search_grid(table, ids, options.samples_per_pack, options.max_pack_tokens);
  const auto scored = scoring_ids(ids, options);
  SearchResult result;
  result.scored_samples = scored.size();
  result.candidates = score_all(table, scored, grid, options);
  result.best = pick_best(result.candidates, options.samples_per_pack, result.found);
  return result;
}

std::string format_search_table(const SearchResult& r) {
  std::string out =
      fmt::format("budget search: {} candidates scored on {} samples{}\n", r.candidates.size(),
                  r.scored_samples, r.found ? "" : " (none in range: closest shown as chosen)");
  out += fmt::format("  {:>5} {:>6} {:>6} {:>7} {:>8} {:>9} {:>9} {:>8}\n", "Q_v", "Q_t", "Q'_t",
                     "packs", "smp/pack", "dist_vit", "dist_llm", "tok_fill");
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const auto& c = r.candidates[i];
    const char mark = (i == r.best) ? '*' : ' ';
    if (c.in_range)
      out += fmt::format("{} {:>5} {:>6} {:>6} {:>7} {:>8.3f} {:>9.5f} {:>9.5f} {:>8.3f}\n", mark,
                         c.budgets.q_vit, c.budgets.q_tok, c.budgets.q_tok_thresh, c.packs,
                         c.samples_per_pack, c.dist_ratio_vit, c.dist_ratio_llm, c.token_fill);
    else
      out += fmt::format("{} {:>5} {:>6} {:>6} {:>7} {:>8.3f} {:>9} {:>9} {:>8}\n", mark,
                         c.budgets.q_vit, c.budgets.q_tok, c.budgets.q_tok_thresh, c.packs,
                         c.samples_per_pack, "-", "-", "-");
  }
  return out;
}

}  // namespace omnibal::balance
