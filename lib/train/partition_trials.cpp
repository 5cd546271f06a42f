#include "train/partition_trials.h"

#include "train/tp_group.h"

#include <fmt/format.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "models/vlm.h"
#include "pipeline/stage_executor.h"
#include "profile/unit_profiler.h"
#include "schedule/one_f_one_b.h"

namespace omnibal::train {
namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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

/// One timed repeat of one candidate: `warmup` untimed steps, then steps_per_repeat timed ones;
/// returns the slowest rank's mean seconds per timed step.
double time_candidate(const partition::Partition& split, const TrialSetup& setup,
                      comm::ParallelComms& comms, comm::TensorMessenger* pipe) {
  const int stage = comms.coord().pp, stages = split.stages();
  models::VlmOptions opt;
  opt.with_img_context_id(setup.img_context_id).with_seed(setup.init_seed).with_dtype(setup.dtype);
  opt.with_tensor_parallel(tensor_parallel_of(comms));  // trials run the TP all-reduces too
  auto units = models::make_units(setup.preset, opt, split.begin(stage), split.end(stage));
  profile::apply_freeze(units, setup.freeze);
  const std::vector<bool> flags = setup.recompute_for(split);
  for (size_t i = 0; i < units.size(); ++i)
    units[i]->set_recompute(flags.at(split.begin(stage) + i));
  pipeline::StageExecutor executor(units, stage, stages, pipe);
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
  for (int r = 0; r < setup.warmup; ++r) step();
  comms.world().barrier("partition trial");
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < setup.steps_per_repeat; ++r) step();
  const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  torch::Tensor t = torch::full({1}, local / setup.steps_per_repeat, torch::kFloat64);
  comms.world().all_reduce(t, comm::ReduceOp::kMax, "partition trial time");
  return t.item<double>();  // units, loader, gradients and activations die here
}

}  // namespace

TrialOutcome decide_trials(std::vector<std::vector<double>> seconds) {
  TrialOutcome o;
  for (size_t i = 0; i < seconds.size(); ++i) {
    OMNIBAL_CHECK(!seconds[i].empty(), "partition trials: candidate ", i, " has no timed repeat");
    o.median_s.push_back(median_of(seconds[i]));
    const auto [lo, hi] = std::minmax_element(seconds[i].begin(), seconds[i].end());
    o.spread_s.push_back(*hi - *lo);
  }
  o.seconds = std::move(seconds);
  for (size_t i = 1; i < o.median_s.size(); ++i) {
    const double noise = std::max(o.spread_s[0], o.spread_s[i]);
    if (o.median_s[i] < o.median_s[0] - noise && o.median_s[i] < o.median_s[o.chosen])
      o.chosen = static_cast<int>(i);
  }
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
  for (int r = 0; r < setup.repeats; ++r)  // interleaved: round r times every candidate once
    for (size_t i = 0; i < candidates.size(); ++i)
      seconds[i].push_back(time_candidate(candidates[i], setup, comms, pipe.get()));
  TrialOutcome o = decide_trials(std::move(seconds));
  summarise_trials(candidates, o);
  return o;
}

void summarise_trials(const std::vector<partition::Partition>& candidates, TrialOutcome& o) {
  OMNIBAL_CHECK(candidates.size() == o.median_s.size(), "partition trials: ", candidates.size(),
                " candidates for ", o.median_s.size(), " outcomes");
  o.summary.clear();
  for (size_t i = 0; i < candidates.size(); ++i)
    o.summary +=
        fmt::format("{}{} {:.1f} ms (spread {:.1f} ms){}", i ? "; " : "", candidates[i].to_string(),
                    1e3 * o.median_s[i], 1e3 * o.spread_s[i], i == 0 ? " [simulator's pick]" : "");
  o.summary += o.chosen == 0 ? std::string(" -> the simulator's pick stands")
                             : fmt::format(" -> {} beats it by more than the noise",
                                           candidates[o.chosen].to_string());
}

}  // namespace omnibal::train
