// Single-process validation of the profiled cost model's per-unit additivity (lib/profile/README,
// "Additivity benchmark", the part that does not need the multi-process trainer): profile every
// unit (lib/profile), then for a few pipeline splits compare
//   predicted  stage forward / backward seconds = sums of the profiled unit medians, and the
//              1F1B step time of lib/schedule's timeline fed with them
//   measured   the same split's stages run for real, one after another in this process (stage
//              boundaries cut the autograd graph exactly as a pipeline does: the received
//              activation is a leaf, the sent gradient its .grad()), timed per stage, and the
//              timeline fed with those measured stage times
// over interleaved repetitions (median, min-max). Prints the errors and their median.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/model_preset.h"
#include "models/vlm.h"
#include "partition/partition_search.h"
#include "partition/stage_partition.h"
#include "profile/profiling_pack.h"
#include "profile/unit_profiler.h"
#include "schedule/one_f_one_b.h"
#include "schedule/pipeline_timeline.h"

using namespace omnibal;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

profile::ProfileClock g_clock = profile::ProfileClock::kWall;

/// Seconds on the benchmark's clock (the profiler's, so both sides are timed alike).
double now_s() { return profile::clock_seconds(g_clock); }

/// Per-stage forward and backward seconds of one micro-batch.
struct StageTimes {
  std::vector<double> forward_s, backward_s;
};

/// 1F1B step time of `m` identical micro-batches with these stage times (no transfer cost: the
/// stages share one process here).
double step_seconds(const StageTimes& t, int m) {
  const int p = static_cast<int>(t.forward_s.size());
  auto costs = schedule::PipelineStepCosts::zeros(p, m);
  for (int s = 0; s < p; ++s)
    for (int i = 0; i < m; ++i)
      costs.forward_s[s][i] = t.forward_s[s], costs.backward_s[s][i] = t.backward_s[s];
  double end = 0;
  for (const auto& st : schedule::run_pipeline_timeline(schedule::build_1f1b_schedule(p, m), costs))
    end = std::max(end, st.ready_for_reduce_s);
  return end;
}

StageTimes predicted(const partition::UnitCostTable& table, const partition::Partition& split) {
  StageTimes t;
  for (int s = 0; s < split.stages(); ++s) {
    double f = 0, b = 0;
    for (int u = split.begin(s); u < split.end(s); ++u)
      f += table.units[u].forward_s, b += table.units[u].backward_s;
    t.forward_s.push_back(f);
    t.backward_s.push_back(b);
  }
  return t;
}

/// Runs `pack` through the stages of `split` one after another, forward then backward, and
/// returns each stage's seconds.
StageTimes run_split(const std::vector<models::UnitPtr>& units, const partition::Partition& split,
                     const models::PackBatch& pack) {
  const int p = split.stages();
  StageTimes t{std::vector<double>(p), std::vector<double>(p)};
  std::vector<models::UnitState> in(p), out(p);
  models::UnitState state = models::UnitState::from_pack(pack);
  for (int s = 0; s < p; ++s) {
    in[s] = state;
    if (s > 0) in[s].hidden = state.hidden.detach().requires_grad_(true);  // received activation
    const std::vector<models::UnitPtr> stage(units.begin() + split.begin(s),
                                             units.begin() + split.end(s));
    const double t0 = now_s();
    out[s] = models::run_units(stage, in[s]);
    t.forward_s[s] = now_s() - t0;
    state = out[s];
  }
  torch::Tensor grad;
  for (int s = p - 1; s >= 0; --s) {
    const double t0 = now_s();
    if (s == p - 1) out[s].loss_sum.backward();
    else out[s].hidden.backward(grad);
    t.backward_s[s] = now_s() - t0;
    if (s > 0) grad = in[s].hidden.grad();  // sent gradient
  }
  for (auto& u : units) u->zero_grad();
  return t;
}

using NamedSplit = std::pair<std::string, partition::Partition>;

/// The compared splits of `table`'s units over `pp` stages: uniform, balanced (the partition
/// search on the profiled unit times, m micro-batches, free links) and skewed (stage 0 = the
/// first two units, the rest spread evenly).
std::vector<NamedSplit> compared_splits(const partition::UnitCostTable& table, int pp, int m) {
  const int n = static_cast<int>(table.units.size());
  partition::PartitionSearchInput in;
  for (const auto& u : table.units) {
    in.unit_seconds.push_back(u.forward_s + u.backward_s);
    in.unit_forward_s.push_back(u.forward_s);
    in.output_bytes.push_back(u.output_bytes);
  }
  in.link_bandwidth = 1e15;
  in.stages = pp;
  in.micro_batches = m;
  in.top_k = 1;
  std::vector<NamedSplit> splits{{"uniform", partition::uniform_partition(n, pp)},
                                 {"balanced",
                                  partition::search_partitions(in).top.at(0).partition}};
  std::vector<int> skew_cuts;
  for (int s = 1; s < pp; ++s) skew_cuts.push_back(s == 1 ? 2 : 2 + (n - 2) * (s - 1) / (pp - 1));
  splits.emplace_back("skewed", partition::Partition::from_boundaries(skew_cuts, n));
  return splits;
}

/// measured[split][rep]: per-stage seconds averaged over the m packs, for `reps` interleaved
/// rounds after one warm-up round.
std::vector<std::vector<StageTimes>> measure_splits(const std::vector<models::UnitPtr>& units,
                                                    const std::vector<NamedSplit>& splits,
                                                    const std::vector<models::PackBatch>& packs,
                                                    int pp, int reps) {
  const double m = static_cast<double>(packs.size());
  std::vector<std::vector<StageTimes>> measured(splits.size());
  for (int r = 0; r < reps + 1; ++r)  // first round is warm-up
    for (size_t k = 0; k < splits.size(); ++k) {
      StageTimes sum{std::vector<double>(pp), std::vector<double>(pp)};
      for (const auto& pack : packs) {
        const auto t = run_split(units, splits[k].second, pack);
        for (int s = 0; s < pp; ++s)
          sum.forward_s[s] += t.forward_s[s] / m, sum.backward_s[s] += t.backward_s[s] / m;
      }
      if (r > 0) measured[k].push_back(sum);
    }
  return measured;
}

/// Prints one split's predicted vs measured 1F1B step and per-stage fwd+bwd, and appends the
/// relative errors (|predicted / measured - 1|) to `step_err` and `stage_err`.
void report_split(const NamedSplit& split, const partition::UnitCostTable& table,
                  const std::vector<StageTimes>& measured, int m, std::vector<double>& step_err,
                  std::vector<double>& stage_err) {
  const int pp = split.second.stages();
  const auto pred = predicted(table, split.second);
  std::vector<double> steps;
  StageTimes med{std::vector<double>(pp), std::vector<double>(pp)};
  for (const auto& t : measured) steps.push_back(step_seconds(t, m));
  for (int s = 0; s < pp; ++s) {
    std::vector<double> f, b;
    for (const auto& t : measured) f.push_back(t.forward_s[s]), b.push_back(t.backward_s[s]);
    med.forward_s[s] = median(f), med.backward_s[s] = median(b);
  }
  const double pred_step = step_seconds(pred, m), meas_step = median(steps);
  fmt::print(
      "{:<9} {:<22} step: predicted {:.2f} ms, measured {:.2f} ms ({:.2f}-{:.2f}), "
      "error {:+.1f}%\n",
      split.first, split.second.to_string(), 1e3 * pred_step, 1e3 * meas_step,
      1e3 * *std::min_element(steps.begin(), steps.end()),
      1e3 * *std::max_element(steps.begin(), steps.end()), 100 * (pred_step / meas_step - 1));
  step_err.push_back(std::abs(pred_step / meas_step - 1));
  for (int s = 0; s < pp; ++s) {
    const double p = pred.forward_s[s] + pred.backward_s[s],
                 q = med.forward_s[s] + med.backward_s[s];
    fmt::print("    stage {}: fwd+bwd predicted {:.2f} ms, measured {:.2f} ms, error {:+.1f}%\n", s,
               1e3 * p, 1e3 * q, 100 * (p / q - 1));
    stage_err.push_back(std::abs(p / q - 1));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("profiled per-unit costs vs measured stage times (single process)");
  std::string preset_name = "tiny";
  profile::ProfileOptions po;
  po.pack = {32, 224, 4, 1, -1};
  int pp = 2, m = 4, reps = 5, threads = 2;
  app.add_option("--preset", preset_name);
  app.add_option("--q-vit", po.pack.q_vit);
  app.add_option("--q-tok", po.pack.q_tok);
  app.add_option("--samples", po.pack.samples);
  app.add_option("--pp", pp);
  app.add_option("--micro-batches", m);
  app.add_option("--reps", reps);
  app.add_option("--threads", threads);
  bool cpu_clock = false;
  app.add_flag("--cpu-clock", cpu_clock,
               "thread CPU time instead of wall time (needs --threads 1)");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(threads);
  if (cpu_clock && threads == 1) g_clock = po.clock = profile::ProfileClock::kThreadCpu;
  const auto preset = load_model_preset(preset_name);
  po.repeats = reps;
  const auto table = profile::profile_units(preset, po).table;
  const auto splits = compared_splits(table, pp, m);

  models::VlmOptions vo;
  vo.with_img_context_id(profile::profiling_img_context_id(preset, po.pack));
  const auto units = models::make_units(preset, vo, 0, static_cast<int>(table.units.size()));
  std::vector<models::PackBatch> packs;
  for (int i = 0; i < m; ++i) {
    auto o = po.pack;
    o.seed = 100 + i;
    packs.push_back(profile::make_profiling_pack(preset, o));
  }
  const auto measured = measure_splits(units, splits, packs, pp, reps);
  fmt::print(
      "{} at {} tiles / {} tokens / {} samples, pp {}, m {}, {} threads, {} reps, {} clock\n",
      preset.name, po.pack.q_vit, po.pack.q_tok, po.pack.samples, pp, m, threads, reps,
      g_clock == profile::ProfileClock::kWall ? "wall" : "thread-CPU");
  std::vector<double> stage_err, step_err;
  for (size_t k = 0; k < splits.size(); ++k)
    report_split(splits[k], table, measured[k], m, step_err, stage_err);
  fmt::print("median |error|: stage fwd+bwd {:.1f}%, 1F1B step {:.1f}%\n", 100 * median(stage_err),
             100 * median(step_err));
  return 0;
}
