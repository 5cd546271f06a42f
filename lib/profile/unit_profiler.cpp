#include "profile/unit_profiler.h"

#include "partition/tensor_parallel.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <numeric>
#include <optional>

#include <torch/cuda.h>

#include "core/error.h"
#include "models/recompute.h"
#include "models/torch_compat.h"
#include "models/unit_state.h"
#include "models/vlm.h"
#include "models/weight_grad_store.h"
#include "profile/memory_meter.h"

namespace omnibal::profile {
namespace {

using models::UnitState;

bool frozen(const std::vector<UnitGroup>& freeze, UnitGroup group) {
  return std::find(freeze.begin(), freeze.end(), group) != freeze.end();
}

int64_t bytes_of(const torch::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

void sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

/// One forward (+ backward) of one unit and what the meter saw.
struct UnitRun {
  double forward_s = 0, backward_s = 0;
  double weight_s = 0;       ///< split backward: W (dW = dy^T x of the deferred linears)
  int64_t weight_bytes = 0;  ///< split backward: bytes the deferred W's held
  int64_t kept_bytes = 0, forward_transient = 0, backward_transient = 0;
};

/// How a unit is run: with autograd (something at or before it trains) and whether its input
/// needs a gradient (something before it trains).
struct UnitMode {
  bool input_grad = false;
  bool backward = false;
};

/// A run's own copy of the unit's boundary state, requiring a gradient when the mode asks.
UnitState fresh_input(const UnitState& boundary, UnitMode mode) {
  UnitState in = boundary.with_hidden(boundary.hidden.detach().clone(), boundary.phase);
  if (mode.input_grad && in.hidden.is_floating_point()) in.hidden.requires_grad_(true);
  return in;
}

UnitRun run_once(models::PipelineUnit& unit, const UnitState& boundary, UnitMode mode,
                 MemoryMeter& meter, ProfileClock clock, bool split) {
  // ZB-H1: the forward and B record the linear layers' deferred weight gradients.
  c10::intrusive_ptr<models::WeightGradStore> store;
  std::optional<models::WeightGradStore::Recording> recording;
  if (split && mode.backward) {
    store = c10::make_intrusive<models::WeightGradStore>();
    recording.emplace(store, 0);
  }
  const torch::Device device = meter.device();
  UnitState in = fresh_input(boundary, mode);
  const int64_t input_bytes = bytes_of(in.hidden);
  UnitRun r;
  sync(device);
  const int64_t before = meter.current_bytes();
  meter.reset_peak();
  const double t0 = clock_seconds(clock);
  UnitState out;
  {
    std::optional<torch::NoGradGuard> no_grad;
    if (!mode.backward) no_grad.emplace();
    out = unit.forward(in);
  }
  sync(device);
  r.forward_s = clock_seconds(clock) - t0;
  r.forward_transient = meter.peak_bytes() - meter.current_bytes();
  in = UnitState();  // the caller's reference to the input is gone; the graph may keep it
  const bool head = unit.kind() == UnitKind::kLlmHead;
  r.kept_bytes = meter.current_bytes() - (before - input_bytes) - (head ? 0 : bytes_of(out.hidden));
  if (!mode.backward) return r;
  const torch::Tensor root = head ? out.loss_sum : out.hidden;
  const torch::Tensor grad = torch::ones_like(root);
  sync(device);
  const int64_t start = meter.current_bytes();
  meter.reset_peak();
  const double t1 = clock_seconds(clock);
  torch::autograd::backward({root}, {grad});
  sync(device);
  r.backward_s = clock_seconds(clock) - t1;
  r.backward_transient = meter.peak_bytes() - start;
  if (store) {
    recording.reset();
    r.weight_bytes = store->held_bytes();
    const double t2 = clock_seconds(clock);
    store->run(0);
    sync(device);
    r.weight_s = clock_seconds(clock) - t2;
    r.backward_s += r.weight_s;
  }
  return r;  // gradients stay and accumulate, as over the micro-batches of a training step
}

/// Forward and backward seconds of one run of `unit` checkpointed (models/recompute.h): the
/// forward without autograd, the backward rerunning it with autograd. Runs with grad mode on.
struct CheckpointedRun {
  double forward_s = 0, backward_s = 0;
};

/// Sets a unit's recompute flag for its lifetime (off again however the run ends).
class RecomputeOn {
 public:
  explicit RecomputeOn(models::PipelineUnit& unit) : unit_(unit) { unit_.set_recompute(true); }
  ~RecomputeOn() { unit_.set_recompute(false); }
  RecomputeOn(const RecomputeOn&) = delete;
  RecomputeOn& operator=(const RecomputeOn&) = delete;

 private:
  models::PipelineUnit& unit_;
};

CheckpointedRun run_checkpointed_once(models::PipelineUnit& unit, const UnitState& boundary,
                                      UnitMode mode, const torch::Device& device,
                                      ProfileClock clock) {
  UnitState in = fresh_input(boundary, mode);
  CheckpointedRun r;
  UnitState out;
  {
    const RecomputeOn on(unit);
    sync(device);
    const double t0 = clock_seconds(clock);
    out = models::run_unit(unit, in);
    sync(device);
    r.forward_s = clock_seconds(clock) - t0;
  }
  in = UnitState();
  const double t1 = clock_seconds(clock);
  torch::autograd::backward({out.hidden}, {torch::ones_like(out.hidden)});
  sync(device);
  r.backward_s = clock_seconds(clock) - t1;
  return r;
}

void check_options(const ProfileOptions& o) {
  OMNIBAL_CHECK(o.repeats >= 1, "profile: repeats must be >= 1, got ", o.repeats);
  OMNIBAL_CHECK(o.warmup >= 0, "profile: warmup must be >= 0, got ", o.warmup);
  OMNIBAL_CHECK(o.clock == ProfileClock::kWall || o.device.is_cpu(),
                "profile: the thread CPU clock only times CPU work, not ", o.device.str());
}

}  // namespace

double summarize(std::vector<double> v, ProfileStatistic statistic) {
  OMNIBAL_CHECK(!v.empty(), "profile: no timed runs to summarise");
  const size_t n = v.size();
  switch (statistic) {
    case ProfileStatistic::kMedian:
      std::sort(v.begin(), v.end());
      return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    case ProfileStatistic::kMean:
      return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
  }
  return 0.0;
}

double clock_seconds(ProfileClock clock) {
  if (clock == ProfileClock::kWall)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::vector<bool> trainable_units(const ModelPreset& preset, const std::vector<UnitGroup>& freeze) {
  std::vector<bool> out;
  for (const UnitId& id : unit_chain(preset)) out.push_back(!frozen(freeze, freeze_group(id.kind)));
  return out;
}

void apply_freeze(const std::vector<models::UnitPtr>& units, const std::vector<UnitGroup>& freeze) {
  for (const auto& u : units)
    if (frozen(freeze, freeze_group(u->kind())))
      for (auto& p : u->parameters()) p.requires_grad_(false);
}

namespace {

/// The whole model as one profile runs it: its units, each unit's input state (computed once,
/// without autograd), how each runs and which also run checkpointed.
struct ProfiledModel {
  models::VlmOptions options;
  std::vector<models::UnitPtr> units;
  std::vector<int64_t> parameter_counts;  ///< at TP 1, model order
  std::vector<bool> trainable;            ///< train.freeze applied
  std::vector<UnitState> inputs;          ///< the state at each unit's input
  std::vector<UnitMode> modes;
  /// Trainable ViT / LLM blocks run with autograd (what the recompute planner may checkpoint),
  /// when ProfileOptions::checkpointed.
  std::vector<bool> checkpointable;
};

/// Builds the units of `preset` as `o` asks, freezes them, and runs `pack` through them once.
ProfiledModel build_profiled_model(const ModelPreset& preset, const ProfileOptions& o,
                                   const models::PackBatch& pack) {
  ProfiledModel m;
  m.options.with_img_context_id(profiling_img_context_id(preset, o.pack))
      .with_seed(o.init_seed)
      .with_device(o.device);
  if (o.dtype) m.options.with_dtype(*o.dtype);
  if (o.tp > 1) m.options.with_tensor_parallel(models::TensorParallel::for_profiling(0, o.tp));
  m.parameter_counts = models::unit_parameter_counts(preset);
  m.units = models::make_units(preset, m.options, 0, unit_count(preset));
  apply_freeze(m.units, o.freeze);
  m.trainable = trainable_units(preset, o.freeze);
  const size_t n = m.units.size();
  m.inputs = {UnitState::from_pack(pack, o.device, m.options.dtype)};
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (o.between_units) o.between_units();
      m.inputs.push_back(m.units[i]->forward(m.inputs[i]));
    }
  }
  m.modes.resize(n);
  m.checkpointable.assign(n, false);
  for (size_t i = 0, seen = 0; i < n; ++i) {
    m.modes[i] = {seen > 0, seen > 0 || m.trainable[i]};
    seen += m.trainable[i];
    m.checkpointable[i] = o.checkpointed && m.trainable[i] && m.modes[i].backward &&
                          is_recomputable(m.units[i]->kind());
  }
  return m;
}

/// The timed runs of one unit (warm-up runs dropped).
struct UnitSamples {
  std::vector<UnitRun> runs;
  std::vector<CheckpointedRun> checkpointed;  ///< empty unless the unit is checkpointable
};

/// Runs every unit o.warmup + o.repeats times, units interleaved within each round.
std::vector<UnitSamples> time_units(ProfiledModel& m, const ProfileOptions& o) {
  const size_t n = m.units.size();
  std::vector<UnitSamples> samples(n);
  MemoryMeter meter(o.device);
  for (int r = 0; r < o.warmup + o.repeats; ++r)
    for (size_t i = 0; i < n; ++i) {
      if (o.between_units) o.between_units();
      const UnitRun run =
          run_once(*m.units[i], m.inputs[i], m.modes[i], meter, o.clock, o.split_backward);
      if (r >= o.warmup) samples[i].runs.push_back(run);
      if (!m.checkpointable[i]) continue;
      const CheckpointedRun c =
          run_checkpointed_once(*m.units[i], m.inputs[i], m.modes[i], o.device, o.clock);
      if (r >= o.warmup) samples[i].checkpointed.push_back(c);
    }
  return samples;
}

template <class Run, class Field>
std::vector<double> column(const std::vector<Run>& runs, Field field) {
  std::vector<double> out;
  for (const auto& run : runs) out.push_back(static_cast<double>(run.*field));
  return out;
}

/// The table row of unit `i` from its samples; `param_size`: bytes per parameter.
partition::UnitCost unit_cost(const ProfiledModel& m, size_t i, const UnitSamples& s,
                              const ProfileOptions& o, double param_size) {
  const auto& unit = *m.units[i];
  partition::UnitCost c;
  c.name = cost_table_name(unit.id());
  c.kind = unit.kind();
  c.forward_s = summarize(column(s.runs, &UnitRun::forward_s), o.statistic);
  c.backward_s =
      m.modes[i].backward ? summarize(column(s.runs, &UnitRun::backward_s), o.statistic) : 0.0;
  c.activation_bytes = static_cast<double>(std::max<int64_t>(0, s.runs.back().kept_bytes));
  c.parameter_bytes =  // under TP: one rank's shards (padded vocabulary rows included)
      static_cast<double>(o.tp > 1 ? unit.num_parameters() : m.parameter_counts[i]) * param_size;
  c.trainable = m.trainable[i];
  if (o.split_backward) {  // 0 for frozen units: they defer nothing
    const bool deferred = m.trainable[i] && m.modes[i].backward;
    c.backward_weight_s =
        deferred ? summarize(column(s.runs, &UnitRun::weight_s), o.statistic) : 0.0;
    c.weight_grad_bytes = deferred ? static_cast<double>(s.runs.back().weight_bytes) : 0.0;
  }
  if (m.checkpointable[i]) {
    c.checkpointed_forward_s =
        summarize(column(s.checkpointed, &CheckpointedRun::forward_s), o.statistic);
    c.checkpointed_backward_s =
        summarize(column(s.checkpointed, &CheckpointedRun::backward_s), o.statistic);
  }
  const bool last = i + 1 == m.units.size();
  c.output_bytes = last ? 0.0
                        : static_cast<double>(bytes_of(m.inputs[i + 1].hidden) +
                                              bytes_of(m.inputs[i + 1].side_tensor()));
  return c;
}

/// Appends unit samples' transient bytes and time spread to `res`.
void add_spread(ProfileResult& res, const UnitSamples& s) {
  const auto fwd = column(s.runs, &UnitRun::forward_s);
  const auto bwd = column(s.runs, &UnitRun::backward_s);
  res.forward_transient_bytes.push_back(static_cast<double>(s.runs.back().forward_transient));
  res.backward_transient_bytes.push_back(static_cast<double>(s.runs.back().backward_transient));
  res.forward_min_s.push_back(*std::min_element(fwd.begin(), fwd.end()));
  res.forward_max_s.push_back(*std::max_element(fwd.begin(), fwd.end()));
  res.backward_min_s.push_back(*std::min_element(bwd.begin(), bwd.end()));
  res.backward_max_s.push_back(*std::max_element(bwd.begin(), bwd.end()));
}

}  // namespace

ProfileResult profile_units(const ModelPreset& preset, const ProfileOptions& o) {
  check_options(o);
  const models::PackBatch pack = make_profiling_pack(preset, o.pack);
  ProfiledModel m = build_profiled_model(preset, o, pack);
  const std::vector<UnitSamples> samples = time_units(m, o);
  ProfileResult res;
  auto& t = res.table;
  t.model = preset.name;
  t.source = "profiled:" + o.device.str();
  t.load = {o.pack.q_vit, o.pack.q_tok, o.pack.samples};
  t.load.token_sq_sum = profiling_pack_token_sq_sum(preset, profiling_pack_layout(preset, o.pack));
  const auto dtype = m.options.dtype.value_or(models::compat::default_dtype(o.device));
  const double param_size = static_cast<double>(torch::elementSize(dtype));
  for (size_t i = 0; i < m.units.size(); ++i) {
    t.units.push_back(unit_cost(m, i, samples[i], o, param_size));
    add_spread(res, samples[i]);
  }
  if (o.tp > 1) {  // one TP rank's compute was timed; the all-reduces follow from the shapes
    t.tp = o.tp;
    partition::set_tp_all_reduces(t, preset, param_size);
  }
  return res;
}

}  // namespace omnibal::profile
