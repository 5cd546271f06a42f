#include "train/partition_trials.h"

#include "train/tp_group.h"

#include <fmt/format.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "comm/stop_signal.h"
#include "core/error.h"
#include "models/vlm.h"
#include "pipeline/stage_executor.h"
#include "profile/unit_profiler.h"
#include "schedule/one_f_one_b.h"
#include "train/startup_stop.h"

namespace omnibal::train {
namespace {

/// Saves the CPU default generator's state and puts it back when destroyed.
class GeneratorStateGuard {
 public:
  GeneratorStateGuard() : gen_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    state_ = gen_.get_state();
  }
  ~GeneratorStateGuard() {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    gen_.set_state(state_);
  }

 private:
  at::Generator gen_;
  at::Tensor state_;
};

/// Phase named by StartupStopped.
constexpr const char* kTrialPhase = "partition trials";

/// One timed repeat of one candidate: `warmup` untimed steps, then steps_per_repeat timed ones;
/// returns the slowest rank's mean seconds per timed step. The ranks agree on a stop signal
/// before the timed steps (in place of a barrier) and after them (in the time's all-reduce), so
/// no check adds a collective; throws StartupStopped on every rank alike.
double time_candidate(const partition::Partition& split, const TrialSetup& setup,
                      comm::ParallelComms& comms, comm::TensorMessenger* pipe) {
  const int stage = comms.coord().pp, stages = split.stages();
  models::VlmOptions opt;
  opt.with_img_context_id(setup.img_context_id).with_seed(setup.init_seed).with_dtype(setup.dtype);
  opt.with_device(setup.device);
  opt.with_tensor_parallel(tensor_parallel_of(comms));  // trials run the TP all-reduces too
  auto units = models::make_units(setup.preset, opt, split.begin(stage), split.end(stage));
  profile::apply_freeze(units, setup.freeze);
  const std::vector<bool> flags = setup.recompute_for(split);
  for (size_t i = 0; i < units.size(); ++i)
    units[i]->set_recompute(flags.at(split.begin(stage) + i));
  pipeline::StageExecutor executor(units, stage, stages, pipe, setup.device);
  const auto program = schedule::build_1f1b_schedule(stages, setup.micro_batches)[stage];
  const bool loads = stage == 0 || stage == stages - 1;
  std::unique_ptr<data::PackLoader> loader;
  if (loads && setup.loader) loader = setup.loader(setup.warmup + setup.steps_per_repeat);
  std::vector<models::PackBatch> packs;
  const auto step = [&] {
    packs.clear();
    if (loader) {
      for (int k = 0; k < setup.micro_batches; ++k) {
        auto p = loader->next();
        OMNIBAL_CHECK(p.has_value(), "partition trials: the trial loader ran out of packs");
        packs.push_back(std::move(*p));
      }
    } else if (loads) {
      packs.assign(setup.micro_batches, setup.pack);
    }
    executor.run_step(program, packs, 1e-3);
  };
  // CUDA kernels run asynchronously: the clock reads wait for the device's queued work.
  const auto drain = [&] {
    if (setup.device.is_cuda()) torch::cuda::synchronize(setup.device.index());
  };
  for (int r = 0; r < setup.warmup; ++r) step();
  drain();
  stop_point(comms.world(), kTrialPhase);  // also the barrier the timing starts after
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < setup.steps_per_repeat; ++r) step();
  drain();
  const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  torch::Tensor t =
      torch::tensor({local / setup.steps_per_repeat, comm::stop_requested() ? 1.0 : 0.0},
                    torch::kFloat64);
  comms.world().all_reduce(t, comm::ReduceOp::kMax, "partition trial time and stop flag");
  if (t[1].item<double>() > 0) throw StartupStopped(kTrialPhase);
  return t[0].item<double>();  // units, loader, gradients and activations die here
}

}  // namespace

double trial_t_critical(int rounds) {
  OMNIBAL_CHECK(rounds >= 2, "partition trials: a t test needs >= 2 rounds, got ", rounds);
  const double v = rounds - 1;
  const double c =
      std::exp(std::lgamma((v + 1) / 2) - std::lgamma(v / 2)) / std::sqrt(v * std::acos(-1.0));
  const auto density = [&](double x) { return c * std::pow(1 + x * x / v, -(v + 1) / 2); };
  const auto cdf = [&](double x) {  // 1/2 + the density's integral over [0, x] (Simpson)
    constexpr int kIntervals = 2000;
    const double h = x / kIntervals;
    double sum = density(0) + density(x);
    for (int i = 1; i < kIntervals; ++i) sum += (i % 2 ? 4 : 2) * density(i * h);
    return 0.5 + sum * h / 3;
  };
  double lo = 0, hi = 10;  // the quantile is 2.414 at most (v = 1)
  for (int it = 0; it < 50; ++it) (cdf(0.5 * (lo + hi)) < 0.875 ? lo : hi) = 0.5 * (lo + hi);
  return 0.5 * (lo + hi);
}

TrialOutcome decide_trials(std::vector<std::vector<double>> seconds) {
  TrialOutcome o;
  for (size_t i = 0; i < seconds.size(); ++i) {
    OMNIBAL_CHECK(!seconds[i].empty(), "partition trials: candidate ", i, " has no timed repeat");
    OMNIBAL_CHECK(seconds[i].size() == seconds[0].size(), "partition trials: candidate ", i,
                  " has ", seconds[i].size(), " rounds, candidate 0 has ", seconds[0].size());
    o.median_s.push_back(profile::summarize(seconds[i], profile::ProfileStatistic::kMedian));
    const auto [lo, hi] = std::minmax_element(seconds[i].begin(), seconds[i].end());
    o.spread_s.push_back(*hi - *lo);
  }
  o.rounds = seconds.empty() ? 0 : static_cast<int>(seconds[0].size());
  o.t_critical = o.rounds >= 2 ? trial_t_critical(o.rounds) : 0.0;
  const double n = o.rounds;
  for (const auto& s : seconds) {
    std::vector<double> d(o.rounds);  // d_r = ln(s_r / pick_r)
    double mean = 0, var = 0;
    int wins = 0;
    for (int r = 0; r < o.rounds; ++r) {
      d[r] = std::log(s[r] / seconds[0][r]);
      mean += d[r] / n;
      wins += s[r] < seconds[0][r];
    }
    for (double x : d) var += (x - mean) * (x - mean);
    const double se = o.rounds >= 2 ? std::sqrt(var / (n - 1) / n) : 0.0;
    o.ratio.push_back(std::exp(mean));
    // se below 1e-12 (log units): the rounds agree up to rounding; the sign of mean decides.
    o.t_stat.push_back(se > 1e-12 ? mean / se
                       : mean < 0 ? -std::numeric_limits<double>::infinity()
                                  : 0.0);
    o.wins.push_back(wins);
  }
  o.seconds = std::move(seconds);
  for (size_t i = 1; i < o.ratio.size(); ++i)
    if (o.rounds >= 2 && o.t_stat[i] < -o.t_critical && o.ratio[i] < o.ratio[o.chosen])
      o.chosen = static_cast<int>(i);
  return o;
}

TrialOutcome run_partition_trials(const std::vector<partition::Partition>& candidates,
                                  const TrialSetup& setup, comm::ParallelComms& comms) {
  OMNIBAL_CHECK(setup.repeats >= 3, "partition trials: at least 3 repeats per candidate, got ",
                setup.repeats);
  OMNIBAL_CHECK(setup.steps_per_repeat >= 1, "partition trials: at least 1 step per repeat, got ",
                setup.steps_per_repeat);
  OMNIBAL_CHECK(setup.recompute_for != nullptr, "partition trials: no recompute_for callback");
  GeneratorStateGuard rng;
  std::unique_ptr<comm::TensorMessenger> pipe;
  if (comms.grid().shape().pp > 1) pipe = std::make_unique<comm::TensorMessenger>(comms.pipeline());
  std::vector<std::vector<double>> seconds(candidates.size());
  const size_t n = candidates.size();
  for (int r = 0; r < setup.repeats; ++r)  // round r times every candidate once
    for (size_t k = 0; k < n; ++k) {
      const size_t i = r % 2 ? n - 1 - k : k;  // forward, then reverse: a drift hits all alike
      seconds[i].push_back(time_candidate(candidates[i], setup, comms, pipe.get()));
    }
  TrialOutcome o = decide_trials(std::move(seconds));
  summarise_trials(candidates, o);
  return o;
}

void summarise_trials(const std::vector<partition::Partition>& candidates, TrialOutcome& o) {
  OMNIBAL_CHECK(candidates.size() == o.median_s.size(), "partition trials: ", candidates.size(),
                " candidates for ", o.median_s.size(), " outcomes");
  o.summary.clear();
  for (size_t i = 0; i < candidates.size(); ++i) {
    o.summary += fmt::format("{}{} {:.1f} ms (spread {:.1f} ms)", i ? "; " : "",
                             candidates[i].to_string(), 1e3 * o.median_s[i], 1e3 * o.spread_s[i]);
    o.summary += i == 0 ? std::string(" [simulator's pick]")
                        : fmt::format(", {:.3f}x the pick (t {:.2f}), faster in {} of {} rounds",
                                      o.ratio[i], o.t_stat[i], o.wins[i], o.rounds);
  }
  o.summary +=
      o.chosen == 0
          ? fmt::format(" -> the simulator's pick stands (a replacement needs t < -{:.3f})",
                        o.t_critical)
          : fmt::format(" -> {} beats it (t {:.2f} < -{:.3f})", candidates[o.chosen].to_string(),
                        o.t_stat[o.chosen], o.t_critical);
}

}  // namespace omnibal::train
