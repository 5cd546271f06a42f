#include "partition/training_simulator.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "schedule/pipeline_timeline.h"
#include "schedule/schedules.h"

namespace omnibal::partition {
namespace {

/// Adam on fp32 master weights, memory-bound: read+write master, m, v (24 B), read the fp32
/// gradient (4 B), write the bf16 weight (2 B) per parameter, at 80% of HBM bandwidth.
constexpr double kOptimizerBytesPerParam = 30.0;
constexpr double kBf16 = 2.0;

/// Costs of one micro-batch on one chunk (virtual stage): compute (forward_s with
/// checkpointed_forward_s, the checkpointed units' share; backward_s with recompute_s, their
/// reruns; weight_s = ZB's W inside backward_s) and the TP all-reduces apart (tp_forward_s,
/// tp_backward_s with those of recomputation; all of them B's: they sum input gradients).
struct StageMicroBatch {
  double forward_s = 0, backward_s = 0, weight_s = 0, recompute_s = 0, checkpointed_forward_s = 0,
         kept = 0, weight_kept = 0, transient = 0, out_bytes = 0;
  double tp_forward_s = 0, tp_backward_s = 0;
};

std::vector<StageMicroBatch> stage_costs(const UnitCostTable& t, const SimulatorSetup& setup,
                                         const TpLink& link) {
  OMNIBAL_CHECK(t.tp == setup.tp, "simulator: the cost model's tables are per rank of tp ", t.tp,
                ", the setup has tp = ", setup.tp,
                " (a profiled table is per rank of the tp it was profiled at)");
  const Partition& p = setup.partition;
  std::vector<StageMicroBatch> out(p.stages());
  for (int k = 0; k < p.stages(); ++k) {
    auto& c = out[k];
    for (int u = p.begin(k); u < p.end(k); ++u) {
      const auto& unit = t.units[u];
      c.backward_s += unit.backward_s;
      c.weight_s += unit.weight_backward_s();
      c.weight_kept += unit.deferred_weight_bytes();
      c.tp_forward_s += tp_forward_seconds(unit, setup.tp, link);
      c.tp_backward_s += tp_backward_seconds(unit, setup.recompute[u], setup.tp, link);
      if (unit.checkpointed(setup.recompute[u])) {
        c.checkpointed_forward_s += unit.checkpointed_forward();  // profiled, or forward_s
        c.recompute_s += unit.rerun_seconds();
        c.kept += t.checkpoint_bytes(u);
        c.transient = std::max(c.transient, unit.activation_bytes);
      } else {
        c.forward_s += unit.forward_s;
        c.kept += unit.activation_bytes;
      }
    }
    c.forward_s += c.checkpointed_forward_s;
    c.backward_s += c.recompute_s;
    c.out_bytes = t.units[p.end(k) - 1].output_bytes;
  }
  return out;
}

void check_setup(const SimulatorSetup& setup, const StepLoads& loads) {
  OMNIBAL_CHECK(setup.model != nullptr, "simulator: no cost model");
  OMNIBAL_CHECK(setup.schedule != PipelineSchedule::kAuto,
                "simulator: schedule 'auto' is resolved by the planner; simulate a concrete one");
  OMNIBAL_CHECK(setup.virtual_stages >= 1, "simulator: virtual_stages must be >= 1, got ",
                setup.virtual_stages);
  const int v = schedule::chunks_per_rank(setup.schedule, setup.virtual_stages);
  OMNIBAL_CHECK(setup.partition.stages() % v == 0, "simulator: a split of ",
                setup.partition.stages(), " chunks for ", v, " chunks per rank (",
                choice_name(setup.schedule), "): expected a multiple of ", v);
  const int P = setup.ranks();
  OMNIBAL_CHECK(setup.tp >= 1, "simulator: tp must be >= 1, got ", setup.tp);
  OMNIBAL_CHECK(static_cast<int>(loads.size()) == setup.dp, "simulator: loads for ", loads.size(),
                " DP ranks, expected dp = ", setup.dp);
  for (size_t r = 0; r < loads.size(); ++r)
    OMNIBAL_CHECK(!loads[r].empty() && loads[r].size() == loads[0].size(), "simulator: DP rank ", r,
                  " has ", loads[r].size(), " micro-batches, rank 0 has ", loads[0].size(),
                  " (every rank runs the same m >= 1)");
  OMNIBAL_CHECK(static_cast<int>(setup.recompute.size()) == setup.partition.units(),
                "simulator: recompute flags for ", setup.recompute.size(), " units, partition has ",
                setup.partition.units());
  OMNIBAL_CHECK(static_cast<int>(setup.static_bytes.size()) == P, "simulator: static memory for ",
                setup.static_bytes.size(), " ranks, expected ", P, " pipeline ranks");
  OMNIBAL_CHECK(setup.dp_jitter >= 0, "simulator: dp_jitter is ", setup.dp_jitter,
                ", expected >= 0");
  const auto& oh = setup.overheads;
  auto check_per_rank = [P](const std::vector<double>& v, const char* what) {
    OMNIBAL_CHECK(v.empty() || static_cast<int>(v.size()) == P, "simulator: ", what, " for ",
                  v.size(), " stages, expected ", P, " pipeline ranks (or none)");
  };
  check_per_rank(oh.compute_fraction, "compute fractions");
  for (size_t s = 0; s < oh.compute_fraction.size(); ++s)
    OMNIBAL_CHECK(oh.compute_fraction[s] > -1, "simulator: compute fraction of stage ", s, " is ",
                  oh.compute_fraction[s], ", expected > -1");
  check_per_rank(oh.checkpoint_fraction, "checkpoint fractions");
  for (size_t s = 0; s < oh.checkpoint_fraction.size(); ++s) {
    const double f = oh.compute_fraction.empty() ? 0.0 : oh.compute_fraction[s];
    OMNIBAL_CHECK(f + oh.checkpoint_fraction[s] > -1, "simulator: compute fraction ", f,
                  " + checkpoint fraction ", oh.checkpoint_fraction[s], " of stage ", s,
                  ", expected > -1 (checkpointed compute would take no time)");
  }
  for (const auto* o : {&oh.per_micro_batch_s, &oh.per_tile_s, &oh.per_token_s, &oh.per_sample_s,
                        &oh.per_step_s, &oh.loader_per_micro_batch_s}) {
    check_per_rank(*o, "overheads");
    for (size_t s = 0; s < o->size(); ++s)
      OMNIBAL_CHECK((*o)[s] >= 0, "simulator: overhead of stage ", s, " is ", (*o)[s],
                    " s, expected >= 0");
  }
}

}  // namespace

double expected_maximum(const std::vector<double>& mean, const std::vector<double>& sd) {
  OMNIBAL_CHECK(!mean.empty() && mean.size() == sd.size(), "expected_maximum: ", mean.size(),
                " means and ", sd.size(), " standard deviations, expected as many and >= 1");
  double lo = mean[0], hi = mean[0], top = mean[0], widest = 0;
  for (size_t i = 0; i < mean.size(); ++i) {
    OMNIBAL_CHECK(sd[i] >= 0 && std::isfinite(sd[i]) && std::isfinite(mean[i]),
                  "expected_maximum: N(", mean[i], ", ", sd[i], "^2), expected finite, sd >= 0");
    lo = std::min(lo, mean[i] - 9 * sd[i]);
    hi = std::max(hi, mean[i] + 9 * sd[i]);
    top = std::max(top, mean[i]);
    widest = std::max(widest, sd[i]);
  }
  if (widest == 0) return top;
  // E[max] = lo + integral over [lo, hi] of P(max > x) dx (P(max < lo) is below 1e-18);
  // Simpson's rule on a grid fine against the narrowest normal that matters.
  auto above = [&](double x) {
    double below = 1.0;
    for (size_t i = 0; i < mean.size(); ++i)
      below *= sd[i] > 0 ? 0.5 * std::erfc(-(x - mean[i]) / (sd[i] * std::sqrt(2.0)))
                         : (x >= mean[i] ? 1.0 : 0.0);
    return 1.0 - below;
  };
  const int n = 2000;  // even
  const double h = (hi - lo) / n;
  double sum = above(lo) + above(hi);
  for (int k = 1; k < n; ++k) sum += (k % 2 ? 4 : 2) * above(lo + k * h);
  return std::max(top, lo + sum * h / 3);  // >= max(mean) (Jensen), also numerically
}

double StageOverheads::micro_batch_s(int stage, const MicroBatchLoad& load) const {
  auto at = [stage](const std::vector<double>& v) {
    return v.empty() ? 0.0 : v.at(static_cast<size_t>(stage));
  };
  return at(per_micro_batch_s) + at(per_tile_s) * static_cast<double>(load.tiles()) +
         at(per_token_s) * static_cast<double>(load.real_tokens()) +
         at(per_sample_s) * static_cast<double>(load.samples());
}

int SimulatorSetup::ranks() const {
  return partition.stages() / schedule::chunks_per_rank(schedule, virtual_stages);
}

TimeBreakdown& TimeBreakdown::operator+=(const TimeBreakdown& o) {
  useful_s += o.useful_s;
  padding_s += o.padding_s;
  recompute_s += o.recompute_s;
  bubble_s += o.bubble_s;
  dp_wait_s += o.dp_wait_s;
  comm_s += o.comm_s;
  tp_comm_s += o.tp_comm_s;
  return *this;
}

TimeBreakdown TimeBreakdown::scaled(double f) const {
  TimeBreakdown b{useful_s * f, padding_s * f, recompute_s * f,
                  bubble_s * f, dp_wait_s * f, comm_s * f};
  b.tp_comm_s = tp_comm_s * f;
  return b;
}

double pipeline_link_bandwidth(const DeviceSpec& device, int dp, int tp) {
  return dp * tp < device.gpus_per_node ? device.intra_node_bandwidth : device.inter_node_bandwidth;
}

double data_parallel_bandwidth(const DeviceSpec& device, int dp, int tp) {
  return dp * tp <= device.gpus_per_node ? device.intra_node_bandwidth
                                         : device.inter_node_bandwidth;
}

namespace {

/// One DP rank's pipeline for one step: its timeline and what its compute was spent on.
struct RankStep {
  std::vector<schedule::StageTimeline> timeline;
  std::vector<double> padding_s, recompute_s, tp_comm_s;  ///< per stage
  std::vector<double> checkpointed_s;  ///< per stage: checkpointed forwards + their reruns
};

RankStep simulate_rank(const SimulatorSetup& setup, const std::vector<MicroBatchLoad>& loads,
                       const schedule::StageSchedules& lists, StepReport& rep,
                       std::vector<schedule::TimelineEvent>* events) {
  const int P = setup.ranks(), V = setup.partition.stages(), m = static_cast<int>(loads.size());
  const bool split = setup.schedule == PipelineSchedule::kZbH1;
  const double p2p_bw = pipeline_link_bandwidth(setup.device, setup.dp, setup.tp);
  const TpLink link = setup.tp_link ? *setup.tp_link : tp_link(setup.device, setup.tp);
  auto costs = schedule::PipelineStepCosts::zeros(V, m);
  RankStep out;
  out.padding_s.assign(P, 0.0);
  out.recompute_s.assign(P, 0.0);
  out.tp_comm_s.assign(P, 0.0);
  out.checkpointed_s.assign(P, 0.0);
  const auto& frac = setup.overheads.compute_fraction;
  const auto& ckpt = setup.overheads.checkpoint_fraction;
  for (int i = 0; i < m; ++i) {
    const auto& load = loads[i];
    auto sc = stage_costs(setup.model->costs(load), setup, link);
    std::vector<StageMicroBatch> unpadded;
    if (load.padded_len > 0)
      unpadded = stage_costs(setup.model->costs(load.unpadded()), setup, link);
    if (!frac.empty() || !ckpt.empty())
      for (auto* v : {&sc, &unpadded})
        for (size_t k = 0; k < v->size(); ++k) {
          const double f = 1.0 + (frac.empty() ? 0.0 : frac[k % P]);
          const double h = ckpt.empty() ? 0.0 : ckpt[k % P];  // on top of f, checkpointed only
          auto& c = (*v)[k];
          c.forward_s = c.forward_s * f + c.checkpointed_forward_s * h;
          c.backward_s = c.backward_s * f + c.recompute_s * h;
          c.weight_s *= f;
          c.recompute_s *= f + h;
          c.checkpointed_forward_s *= f + h;
        }
    std::vector<double> host(P);
    for (int s = 0; s < P; ++s) host[s] = setup.overheads.micro_batch_s(s, load);
    for (int k = 0; k < V; ++k) {
      const int s = k % P;  // the rank holding virtual stage k
      costs.forward_s[k][i] = sc[k].forward_s + sc[k].tp_forward_s + host[s] * P / V;
      costs.backward_s[k][i] = sc[k].backward_s + sc[k].tp_backward_s;
      // ZB-H1: W is the weight-gradient compute; recomputation and the TP all-reduces stay in B.
      costs.backward_weight_s[k][i] = split ? sc[k].weight_s : 0.0;
      costs.backward_input_s[k][i] = costs.backward_s[k][i] - costs.backward_weight_s[k][i];
      out.tp_comm_s[s] += sc[k].tp_forward_s + sc[k].tp_backward_s;
      costs.send_activation_s[k][i] = sc[k].out_bytes / p2p_bw;
      costs.send_grad_s[k][i] = k > 0 ? sc[k - 1].out_bytes / p2p_bw : 0.0;
      costs.kept_bytes[k][i] = sc[k].kept;
      costs.weight_kept_bytes[k][i] = split ? sc[k].weight_kept : 0.0;
      costs.transient_bytes[k][i] = sc[k].transient;
      // Padding is everything the padded micro-batch costs beyond its unpadded self
      // (recomputation of padded positions included), so recompute counts unpadded work only.
      out.recompute_s[s] += unpadded.empty() ? sc[k].recompute_s : unpadded[k].recompute_s;
      out.checkpointed_s[s] += sc[k].checkpointed_forward_s + sc[k].recompute_s;
      if (!unpadded.empty())
        out.padding_s[s] +=
            sc[k].forward_s + sc[k].backward_s - unpadded[k].forward_s - unpadded[k].backward_s;
    }
    rep.samples += load.samples();
    rep.tiles += load.tiles();
    rep.tokens += load.real_tokens();
  }
  const auto& loader = setup.overheads.loader_per_micro_batch_s;
  if (!loader.empty()) {
    costs.background_s.assign(P, 0.0);
    for (int s = 0; s < P; ++s) costs.background_s[s] = loader[s] * m;
  }
  out.timeline = schedule::run_pipeline_timeline(lists, costs, events);
  return out;
}

/// Trainable parameter bytes of each stage (bf16 weights: the all-reduced gradient volume).
/// Per rank: the sum over its chunks.
std::vector<double> stage_parameter_bytes(const SimulatorSetup& setup, const MicroBatchLoad& any) {
  const UnitCostTable table = setup.model->costs(any);
  const int P = setup.ranks();
  std::vector<double> bytes(P, 0.0);
  for (int k = 0; k < setup.partition.stages(); ++k)
    for (int u = setup.partition.begin(k); u < setup.partition.end(k); ++u)
      if (table.units[u].trainable) bytes[k % P] += table.units[u].parameter_bytes;
  return bytes;
}

}  // namespace

StepReport simulate_step(const SimulatorSetup& setup, const StepLoads& loads) {
  return simulate_step(setup, loads, nullptr);
}

StepReport simulate_step(const SimulatorSetup& setup, const StepLoads& loads,
                         schedule::StepTrace* trace) {
  check_setup(setup, loads);
  const int P = setup.ranks(), dp = setup.dp;
  const auto lists =
      schedule::build_schedule(setup.schedule, P, static_cast<int>(loads[0].size()),
                               schedule::chunks_per_rank(setup.schedule, setup.virtual_stages));
  StepReport rep;
  rep.stages.assign(P, {});
  std::vector<RankStep> ranks;
  for (int r = 0; r < dp; ++r) {
    std::vector<schedule::TimelineEvent> events;
    ranks.push_back(simulate_rank(setup, loads[r], lists, rep, trace ? &events : nullptr));
    if (!trace) continue;
    schedule::append_timeline_spans(*trace, r, events);
    for (size_t i = 0; i < loads[r].size(); ++i)
      trace->loads[{r, static_cast<int>(i)}] = {loads[r][i].samples(), loads[r][i].tiles(),
                                                loads[r][i].real_tokens()};
  }
  // DP level: per-stage collective after the slowest rank, then the optimizer.
  const auto param_bytes = stage_parameter_bytes(setup, loads[0][0]);
  const double dp_bw = data_parallel_bandwidth(setup.device, dp, setup.tp);
  std::vector<double> reduce_start(P, 0.0), comm(P, 0.0), done(P, 0.0);
  for (int s = 0; s < P; ++s) {
    std::vector<double> ready(dp), sd(dp);
    for (int r = 0; r < dp; ++r) {
      ready[r] = ranks[r].timeline[s].ready_for_reduce_s;
      sd[r] = dp > 1 ? setup.dp_jitter * ready[r] : 0.0;
    }
    reduce_start[s] = expected_maximum(ready, sd);
    const double reduce = dp > 1 ? 2.0 * (dp - 1) / dp * param_bytes[s] / dp_bw : 0.0;
    const double params = param_bytes[s] / kBf16 / (setup.zero1 ? dp : 1);
    const double optimizer =
        setup.overheads.per_step_s.empty()
            ? params * kOptimizerBytesPerParam / (setup.device.hbm_bandwidth * 0.8)
            : setup.overheads.per_step_s[s];
    comm[s] = reduce + optimizer;
    done[s] = reduce_start[s] + comm[s];
    rep.stages[s].reduce_s = reduce;
  }
  rep.step_s = *std::max_element(done.begin(), done.end());
  if (trace)
    for (int r = 0; r < dp; ++r)
      for (int s = 0; s < P; ++s) {
        const double reduced = reduce_start[s] + rep.stages[s].reduce_s;
        trace->spans.push_back({r, s, "dp_reduce", -1, 0,
                                ranks[r].timeline[s].ready_for_reduce_s * 1e6, reduced * 1e6});
        trace->spans.push_back({r, s, "optimizer", -1, 0, reduced * 1e6, done[s] * 1e6});
      }
  rep.dp_busy_s.assign(dp, 0.0);
  for (int r = 0; r < dp; ++r)
    for (int s = 0; s < P; ++s) {
      const auto& tl = ranks[r].timeline[s];
      const double busy = tl.forward_busy_s + tl.backward_busy_s + tl.backward_weight_busy_s;
      rep.dp_busy_s[r] += busy;
      TimeBreakdown b;
      b.padding_s = ranks[r].padding_s[s];
      b.recompute_s = ranks[r].recompute_s[s];
      b.tp_comm_s = ranks[r].tp_comm_s[s];
      b.useful_s = busy - b.padding_s - b.recompute_s - b.tp_comm_s;
      b.bubble_s = (tl.ready_for_reduce_s - busy) + (rep.step_s - done[s]);
      b.dp_wait_s = reduce_start[s] - tl.ready_for_reduce_s;
      b.comm_s = comm[s];
      rep.breakdown += b.scaled(1.0 / (static_cast<double>(dp) * P));
      auto& st = rep.stages[s];
      st.forward_s += tl.forward_busy_s / dp;
      st.backward_s += (tl.backward_busy_s + tl.backward_weight_busy_s) / dp;
      st.tp_comm_s += b.tp_comm_s / dp;
      st.checkpointed_s += ranks[r].checkpointed_s[s] / dp;
      st.idle_s += b.bubble_s / dp;
      st.dp_wait_s += b.dp_wait_s / dp;
      st.peak_memory_bytes =
          std::max(st.peak_memory_bytes, setup.static_bytes[s] + tl.peak_activation_bytes);
      rep.peak_memory_bytes = std::max(rep.peak_memory_bytes, st.peak_memory_bytes);
    }
  return rep;
}

RunReport simulate_run(const SimulatorSetup& setup, const std::vector<StepLoads>& steps) {
  RunReport run;
  const int P = setup.ranks();
  run.stage_busy_s.assign(P, 0.0);
  run.stage_idle_s.assign(P, 0.0);
  for (const auto& loads : steps) {
    const StepReport rep = simulate_step(setup, loads);
    run.seconds += rep.step_s;
    run.breakdown += rep.breakdown;
    run.peak_memory_bytes = std::max(run.peak_memory_bytes, rep.peak_memory_bytes);
    for (int s = 0; s < P; ++s) {
      run.stage_busy_s[s] += rep.stages[s].forward_s + rep.stages[s].backward_s;
      run.stage_idle_s[s] += rep.stages[s].idle_s + rep.stages[s].dp_wait_s;
    }
    run.steps++;
    run.samples += rep.samples;
  }
  run.bubble_fraction = run.seconds > 0 ? run.breakdown.bubble_s / run.seconds : 0.0;
  return run;
}

}  // namespace omnibal::partition
