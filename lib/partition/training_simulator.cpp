#include "partition/training_simulator.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "schedule/pipeline_timeline.h"
#include "schedule/schedules.h"
#include "schedule/zb_v_schedule.h"

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

/// The pipeline rank holding virtual stage k of the setup's split (schedule::chunk_layout).
int rank_of(const SimulatorSetup& setup, int k) {
  return schedule::stage_of_virtual(k, setup.ranks(), schedule::chunk_layout(setup.schedule));
}

std::vector<StageMicroBatch> stage_costs(const UnitCostTable& t, const SimulatorSetup& setup,
                                         const TpLink& link) {
  OMNIBAL_CHECK(t.tp == setup.tp, "simulator: the cost model's tables are per rank of tp ", t.tp,
                ", the setup has tp = ", setup.tp,
                " (a profiled table is per rank of the tp it was profiled at)");
  const Partition& p = setup.partition;
  // ZB-V runs a recomputed unit's W right after its B (lib/schedule/README.md): it stays in B and
  // keeps nothing past it.
  const bool w_in_b = setup.schedule == PipelineSchedule::kZbV;
  std::vector<StageMicroBatch> out(p.stages());
  for (int k = 0; k < p.stages(); ++k) {
    auto& c = out[k];
    for (int u = p.begin(k); u < p.end(k); ++u) {
      const auto& unit = t.units[u];
      c.backward_s += unit.backward_s;
      if (!(w_in_b && unit.checkpointed(setup.recompute[u]))) {
        c.weight_s += unit.weight_backward_s();
        c.weight_kept += unit.deferred_weight_bytes();
      }
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

/// The checks of check_setup that one DP rank's costs need (model, schedule, chunks, tp,
/// recompute flags, overheads).
void check_rank_setup(const SimulatorSetup& setup) {
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
  OMNIBAL_CHECK(static_cast<int>(setup.recompute.size()) == setup.partition.units(),
                "simulator: recompute flags for ", setup.recompute.size(), " units, partition has ",
                setup.partition.units());
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

void check_setup(const SimulatorSetup& setup, const StepLoads& loads) {
  check_rank_setup(setup);
  const int P = setup.ranks();
  OMNIBAL_CHECK(static_cast<int>(loads.size()) == setup.dp, "simulator: loads for ", loads.size(),
                " DP ranks, expected dp = ", setup.dp);
  for (size_t r = 0; r < loads.size(); ++r)
    OMNIBAL_CHECK(!loads[r].empty() && loads[r].size() == loads[0].size(), "simulator: DP rank ", r,
                  " has ", loads[r].size(), " micro-batches, rank 0 has ", loads[0].size(),
                  " (every rank runs the same m >= 1)");
  OMNIBAL_CHECK(static_cast<int>(setup.static_bytes.size()) == P, "simulator: static memory for ",
                setup.static_bytes.size(), " ranks, expected ", P, " pipeline ranks");
  OMNIBAL_CHECK(setup.dp_jitter >= 0, "simulator: dp_jitter is ", setup.dp_jitter,
                ", expected >= 0");
  OMNIBAL_CHECK(!setup.dp_link || (setup.dp_link->bandwidth > 0 && setup.dp_link->latency_s >= 0),
                "simulator: the DP link needs a bandwidth > 0 and a latency >= 0");
  if (setup.shard == ShardMode::kFull) {
    OMNIBAL_CHECK(P == 1, "simulator: shard full (ZeRO-3) with ", P,
                  " pipeline ranks is refused, as DeepSpeed refuses ZeRO-3 with pipeline "
                  "parallelism; use pp 1, or shard none | optimizer");
    OMNIBAL_CHECK(setup.dp_jitter == 0 && setup.overheads.loader_per_micro_batch_s.empty(),
                  "simulator: shard full does not model a DP jitter or loader overheads");
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

TpLink SimulatorSetup::data_parallel_link() const {
  if (dp_link) return *dp_link;
  return {data_parallel_bandwidth(device, dp, tp), device.collective_latency_s};
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

/// One DP rank's costs of a step (rank_step_costs), and in `out` what its compute is spent on.
schedule::PipelineStepCosts rank_costs(const SimulatorSetup& setup,
                                       const std::vector<MicroBatchLoad>& loads, RankStep& out) {
  const int P = setup.ranks(), V = setup.partition.stages(), m = static_cast<int>(loads.size());
  const bool split = schedule::splits_backward(setup.schedule);
  const double p2p_bw = pipeline_link_bandwidth(setup.device, setup.dp, setup.tp);
  const TpLink link = setup.tp_link ? *setup.tp_link : tp_link(setup.device, setup.tp);
  auto costs = schedule::PipelineStepCosts::zeros(V, m);
  costs.layout = schedule::chunk_layout(setup.schedule);
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
          const double f = 1.0 + (frac.empty() ? 0.0 : frac[rank_of(setup, k)]);
          const double h = ckpt.empty() ? 0.0 : ckpt[rank_of(setup, k)];  // on f, checkpointed
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
      const int s = rank_of(setup, k);
      costs.forward_s[k][i] = sc[k].forward_s + sc[k].tp_forward_s + host[s] * P / V;
      costs.backward_s[k][i] = sc[k].backward_s + sc[k].tp_backward_s;
      // ZB: W is the weight-gradient compute; recomputation and the TP all-reduces stay in B.
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
  }
  const auto& loader = setup.overheads.loader_per_micro_batch_s;
  if (!loader.empty()) {
    costs.background_s.assign(P, 0.0);
    for (int s = 0; s < P; ++s) costs.background_s[s] = loader[s] * m;
  }
  return costs;
}

/// The lists of rank_step_schedules for one DP rank's `costs` of m micro-batches.
schedule::StageSchedules schedules_for(const SimulatorSetup& setup,
                                       const schedule::PipelineStepCosts& costs, int m) {
  if (setup.schedule == PipelineSchedule::kZbV)
    return schedule::build_zb_v_schedule(setup.ranks(), m, &costs);
  return schedule::build_schedule(setup.schedule, setup.ranks(), m,
                                  schedule::chunks_per_rank(setup.schedule, setup.virtual_stages));
}

/// One DP rank's step: its costs, walked on `lists` (null under ZB-V: the lists are built for
/// this rank's own costs, rank_step_schedules).
RankStep simulate_rank(const SimulatorSetup& setup, const std::vector<MicroBatchLoad>& loads,
                       const schedule::StageSchedules* lists, StepReport& rep,
                       std::vector<schedule::TimelineEvent>* events) {
  RankStep out;
  const schedule::PipelineStepCosts costs = rank_costs(setup, loads, out);
  for (const auto& load : loads) {
    rep.samples += load.samples();
    rep.tiles += load.tiles();
    rep.tokens += load.real_tokens();
  }
  const schedule::StageSchedules own =
      lists ? schedule::StageSchedules()
            : schedules_for(setup, costs, static_cast<int>(loads.size()));
  out.timeline = schedule::run_pipeline_timeline(lists ? *lists : own, costs, events);
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
      if (table.units[u].trainable) bytes[rank_of(setup, k)] += table.units[u].parameter_bytes;
  return bytes;
}

/// Seconds of one unit for one micro-batch, with its rank's compute and checkpoint fractions
/// (applied as simulate_rank applies them to its chunk sums).
struct UnitSeconds {
  double forward = 0, backward = 0;        ///< compute, TP all-reduces excluded
  double tp_forward = 0, tp_backward = 0;  ///< TP all-reduces
  double recompute = 0, checkpointed = 0;  ///< the rerun; checkpointed forward + rerun
};

std::vector<UnitSeconds> unit_seconds(const UnitCostTable& t, const SimulatorSetup& setup,
                                      const TpLink& link) {
  const auto& frac = setup.overheads.compute_fraction;
  const auto& ckpt = setup.overheads.checkpoint_fraction;
  std::vector<UnitSeconds> out(t.units.size());
  for (int k = 0; k < setup.partition.stages(); ++k) {
    const double f = 1.0 + (frac.empty() ? 0.0 : frac[rank_of(setup, k)]);
    const double h = ckpt.empty() ? 0.0 : ckpt[rank_of(setup, k)];
    for (int u = setup.partition.begin(k); u < setup.partition.end(k); ++u) {
      const auto& unit = t.units[u];
      auto& o = out[u];
      o.tp_forward = tp_forward_seconds(unit, setup.tp, link);
      o.tp_backward = tp_backward_seconds(unit, setup.recompute[u], setup.tp, link);
      if (unit.checkpointed(setup.recompute[u])) {
        const double forward = unit.checkpointed_forward(), rerun = unit.rerun_seconds();
        o.forward = forward * (f + h);
        o.backward = unit.backward_s * f + rerun * (f + h);
        o.recompute = rerun * (f + h);
        o.checkpointed = (forward + rerun) * (f + h);
      } else {
        o.forward = unit.forward_s * f;
        o.backward = unit.backward_s * f;
      }
    }
  }
  return out;
}

/// Seconds of one DP collective moving `bytes` per rank with ring factor `factor` on `link`
/// ((dp-1)/dp for an all-gather or a reduce-scatter, twice that for an all-reduce): latency +
/// factor * bytes / bandwidth; 0 when nothing moves (one rank, no bytes).
double collective_seconds(double bytes, double factor, const TpLink& link) {
  return bytes > 0 && factor > 0 ? link.latency_s + factor * bytes / link.bandwidth : 0.0;
}

/// Seconds per-unit collectives run past the end of a chain of computes when collective j
/// starts once compute j is done and the link is free (gradient buckets during a backward): 0
/// when everything hides, else at least the last collective.
double exposed_after(const std::vector<double>& compute, const std::vector<double>& comm) {
  double t_compute = 0, t_link = 0;
  for (size_t j = 0; j < compute.size(); ++j) {
    t_compute += compute[j];
    if (comm[j] > 0) t_link = std::max(t_link, t_compute) + comm[j];
  }
  return std::max(0.0, t_link - t_compute);
}

/// Seconds by which per-unit collectives, issued together ahead of a chain of computes and run
/// one after another, delay its end when compute j waits for collective j (the parameter
/// all-gathers ahead of a forward): at least the first collective.
double exposed_before(const std::vector<double>& comm, const std::vector<double>& compute) {
  double t_compute = 0, t_link = 0, sum = 0;
  for (size_t j = 0; j < compute.size(); ++j) {
    t_link += comm[j];
    t_compute = std::max(t_compute, t_link) + compute[j];
    sum += compute[j];
  }
  return std::max(0.0, t_compute - sum);
}

/// Exposed seconds of pipeline rank s's overlapped DP collectives under none / optimizer (file
/// comment): the gradient buckets behind the backward of the last of `loads` (the micro-batches
/// of the DP rank that starts the reduction) and, under optimizer, the parameter all-gathers
/// ahead of the forward of the first.
double overlapped_reduce_seconds(const SimulatorSetup& setup, int s,
                                 const std::vector<MicroBatchLoad>& loads, const TpLink& dp_link,
                                 const TpLink& tp) {
  const int P = setup.ranks(), V = setup.partition.stages(), dp = setup.dp;
  const bool sharded = setup.shard == ShardMode::kOptimizer;
  const double factor = (sharded ? 1.0 : 2.0) * (dp - 1) / dp;
  const UnitCostTable last = setup.model->costs(loads.back());
  const auto back = unit_seconds(last, setup, tp);
  std::vector<double> compute, comm;
  auto bucket = [&](int u) {
    const auto& unit = last.units[u];
    comm.push_back(unit.trainable ? collective_seconds(unit.parameter_bytes, factor, dp_link)
                                  : 0.0);
  };
  for (int k = V - P + s; k >= 0; k -= P)  // the rank's chunks, the last one's backward first
    for (int u = setup.partition.end(k) - 1; u >= setup.partition.begin(k); --u) {
      compute.push_back(back[u].backward + back[u].tp_backward);
      bucket(u);
    }
  const double reduce = exposed_after(compute, comm);
  if (!sharded) return reduce;
  const auto front = unit_seconds(setup.model->costs(loads.front()), setup, tp);
  compute.clear();
  comm.clear();
  for (int k = s; k < V; k += P)
    for (int u = setup.partition.begin(k); u < setup.partition.end(k); ++u) {
      compute.push_back(front[u].forward + front[u].tp_forward);
      bucket(u);
    }
  return reduce + exposed_before(comm, compute);
}

/// The DP level of a none / optimizer step, per pipeline rank: when its reduction starts (the
/// expected slowest DP rank), reduction + optimizer seconds, and when the rank is done.
struct DpLevel {
  std::vector<double> reduce_start, comm, done;
};

DpLevel reduce_stages(const SimulatorSetup& setup, const StepLoads& loads,
                      const std::vector<RankStep>& ranks, StepReport& rep) {
  const int P = setup.ranks(), dp = setup.dp;
  const auto param_bytes = stage_parameter_bytes(setup, loads[0][0]);
  const TpLink link = setup.data_parallel_link();
  const TpLink tp = setup.tp_link ? *setup.tp_link : tp_link(setup.device, setup.tp);
  DpLevel d{std::vector<double>(P, 0.0), std::vector<double>(P, 0.0), std::vector<double>(P, 0.0)};
  for (int s = 0; s < P; ++s) {
    std::vector<double> ready(dp), sd(dp);
    for (int r = 0; r < dp; ++r) {
      ready[r] = ranks[r].timeline[s].ready_for_reduce_s;
      sd[r] = dp > 1 ? setup.dp_jitter * ready[r] : 0.0;
    }
    d.reduce_start[s] = expected_maximum(ready, sd);
    const auto slowest = std::max_element(ready.begin(), ready.end()) - ready.begin();
    const double reduce = setup.overlap
                              ? overlapped_reduce_seconds(setup, s, loads[slowest], link, tp)
                          : dp > 1 ? 2.0 * (dp - 1) / dp * param_bytes[s] / link.bandwidth
                                   : 0.0;
    const double params = param_bytes[s] / kBf16 / (setup.shard == ShardMode::kNone ? 1 : dp);
    const double optimizer =
        setup.overheads.per_step_s.empty()
            ? params * kOptimizerBytesPerParam / (setup.device.hbm_bandwidth * 0.8)
            : setup.overheads.per_step_s[s];
    d.comm[s] = reduce + optimizer;
    d.done[s] = d.reduce_start[s] + d.comm[s];
    rep.stages[s].reduce_s = reduce;
  }
  return d;
}

/// Fills rep's breakdown, stage reports and DP ranks' busy seconds from the ranks' timelines
/// and the DP level (rep.step_s set).
void report_stages(const SimulatorSetup& setup, const std::vector<RankStep>& ranks,
                   const DpLevel& d, StepReport& rep) {
  const int P = setup.ranks(), dp = setup.dp;
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
      b.bubble_s = (tl.ready_for_reduce_s - busy) + (rep.step_s - d.done[s]);
      b.dp_wait_s = d.reduce_start[s] - tl.ready_for_reduce_s;
      b.comm_s = d.comm[s];
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
}

/// One collective on the DP link of a ZeRO-3 step: when it ran and when the link was free for
/// it (seconds from the step's start).
struct Collective {
  double start = 0, end = 0, free_before = 0;
};

/// The DP link of a ZeRO-3 step: collectives one after another, each taking every DP rank.
struct DpLinkTimeline {
  double free = 0;
  /// Runs a collective of `seconds` that the last rank issues at `issued`; a collective that
  /// moves nothing ends when issued and waits for nothing.
  Collective run(double issued, double seconds) {
    if (seconds <= 0) return {issued, issued, issued};
    const Collective c{std::max(free, issued), std::max(free, issued) + seconds, free};
    free = c.end;
    return c;
  }
};

/// The computes of a ZeRO-3 step in order (per micro-batch every unit's forward, then every
/// unit's backward in reverse) and the collectives around each: the all-gather it waits for and
/// the reduce-scatter after it (seconds, 0: none), the same on every DP rank.
struct ShardedChain {
  std::vector<double> gather, scatter;
  std::vector<int> micro_batch;
  std::vector<bool> backward;
};

ShardedChain sharded_chain(const SimulatorSetup& setup, const UnitCostTable& t, int m) {
  const TpLink link = setup.data_parallel_link();
  const double factor = static_cast<double>(setup.dp - 1) / setup.dp;
  const int n = static_cast<int>(t.units.size());
  ShardedChain c;
  auto add = [&](int i, bool backward, double gather, double scatter) {
    c.gather.push_back(gather);
    c.scatter.push_back(scatter);
    c.micro_batch.push_back(i);
    c.backward.push_back(backward);
  };
  for (int i = 0; i < m; ++i) {
    for (int u = 0; u < n; ++u)
      add(i, false, collective_seconds(t.units[u].parameter_bytes, factor, link), 0.0);
    for (int u = n - 1; u >= 0; --u) {
      const auto& unit = t.units[u];
      const double bytes = unit.parameter_bytes;
      const bool has_backward = unit.trainable || unit.backward_s > 0;
      add(i, true, has_backward ? collective_seconds(bytes, factor, link) : 0.0,
          unit.trainable ? collective_seconds(bytes, factor, link) : 0.0);
    }
  }
  return c;
}

/// One DP rank's computes of a ZeRO-3 step, in ShardedChain order (seconds, TP all-reduces and
/// the micro-batch's host costs included), and what they were spent on.
struct ShardedRank {
  std::vector<double> compute;
  double forward_s = 0, backward_s = 0, padding_s = 0, recompute_s = 0, tp_comm_s = 0;
  double checkpointed_s = 0, peak_activation_bytes = 0;
};

ShardedRank sharded_rank(const SimulatorSetup& setup, const std::vector<MicroBatchLoad>& loads,
                         const TpLink& tp, StepReport& rep) {
  ShardedRank out;
  for (const auto& load : loads) {
    const UnitCostTable t = setup.model->costs(load);
    const auto sec = unit_seconds(t, setup, tp);
    std::vector<UnitSeconds> bare;  // the unpadded micro-batch (padded layout only)
    if (load.padded_len > 0) bare = unit_seconds(setup.model->costs(load.unpadded()), setup, tp);
    const int n = static_cast<int>(sec.size());
    double kept = 0, transient = 0;
    for (int u = 0; u < n; ++u) {
      const auto& s = sec[u];
      out.compute.push_back(s.forward + s.tp_forward +
                            (u == 0 ? setup.overheads.micro_batch_s(0, load) : 0.0));
      out.forward_s += out.compute.back();
      out.tp_comm_s += s.tp_forward + s.tp_backward;
      out.checkpointed_s += s.checkpointed;
      out.recompute_s += bare.empty() ? s.recompute : bare[u].recompute;
      if (!bare.empty())
        out.padding_s += s.forward + s.backward - bare[u].forward - bare[u].backward;
      const bool ckpt = t.units[u].checkpointed(setup.recompute[u]);
      kept += ckpt ? t.checkpoint_bytes(u) : t.units[u].activation_bytes;
      if (ckpt) transient = std::max(transient, t.units[u].activation_bytes);
    }
    for (int u = n - 1; u >= 0; --u) {
      out.compute.push_back(sec[u].backward + sec[u].tp_backward);
      out.backward_s += out.compute.back();
    }
    out.peak_activation_bytes = std::max(out.peak_activation_bytes, kept + transient);
    rep.samples += load.samples();
    rep.tiles += load.tiles();
    rep.tokens += load.real_tokens();
  }
  return out;
}

/// Every DP rank's clock through a ZeRO-3 step and how it waited: dp_wait as long as a
/// collective it waits for started later than the rank's own issue would have let it (another
/// rank late), comm for the rest (the transfer, the link busy with earlier collectives).
struct ShardedWalk {
  std::vector<double> ready, comm_s, dp_wait_s;  ///< per DP rank
  DpLinkTimeline link;

  /// Rank r waits for `c`, which it issued at `issued`.
  void wait(size_t r, const Collective& c, double issued) {
    if (c.end <= ready[r]) return;
    const double total = c.end - ready[r];
    const double late = std::min(total, std::max(0.0, c.start - std::max(c.free_before, issued)));
    dp_wait_s[r] += late;
    comm_s[r] += total - late;
    ready[r] = c.end;
  }
  double latest() const { return *std::max_element(ready.begin(), ready.end()); }
};

/// Walks `chain` over every rank (file comment: prefetch one ahead under overlap, every
/// collective blocking without), ending when each rank has its last reduce-scatter; adds
/// compute spans to `trace` when not null.
ShardedWalk walk_sharded_chain(const ShardedChain& chain, const std::vector<ShardedRank>& ranks,
                               bool overlap, schedule::StepTrace* trace) {
  const size_t K = chain.gather.size(), dp = ranks.size();
  ShardedWalk w{std::vector<double>(dp, 0.0),
                std::vector<double>(dp, 0.0),
                std::vector<double>(dp, 0.0),
                {}};
  std::vector<double> gather_issued(dp, 0.0), scatter_issued(dp, 0.0);  // per rank
  Collective gather = overlap ? w.link.run(0.0, chain.gather[0]) : Collective{}, scatter;
  for (size_t k = 0; k < K; ++k) {
    if (!overlap) {
      gather_issued = w.ready;
      gather = w.link.run(w.latest(), chain.gather[k]);
    }
    for (size_t r = 0; r < dp; ++r) w.wait(r, gather, gather_issued[r]);
    if (overlap && k + 1 < K) {  // prefetch: issued as this compute starts
      gather_issued = w.ready;
      gather = w.link.run(w.latest(), chain.gather[k + 1]);
    }
    for (size_t r = 0; r < dp; ++r) {
      const double start = w.ready[r];
      w.ready[r] += ranks[r].compute[k];
      if (trace)
        trace->spans.push_back({static_cast<int>(r), 0, chain.backward[k] ? "backward" : "forward",
                                chain.micro_batch[k], 0, start * 1e6, w.ready[r] * 1e6});
    }
    if (chain.scatter[k] <= 0) continue;
    scatter_issued = w.ready;
    scatter = w.link.run(w.latest(), chain.scatter[k]);
    if (!overlap)
      for (size_t r = 0; r < dp; ++r) w.wait(r, scatter, scatter_issued[r]);
  }
  // Before the optimizer: the last reduce-scatter (the link runs in order, so every earlier one).
  for (size_t r = 0; r < dp; ++r) w.wait(r, scatter, scatter_issued[r]);
  return w;
}

/// One ZeRO-3 step (shard full, one pipeline rank): the chain walked over every DP rank, then
/// the optimizer on each rank's 1/dp shard.
StepReport simulate_sharded_step(const SimulatorSetup& setup, const StepLoads& loads,
                                 schedule::StepTrace* trace) {
  const int dp = setup.dp;
  const TpLink tp = setup.tp_link ? *setup.tp_link : tp_link(setup.device, setup.tp);
  StepReport rep;
  rep.stages.assign(1, {});
  std::vector<ShardedRank> ranks;
  for (int r = 0; r < dp; ++r) ranks.push_back(sharded_rank(setup, loads[r], tp, rep));
  const ShardedChain chain =
      sharded_chain(setup, setup.model->costs(loads[0][0]), static_cast<int>(loads[0].size()));
  const ShardedWalk w = walk_sharded_chain(chain, ranks, setup.overlap, trace);
  const double params = stage_parameter_bytes(setup, loads[0][0])[0] / kBf16 / dp;
  const double optimizer =
      setup.overheads.per_step_s.empty()
          ? params * kOptimizerBytesPerParam / (setup.device.hbm_bandwidth * 0.8)
          : setup.overheads.per_step_s[0];
  rep.step_s = w.latest() + optimizer;
  rep.dp_busy_s.assign(dp, 0.0);
  auto& st = rep.stages[0];
  for (int r = 0; r < dp; ++r) {
    const ShardedRank& k = ranks[r];
    const double busy = k.forward_s + k.backward_s, done = w.ready[r] + optimizer;
    rep.dp_busy_s[r] = busy;
    TimeBreakdown b;
    b.padding_s = k.padding_s;
    b.recompute_s = k.recompute_s;
    b.tp_comm_s = k.tp_comm_s;
    b.useful_s = busy - b.padding_s - b.recompute_s - b.tp_comm_s;
    b.dp_wait_s = w.dp_wait_s[r] + (rep.step_s - done);
    b.comm_s = w.comm_s[r] + optimizer;
    rep.breakdown += b.scaled(1.0 / dp);
    st.forward_s += k.forward_s / dp;
    st.backward_s += k.backward_s / dp;
    st.tp_comm_s += k.tp_comm_s / dp;
    st.checkpointed_s += k.checkpointed_s / dp;
    st.dp_wait_s += b.dp_wait_s / dp;
    st.reduce_s += w.comm_s[r] / dp;
    st.peak_memory_bytes =
        std::max(st.peak_memory_bytes, setup.static_bytes[0] + k.peak_activation_bytes);
    if (trace) trace->spans.push_back({r, 0, "optimizer", -1, 0, w.ready[r] * 1e6, done * 1e6});
  }
  rep.peak_memory_bytes = st.peak_memory_bytes;
  return rep;
}

}  // namespace

StepReport simulate_step(const SimulatorSetup& setup, const StepLoads& loads) {
  return simulate_step(setup, loads, nullptr);
}

StepReport simulate_step(const SimulatorSetup& setup, const StepLoads& loads,
                         schedule::StepTrace* trace) {
  check_setup(setup, loads);
  if (trace)
    for (int r = 0; r < setup.dp; ++r)
      for (size_t i = 0; i < loads[r].size(); ++i)
        trace->loads[{r, static_cast<int>(i)}] = {loads[r][i].samples(), loads[r][i].tiles(),
                                                  loads[r][i].real_tokens()};
  if (setup.shard == ShardMode::kFull) return simulate_sharded_step(setup, loads, trace);
  const int P = setup.ranks(), dp = setup.dp;
  // ZB-V's lists follow each DP rank's own costs (built in simulate_rank); the others are fixed.
  const bool own_lists = setup.schedule == PipelineSchedule::kZbV;
  const auto lists =
      own_lists ? schedule::StageSchedules()
                : schedule::build_schedule(setup.schedule, P, static_cast<int>(loads[0].size()),
                                           schedule::chunks_per_rank(setup.schedule,
                                                                     setup.virtual_stages));
  StepReport rep;
  rep.stages.assign(P, {});
  std::vector<RankStep> ranks;
  for (int r = 0; r < dp; ++r) {
    std::vector<schedule::TimelineEvent> events;
    ranks.push_back(simulate_rank(setup, loads[r], own_lists ? nullptr : &lists, rep,
                                  trace ? &events : nullptr));
    if (trace) schedule::append_timeline_spans(*trace, r, events);
  }
  // DP level: per-stage collective after the slowest rank, then the optimizer.
  const DpLevel d = reduce_stages(setup, loads, ranks, rep);
  rep.step_s = *std::max_element(d.done.begin(), d.done.end());
  if (trace)
    for (int r = 0; r < dp; ++r)
      for (int s = 0; s < P; ++s) {
        const double reduced = d.reduce_start[s] + rep.stages[s].reduce_s;
        trace->spans.push_back({r, s, "dp_reduce", -1, 0,
                                ranks[r].timeline[s].ready_for_reduce_s * 1e6, reduced * 1e6});
        trace->spans.push_back({r, s, "optimizer", -1, 0, reduced * 1e6, d.done[s] * 1e6});
      }
  report_stages(setup, ranks, d, rep);
  return rep;
}

schedule::PipelineStepCosts rank_step_costs(const SimulatorSetup& setup,
                                            const std::vector<MicroBatchLoad>& loads) {
  check_rank_setup(setup);
  OMNIBAL_CHECK(!loads.empty(), "rank_step_costs: no micro-batches, expected m >= 1");
  OMNIBAL_CHECK(setup.shard != ShardMode::kFull,
                "rank_step_costs: shard full has no pipeline costs (its step is a chain of units)");
  RankStep unused;
  return rank_costs(setup, loads, unused);
}

schedule::StageSchedules rank_step_schedules(const SimulatorSetup& setup,
                                             const std::vector<MicroBatchLoad>& loads) {
  const auto costs = rank_step_costs(setup, loads);
  return schedules_for(setup, costs, static_cast<int>(loads.size()));
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
