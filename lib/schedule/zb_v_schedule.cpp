#include "schedule/zb_v_schedule.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <tuple>

#include "core/error.h"

namespace omnibal::schedule {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();
using Matrix = std::vector<std::vector<double>>;

enum class Kind { kF, kB, kW };

/// One compute of the greedy's timeline: F, B or W of (chunk, micro-batch).
struct Step {
  Kind kind;
  int chunk, micro_batch;
};

/// A message posted from one rank to another: the receive that takes it.
struct Posted {
  Op receive;              ///< RecvActivation or RecvGrad
  int micro_batch, chunk;  ///< the receiver's chunk
};

/// The greedy's durations, [2P][m] by virtual stage: F, B, W, and the transfers k -> k+1 (act)
/// and k -> k-1 (grad).
struct Durations {
  Matrix f, b, w, act, grad;
};

Durations durations(int P, int m, const PipelineStepCosts* costs) {
  const int V = 2 * P;
  if (!costs) {
    const Matrix one(V, std::vector<double>(m, 1.0)), zero(V, std::vector<double>(m, 0.0));
    return {one, one, one, zero, zero};
  }
  OMNIBAL_CHECK(costs->layout == ChunkLayout::kV,
                "ZB-V: the costs' rows must be laid out as a V (PipelineStepCosts::layout kV)");
  const std::pair<const Matrix*, const char*> mats[] = {
      {&costs->forward_s, "forward_s"},
      {&costs->backward_input_s, "backward_input_s"},
      {&costs->backward_weight_s, "backward_weight_s"},
      {&costs->send_activation_s, "send_activation_s"},
      {&costs->send_grad_s, "send_grad_s"}};
  for (const auto& [mat, name] : mats) {
    OMNIBAL_CHECK(static_cast<int>(mat->size()) == V, "ZB-V: costs ", name, " have ", mat->size(),
                  " virtual stages, expected 2P = ", V);
    for (const auto& row : *mat)
      OMNIBAL_CHECK(static_cast<int>(row.size()) == m, "ZB-V: costs ", name, " have a row of ",
                    row.size(), " micro-batches, expected ", m);
  }
  return {costs->forward_s, costs->backward_input_s, costs->backward_weight_s,
          costs->send_activation_s, costs->send_grad_s};
}

/// Per rank, the F and B order of the hand-made ZB-V for m >= 2P - 1 (the zero-bubble
/// repository's and PyTorch's ScheduleZBVZeroBubble: rank s warms up with 2(P - s) - 1 chunk-0
/// F's, s pairs (F1, F0) and P - s pairs (F1, B1), then runs F0 B0 F1 B1 until the forwards are
/// done and cools down with s pairs (B0, B1) and P - s B0's). Its W's are left to the greedy.
std::vector<std::vector<Step>> hand_made_order(int P, int m) {
  std::vector<std::vector<Step>> out(P);
  for (int s = 0; s < P; ++s) {
    auto& ops = out[s];
    int f[2] = {0, 0}, b[2] = {0, 0};
    auto F = [&](int c) { ops.push_back({Kind::kF, c, f[c]++}); };
    auto B = [&](int c) { ops.push_back({Kind::kB, c, b[c]++}); };
    for (int i = 0; i < 2 * (P - s) - 1; ++i) F(0);
    for (int i = 0; i < s; ++i) F(1), F(0);
    for (int i = 0; i < P - s; ++i) F(1), B(1);
    while (f[1] < f[0] || f[0] < m) {
      if (f[0] < m) F(0);
      B(0), F(1), B(1);
    }
    for (int i = 0; i < s; ++i) B(0), B(1);
    for (int i = 0; i < P - s; ++i) B(0);
  }
  return out;
}

/// The greedy list scheduler of zb_v_schedule.h on a simulated timeline; with `order` (per
/// rank, the F's and B's in a fixed order) only the W's are placed by the greedy.
class ZbVGreedy {
 public:
  ZbVGreedy(int P, int m, const Durations& d, const ZbVOptions& o,
            const std::vector<std::vector<Step>>* order)
      : P_(P),
        m_(m),
        V_(2 * P),
        d_(d),
        fixed_(order),
        max_held_(o.max_held > 0 ? o.max_held : 2 * P),
        max_deferred_(o.max_deferred_weights > 0 ? o.max_deferred_weights : 2 * P),
        ranks_(P),
        order_(P),
        posted_(static_cast<size_t>(P) * P),
        link_free_(static_cast<size_t>(P) * P, 0.0),
        f_end_(V_, std::vector<double>(m, kNever)),
        act_arrival_(V_, std::vector<double>(m, kNever)),
        grad_arrival_(V_, std::vector<double>(m, kNever)) {}

  /// Runs the timeline to its end and returns the lists.
  StageSchedules run() {
    for (;;) {
      double t = kNever;
      for (const auto& r : ranks_)
        if (r.done < 6 * m_) t = std::min(t, r.clock);
      if (t == kNever) break;
      for (bool again = true; again;) {
        again = false;
        for (int s = 0; s < P_; ++s)
          if (busy(s) && ranks_[s].clock <= t)
            if (const auto step = choose(s, t, false)) run_step(s, *step), again = true;
      }
      while (!arrivals_.empty() && arrivals_.top() <= t) arrivals_.pop();
      double next = arrivals_.empty() ? kNever : arrivals_.top();
      for (int s = 0; s < P_; ++s)
        if (busy(s) && ranks_[s].clock > t) next = std::min(next, ranks_[s].clock);
      if (next == kNever) {  // nothing left, or every rank is held back
        if (std::any_of(ranks_.begin(), ranks_.end(),
                        [&](const Rank& r) { return r.done < 6 * m_; }))
          relax(t);
        continue;
      }
      for (int s = 0; s < P_; ++s)
        if (busy(s) && ranks_[s].clock <= t) ranks_[s].clock = next;  // waits for a message
    }
    return emit();
  }

  struct Rank {
    double clock = 0;
    int next_f[2] = {0, 0}, next_b[2] = {0, 0}, graphs[2] = {0, 0};
    std::deque<std::pair<int, int>> deferred;  ///< (chunk, micro-batch) in B order
    int done = 0;                              ///< computes run, of 6m
    size_t position = 0;                       ///< F's and B's run (the fixed order's next)
  };

  bool busy(int s) const { return ranks_[s].done < 6 * m_; }
  int vs(int chunk, int s) const { return virtual_stage(chunk, s, P_, ChunkLayout::kV); }

  /// No rank can move and no message is on its way: the memory bound held every rank back.
  /// Lets the first rank that has an F ready run it past max_held (never on equal costs).
  void relax(double t) {
    for (int s = 0; s < P_; ++s)
      if (busy(s) && ranks_[s].clock <= t)
        if (const auto step = choose(s, t, true)) return run_step(s, *step);
    OMNIBAL_FAIL("ZB-V: the greedy scheduler stalled at t = ", t, " (an internal error)");
  }

  /// Seconds from the step's start to the last rank's last compute (after run()).
  double makespan() const {
    double end = 0;
    for (const auto& r : ranks_) end = std::max(end, r.clock);
    return end;
  }

 private:
  bool ready(int s, const Step& step, double t) const {
    const int k = vs(step.chunk, s), mb = step.micro_batch;
    if (step.kind == Kind::kF) return k == 0 || act_arrival_[k][mb] <= t;
    return std::max(f_end_[k][mb], k + 1 < V_ ? grad_arrival_[k][mb] : 0.0) <= t;
  }

  /// The fixed order's next F or B when it is ready (an F only within max_held, or when no W
  /// is left to free memory), else a deferred W.
  std::optional<Step> choose_fixed(int s, double t) const {
    const Rank& r = ranks_[s];
    const auto& order = (*fixed_)[s];
    const int held = r.graphs[0] + r.graphs[1] + static_cast<int>(r.deferred.size());
    if (r.position < order.size()) {
      const Step& next = order[r.position];
      const bool fits = next.kind != Kind::kF || held < max_held_ || r.deferred.empty();
      if (fits && ready(s, next, t)) return next;
    }
    if (!r.deferred.empty())
      return Step{Kind::kW, r.deferred.front().first, r.deferred.front().second};
    return std::nullopt;
  }

  /// What rank s runs at time t (zb_v_schedule.h's order of preference), if anything.
  std::optional<Step> choose(int s, double t, bool relax) const {
    const Rank& r = ranks_[s];
    if (!r.deferred.empty() && static_cast<int>(r.deferred.size()) >= max_deferred_)
      return Step{Kind::kW, r.deferred.front().first, r.deferred.front().second};
    if (fixed_) return choose_fixed(s, t);
    std::optional<std::tuple<double, int, int>> best;  // (ready time, mb, chunk 1 first)
    for (int c = 1; c >= 0; --c) {
      const int mb = r.next_b[c], k = vs(c, s);
      if (mb >= r.next_f[c]) continue;  // not forwarded yet
      const double at = std::max(f_end_[k][mb], k + 1 < V_ ? grad_arrival_[k][mb] : 0.0);
      const std::tuple<double, int, int> key{at, mb, 1 - c};
      if (at <= t && (!best || key < *best)) best = key;
    }
    if (best) return Step{Kind::kB, 1 - std::get<2>(*best), std::get<1>(*best)};
    const int held = r.graphs[0] + r.graphs[1] + static_cast<int>(r.deferred.size());
    for (int c = 1; c >= 0; --c) {
      const int mb = r.next_f[c], k = vs(c, s);
      if (mb >= m_ || r.graphs[c] >= V_ - k || (held >= max_held_ && !relax)) continue;
      if (ready(s, {Kind::kF, c, mb}, t)) return Step{Kind::kF, c, mb};
    }
    if (!r.deferred.empty())
      return Step{Kind::kW, r.deferred.front().first, r.deferred.front().second};
    return std::nullopt;
  }

  /// Posts a message from rank s to virtual stage `to` (its arrival in `arrival`).
  void post(int s, int to, Op receive, int mb, double transfer, double& arrival) {
    const int dst = stage_of_virtual(to, P_, ChunkLayout::kV);
    const double now = ranks_[s].clock;
    double& link = link_free_[static_cast<size_t>(s) * P_ + dst];
    arrival = dst == s ? now : (link = std::max(link, now) + transfer);
    arrivals_.push(arrival);
    posted_[static_cast<size_t>(s) * P_ + dst].push_back({receive, mb, chunk_of_virtual(to, P_)});
  }

  void run_step(int s, const Step& step) {
    Rank& r = ranks_[s];
    const int c = step.chunk, mb = step.micro_batch, k = vs(c, s);
    switch (step.kind) {
      case Kind::kF:
        r.clock += d_.f[k][mb];
        ++r.graphs[c], ++r.next_f[c];
        f_end_[k][mb] = r.clock;
        if (k + 1 < V_)
          post(s, k + 1, Op::RecvActivation, mb, d_.act[k][mb], act_arrival_[k + 1][mb]);
        break;
      case Kind::kB:
        r.clock += d_.b[k][mb];
        --r.graphs[c], ++r.next_b[c];
        r.deferred.emplace_back(c, mb);
        if (k > 0) post(s, k - 1, Op::RecvGrad, mb, d_.grad[k][mb], grad_arrival_[k - 1][mb]);
        break;
      case Kind::kW:
        r.clock += d_.w[k][mb];
        r.deferred.pop_front();
        break;
    }
    ++r.done;
    if (step.kind != Kind::kW) ++r.position;
    order_[s].push_back(step);
  }

  StageSchedules emit() const;

  const int P_, m_, V_;
  const Durations& d_;
  const std::vector<std::vector<Step>>* fixed_;  ///< the F/B order, or null: free greedy
  const int max_held_, max_deferred_;
  std::vector<Rank> ranks_;
  std::vector<std::vector<Step>> order_;       ///< [rank] computes in timeline order
  std::vector<std::vector<Posted>> posted_;    ///< [src * P + dst] in posting order
  std::vector<double> link_free_;              ///< [src * P + dst]
  Matrix f_end_, act_arrival_, grad_arrival_;  ///< [k][mb]; kNever: not yet
  std::priority_queue<double, std::vector<double>, std::greater<>> arrivals_;
};

/// The lists: each rank's computes in timeline order with their receives (in the peer's posting
/// order, pulled ahead of their compute when an earlier message of that peer must come first)
/// and sends.
StageSchedules ZbVGreedy::emit() const {
  StageSchedules lists(P_);
  for (int s = 0; s < P_; ++s) {
    auto& list = lists[s];
    std::vector<size_t> taken(P_, 0);  // [src] messages of that peer received so far
    std::vector<char> received(static_cast<size_t>(4) * m_, 0);  // [(kind, chunk, mb)]
    auto slot = [&](Op op, int c, int mb) {
      return (op == Op::RecvGrad ? 2 * m_ : 0) + c * m_ + mb;
    };
    auto take = [&](int from_virtual, Op op, int c, int mb) {
      const int src = stage_of_virtual(from_virtual, P_, ChunkLayout::kV);
      const auto& q = posted_[static_cast<size_t>(src) * P_ + s];
      while (!received[slot(op, c, mb)]) {
        OMNIBAL_CHECK(taken[src] < q.size(), "ZB-V: internal error, a message was never posted");
        const Posted& p = q[taken[src]++];
        received[slot(p.receive, p.chunk, p.micro_batch)] = 1;
        list.push_back({p.receive, p.micro_batch, p.chunk});
      }
    };
    for (const Step& step : order_[s]) {
      const int c = step.chunk, mb = step.micro_batch, k = vs(c, s);
      if (step.kind == Kind::kF) {
        if (k > 0) take(k - 1, Op::RecvActivation, c, mb);
        list.push_back({Op::Forward, mb, c});
        if (k + 1 < V_) list.push_back({Op::SendActivation, mb, c});
      } else if (step.kind == Kind::kB) {
        if (k + 1 < V_) take(k + 1, Op::RecvGrad, c, mb);
        list.push_back({Op::BackwardInput, mb, c});
        if (k > 0) list.push_back({Op::SendGrad, mb, c});
      } else {
        list.push_back({Op::BackwardWeight, mb, c});
      }
    }
    list.push_back({Op::ReduceGrads, -1});
    list.push_back({Op::OptimizerStep, -1});
  }
  return lists;
}

}  // namespace

StageSchedules build_zb_v_schedule(int stages, int micro_batches, const PipelineStepCosts* costs,
                                   const ZbVOptions& options) {
  OMNIBAL_CHECK(stages >= 1, "ZB-V: expected at least one pipeline stage, got ", stages);
  OMNIBAL_CHECK(micro_batches >= 1, "ZB-V: expected at least one micro-batch, got ", micro_batches);
  OMNIBAL_CHECK(options.max_held >= 0 && options.max_deferred_weights >= 0,
                "ZB-V: bounds must be >= 0 (0: the default), got max_held ", options.max_held,
                ", max_deferred_weights ", options.max_deferred_weights);
  const int P = stages, m = micro_batches;
  const Durations d = durations(P, m, costs);
  // The portfolio (as the zero-bubble repository's V scheduler tries several settings and keeps
  // the best): the free greedy, the free greedy deferring at most P W's, and, for m >= 2P - 1,
  // the hand-made F/B order with greedy W's; the shortest simulated step wins (ties: the first).
  const auto order = hand_made_order(P, m);
  std::vector<std::pair<ZbVOptions, const std::vector<std::vector<Step>>*>> tries = {
      {options, nullptr}};
  if (options.max_deferred_weights == 0) {
    ZbVOptions fewer = options;
    fewer.max_deferred_weights = P;
    tries.push_back({fewer, nullptr});
  }
  if (m >= 2 * P - 1) tries.push_back({options, &order});
  StageSchedules best;
  double best_s = kNever;
  for (const auto& [o, fixed] : tries) {
    ZbVGreedy greedy(P, m, d, o, fixed);
    StageSchedules lists = greedy.run();
    if (greedy.makespan() < best_s) best_s = greedy.makespan(), best = std::move(lists);
  }
  return best;
}

}  // namespace omnibal::schedule
