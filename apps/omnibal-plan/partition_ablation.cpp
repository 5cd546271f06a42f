#include "partition_ablation.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "balance/data_planner.h"
#include "balance/length_reader.h"
#include "core/error.h"
#include "core/model_preset.h"
#include "memory/recompute_planner.h"
#include "memory/stage_plan.h"
#include "partition/analytic_cost_model.h"
#include "partition/tensor_parallel.h"

namespace omnibal::plan {
namespace {

using partition::MicroBatchLoad;
using partition::Partition;
using partition::StepLoads;

/// Steps of a balance plan as simulator loads (full steps only; the tail is carried).
std::vector<StepLoads> step_loads(const balance::SampleTable& table,
                                  const balance::MethodResult& r) {
  const auto& packs = r.packing.packs;
  const bool padded = packs.layout() == balance::PackLayout::kPadded;
  std::vector<StepLoads> steps(r.plan.steps());
  for (size_t s = 0; s < steps.size(); ++s) {
    steps[s].resize(r.plan.dp);
    for (int rank = 0; rank < r.plan.dp; ++rank)
      for (int i = 0; i < r.plan.micro_batches; ++i) {
        const uint32_t p = r.plan.pack(s, rank, i);
        std::vector<int32_t> tiles, tokens;
        for (const uint32_t* id = packs.begin(p); id != packs.end(p); ++id) {
          tiles.push_back(table.load[*id].tiles());
          tokens.push_back(table.load[*id].tokens());
        }
        steps[s][rank].push_back(padded ? MicroBatchLoad::padded_to_longest(tiles, tokens)
                                        : MicroBatchLoad::packed(tiles, tokens));
      }
  }
  return steps;
}

/// The heaviest micro-batch a plan contains, for memory planning: its most tiles and most
/// computed tokens (as one padded row of that many tokens, so activations are not undercounted).
MicroBatchLoad worst_load(const std::vector<StepLoads>& steps) {
  int64_t tiles = 0, tokens = 0;
  for (const auto& step : steps)
    for (const auto& rank : step)
      for (const auto& mb : rank) {
        tiles = std::max(tiles, mb.tiles());
        tokens = std::max(tokens, mb.computed_tokens());
      }
  return MicroBatchLoad::packed({static_cast<int32_t>(tiles)}, {static_cast<int32_t>(tokens)});
}

/// The mean micro-batch of a plan (the balanced profiling load of BMP, docs/paper.md).
MicroBatchLoad mean_load(const std::vector<StepLoads>& steps) {
  double tiles = 0, n = 0, samples = 0;
  double tokens = 0;
  for (const auto& step : steps)
    for (const auto& rank : step)
      for (const auto& mb : rank) {
        tiles += mb.tiles();
        tokens += mb.computed_tokens();
        samples += mb.samples();
        ++n;
      }
  const int k = std::max(1, static_cast<int>(samples / n + 0.5));
  const auto per_tiles = static_cast<int32_t>(tiles / n / k + 0.5);
  const auto per_tokens = static_cast<int32_t>(tokens / n / k + 0.5);
  return MicroBatchLoad::packed(std::vector<int32_t>(k, per_tiles),
                                std::vector<int32_t>(k, per_tokens));
}

/// Shared context of all rows.
struct Context {
  AblationOptions o;
  partition::AnalyticCostModel analytic;  ///< the device (links, memory) and, by default, costs
  memory::MemoryOptions memory;
  double budget = 0;
  int64_t epoch_samples = 0;
  std::optional<partition::ScaledTableCostModel> measured;  ///< --cost-table-in
  bool overlap = false;  ///< DP collectives overlapped with compute (comm.overlap)

  const partition::CostModel& model() const {
    return measured ? static_cast<const partition::CostModel&>(*measured) : analytic;
  }
};

/// Loads --cost-table-in: a measured table of the same preset replaces the analytic costs (the
/// device still gives link bandwidths and memory). Its bytes per parameter (fp32 when profiled
/// on the CPU) follow from the preset's parameter counts, so the memory model counts weights,
/// gradients and optimizer state per parameter correctly. The table must be per rank of --tp;
/// its TP all-reduce volumes follow from the preset in the dtype it was measured in.
void use_measured_table(Context& c) {
  auto table = partition::read_unit_cost_table(c.o.cost_table_in);
  OMNIBAL_CHECK(table.tp == c.o.tp, c.o.cost_table_in, ": a table per rank of tp ", table.tp,
                ", but --tp is ", c.o.tp, " (profile at the tp you plan for)");
  const auto analytic = c.analytic.costs(partition::MicroBatchLoad::packed({1}, {1}));
  OMNIBAL_CHECK(table.units.size() == analytic.units.size(), c.o.cost_table_in, ": ",
                table.units.size(), " units, but preset '", c.o.model, "' has ",
                analytic.units.size());
  const auto bytes = [](const partition::UnitCostTable& t) {
    return std::accumulate(t.units.begin(), t.units.end(), 0.0,
                           [](double s, const partition::UnitCost& u) {
                             return s + u.parameter_bytes;
                           });
  };
  // The table's bytes per parameter tell the dtype it was measured in (the analytic model's
  // are bf16, 2 per parameter per TP rank); account as the trainer does in that precision.
  const double per = 2.0 * bytes(table) / bytes(analytic);
  const double workspace = c.memory.workspace_bytes;
  c.memory = memory::trainer_memory_options(per > 3.0 ? Precision::kFp32 : Precision::kBf16,
                                            c.memory.shard, c.o.dp, c.o.tp);
  c.memory.weight_bytes_per_param = per;
  c.memory.workspace_bytes = workspace;
  partition::set_tp_all_reduces(table, c.analytic.preset(), per > 3.0 ? 4.0 : 2.0);
  c.measured.emplace(std::move(table));
}

/// A concrete schedule and its chunks per rank.
struct Schedule {
  PipelineSchedule kind = PipelineSchedule::k1F1B;
  int v = 1;
  std::string name() const {
    return choice_name(kind) + (v > 1 ? fmt::format(" v={}", v) : std::string());
  }
};

memory::RecomputePlan recompute_plan(const Context& c, const Partition& p,
                                     const MicroBatchLoad& worst, bool adaptive,
                                     const Schedule& sched) {
  memory::RecomputeOptions ro;
  ro.memory = c.memory;
  ro.micro_batches = c.o.micro_batches;
  ro.budget_bytes = c.budget;
  ro.schedule = sched.kind;
  ro.virtual_stages = sched.v;
  const auto table = c.model().costs(worst);
  return adaptive ? memory::plan_adaptive_recompute(table, p, ro)
                  : memory::plan_full_recompute(table, p, ro);
}

/// True when `row_name` is what `wanted` names (the exact name, or without its leading "+ ").
bool row_matches(const std::string& row_name, const std::string& wanted) {
  if (wanted.empty()) return false;
  return row_name == wanted || (row_name.rfind("+ ", 0) == 0 && row_name.substr(2) == wanted);
}

AblationRow simulate_row(const Context& c, const std::string& name, const std::string& data,
                         const std::string& split, const Partition& p,
                         const std::vector<StepLoads>& steps, bool adaptive,
                         const Schedule& sched = {}) {
  const auto plan = recompute_plan(c, p, worst_load(steps), adaptive, sched);
  partition::SimulatorSetup s;
  s.model = &c.model();
  s.partition = p;
  s.schedule = sched.kind;
  s.virtual_stages = sched.v;
  s.recompute = plan.recompute;
  s.dp = c.o.dp;
  s.tp = c.o.tp;
  s.device = c.analytic.device();
  s.shard = c.memory.shard;
  s.overlap = c.overlap;
  for (const auto& m : plan.memory) s.static_bytes.push_back(m.static_bytes());
  const auto run = partition::simulate_run(s, steps);
  AblationRow row;
  if (!name.empty() && row_matches(name, c.o.trace_row)) {
    OMNIBAL_CHECK(c.o.trace_step >= 0 && static_cast<size_t>(c.o.trace_step) < steps.size(),
                  "partition: --trace-step ", c.o.trace_step, " is outside the ", steps.size(),
                  " full steps of row '", name, "'");
    row.trace.emplace();
    partition::simulate_step(s, steps[static_cast<size_t>(c.o.trace_step)], &*row.trace);
  }
  row.name = name;
  row.data = data;
  row.split = split;
  row.recompute = adaptive ? "adaptive" : "full";
  row.schedule = sched.kind;
  row.virtual_stages = sched.v;
  row.partition = p;
  row.recomputed_units = plan.recomputed_units;
  const double scale = static_cast<double>(c.epoch_samples) / run.samples;
  row.epoch_seconds = run.seconds * scale;
  row.components = run.breakdown.scaled(scale);
  row.bubble_fraction = run.bubble_fraction;
  row.peak_memory_gb = run.peak_memory_bytes / 1e9;
  row.fits = run.peak_memory_bytes <= c.budget;
  row.steps = run.steps;
  row.samples = run.samples;
  row.stage_busy_s = run.stage_busy_s;
  row.stage_idle_s = run.stage_idle_s;
  return row;
}

/// The planner options of the ablation: stage times from the mean ISF pack's table, memory
/// from the heaviest micro-batch's, the device's link bandwidth, the budget and ZeRO-1 setting.
memory::StagePlannerOptions planner_options(const Context& c, const std::vector<StepLoads>& steps,
                                            const Schedule& sched = {}) {
  memory::StagePlannerOptions o;
  o.stages = c.o.pp;
  o.schedule = sched.kind;
  o.virtual_stages = sched.v;
  o.micro_batches = c.o.micro_batches;
  o.radius = c.o.radius;
  o.top_k = c.o.top_k;
  o.link_bandwidth = partition::pipeline_link_bandwidth(c.analytic.device(), c.o.dp, c.o.tp);
  o.tp_link = partition::tp_link(c.analytic.device(), c.o.tp);
  o.memory = c.memory;
  o.budget_bytes = c.budget;
  o.memory_table = c.model().costs(worst_load(steps));
  for (const auto& u : o.memory_table->units) o.unit_names.push_back(u.name);
  return o;
}

/// The ablation's candidate judge: simulates each candidate on the first 8 steps of the ISF
/// plan (with its own recompute plan: full, or adaptive for the memory-aware search) and picks
/// the fastest; the simulator stands in for the trainer's timed trials. `seconds` keeps the
/// simulated seconds of the last round judged (also reported under --judge-by-pipeline-time,
/// where the pick is candidate 0).
memory::CandidateJudge simulator_judge(const Context& c, const std::vector<StepLoads>& steps,
                                       bool adaptive, std::vector<double>& seconds) {
  return [&c, &steps, adaptive, &seconds](std::vector<memory::PlanCandidate>& candidates) {
    const std::vector<StepLoads> probe(steps.begin(),
                                       steps.begin() + std::min<size_t>(steps.size(), 8));
    size_t best = 0;
    seconds.clear();
    for (size_t i = 0; i < candidates.size(); ++i) {
      const Schedule sched{candidates[i].schedule, candidates[i].virtual_stages};
      const auto row = simulate_row(c, "", "", "", candidates[i].partition, probe, adaptive, sched);
      seconds.push_back(row.epoch_seconds);
      if (seconds[i] < seconds[best]) best = i;
    }
    return c.o.judge_by_simulation ? static_cast<int>(best)
                                   : memory::judge_by_pipeline_time(candidates);
  };
}

/// BMP for one recompute mode through the one search loop (memory::plan_stages): under full
/// recomputation one round; under adaptive the memory-aware search (see stage_plan.h).
memory::StagePlan balanced_plan(const Context& c, const std::vector<StepLoads>& steps,
                                bool adaptive, partition::PartitionSearchResult& search,
                                std::vector<double>& seconds, const Schedule& sched = {}) {
  PartitionSpec balanced;
  balanced.method = PartitionMethod::kBalanced;
  RecomputeSpec recompute;
  recompute.mode = adaptive ? RecomputeMode::kAdaptive : RecomputeMode::kFull;
  return memory::plan_stages(c.model().costs(mean_load(steps)), balanced, recompute,
                             planner_options(c, steps, sched),
                             simulator_judge(c, steps, adaptive, seconds), &search);
}

/// The schedules of the extra rows (AblationOptions::schedules; 1F1B has the paper's rows), each
/// once in the order named. Throws omnibal::Error on a name that is not a schedule (or auto),
/// and on --virtual-stages other than the default without an interleaved row to apply to.
std::vector<Schedule> extra_schedules(const AblationOptions& o) {
  std::vector<Schedule> out;
  const auto add = [&out](Schedule s) {
    for (const Schedule& have : out)
      if (have.kind == s.kind && have.v == s.v) return;
    out.push_back(s);
  };
  bool interleaved = false;
  for (const auto& name : o.schedules) {
    // `all` stands for every schedule; a named one is any but auto (the trainer's choice).
    const bool all = name == "all";
    const auto named = find_choice<PipelineSchedule>(name);
    OMNIBAL_CHECK(all || (named && *named != PipelineSchedule::kAuto),
                  "--schedule: expected 1f1b | interleaved | zb-h1 | zb-v | all (or a list), got '",
                  name, "'",
                  name == "auto"
                      ? " ('auto' is the trainer's choice; 'all' plans and ranks every schedule)"
                      : "");
    const PipelineSchedule kind = all ? PipelineSchedule::kAuto : *named;
    if (all || kind == PipelineSchedule::kInterleaved) {
      interleaved = true;
      for (int v : o.virtual_stages) {
        OMNIBAL_CHECK(v >= 2, "--virtual-stages: interleaved needs v >= 2, got ", v);
        add({PipelineSchedule::kInterleaved, v});
      }
    }
    if (all || kind == PipelineSchedule::kZbH1) add({PipelineSchedule::kZbH1, 1});
    if (all || kind == PipelineSchedule::kZbV) add({PipelineSchedule::kZbV, 2});
  }
  OMNIBAL_CHECK(interleaved || o.virtual_stages == std::vector<int>{2},
                "--virtual-stages applies to interleaved rows only, and --schedule names none "
                "(1f1b and zb-h1 run 1 chunk per rank, zb-v 2); add interleaved or all");
  return out;
}

/// Appends a search's top K, under its schedule, to the ranking.
void rank_candidates(const memory::StagePlan& plan, const std::vector<double>& seconds,
                     std::vector<ScheduleCandidate>& ranking) {
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const auto& cand = plan.candidates[i];
    ranking.push_back({cand.schedule, cand.virtual_stages, cand.partition, cand.pipeline_s,
                       i < seconds.size() ? seconds[i] : 0.0, static_cast<int>(i) == plan.chosen});
  }
}

void check_options(const AblationOptions& o) {
  OMNIBAL_CHECK(o.dp >= 1 && o.pp >= 1 && o.tp >= 1 && o.micro_batches >= 1,
                "partition: --dp, --pp, --tp and --micro-batches must be >= 1");
  OMNIBAL_CHECK(!o.lengths.empty(), "partition: give at least one --lengths file");
  OMNIBAL_CHECK(o.global_batch % (static_cast<int64_t>(o.dp) * o.micro_batches) == 0,
                "partition: --global-batch ", o.global_batch,
                " is not a multiple of dp * m = ", o.dp * o.micro_batches,
                " (the baseline's micro-batch size would not be whole)");
}

/// The rows' shared context for checked options: the analytic model of the preset on the
/// device, the trainer's memory accounting under `shard` (or the measured table's,
/// --cost-table-in) and the budget; epoch_samples is left to the caller.
Context make_context(const AblationOptions& o, ShardMode shard) {
  check_options(o);
  Context c{o,
            partition::AnalyticCostModel(load_model_preset(o.model),
                                         partition::device_spec(o.device), o.tp, o.freeze_vit, {},
                                         o.tp_vit_dummy_heads
                                             ? partition::VitHeadPadding::kDummyHeads
                                             : partition::VitHeadPadding::kRefuse),
            {},
            0,
            0,
            std::nullopt};
  // The trainer's accounting of a bf16 run (train/distributed_optimizer.h): bf16 weights,
  // fp32 main gradient plus the bf16 gradient of a backward, fp32 master weights and moments.
  c.memory = memory::trainer_memory_options(Precision::kBf16, shard, o.dp, o.tp);
  if (!o.cost_table_in.empty()) use_measured_table(c);
  c.budget = o.budget_gb > 0 ? o.budget_gb * double(1ull << 30)
                             : memory::default_budget_bytes(c.analytic.device().memory_bytes);
  return c;
}

/// The simulator loads of the two data plans every row of a recipe uses.
struct DataPlans {
  std::vector<StepLoads> random;  ///< the baseline: padded packs of samples_per_pack samples
  std::vector<StepLoads> isf;     ///< ISF packs
};

/// Plans the epoch of `table` at o.dp x o.micro_batches with the `baseline` method (random or
/// length-grouped micro-batches of `samples_per_pack`) and with ISF (its budgets written to
/// `isf_budgets`); throws when the samples do not make one full step.
DataPlans plan_data(const AblationOptions& o, const balance::SampleTable& table,
                    balance::Method baseline, int samples_per_pack, std::string& isf_budgets) {
  balance::PlannerOptions po;
  po.dp = o.dp;
  po.micro_batches = o.micro_batches;
  po.samples_per_pack = samples_per_pack;
  po.iterations = o.iterations;
  po.seed = o.seed;
  const auto random = balance::plan_method(table, baseline, po);
  const auto isf = balance::plan_method(table, balance::Method::kIsf, po);
  isf_budgets = fmt::format("Q_v={} Q_t={} Q't={}", isf.budgets.q_vit, isf.budgets.q_tok,
                            isf.budgets.q_tok_thresh);
  DataPlans plans{step_loads(table, random), step_loads(table, isf)};
  OMNIBAL_CHECK(!plans.random.empty() && !plans.isf.empty(), "partition: the length files hold ",
                table.size(), " samples, fewer than one step of dp * m micro-batches");
  return plans;
}

/// The paper's rows (baseline, + ISF, + balanced partition, + adaptive recompute) and the three
/// controls (uniform split, greedy profile split, adaptive on the row-3 split), under 1F1B;
/// also fills res's profile table, planner options and the two BMP searches.
void add_paper_rows(const Context& c, const DataPlans& data, AblationResult& res) {
  const auto& isf_steps = data.isf;
  res.profile_table = c.model().costs(mean_load(isf_steps));
  res.planner_options = planner_options(c, isf_steps);
  std::vector<double> params;
  for (const auto& u : res.profile_table.units) params.push_back(u.parameter_bytes);
  PartitionSpec fixed;
  fixed.method = PartitionMethod::kParameters;
  const Partition by_params = memory::fixed_split(fixed, params, c.o.pp);
  fixed.method = PartitionMethod::kUniform;
  const Partition uniform = memory::fixed_split(fixed, params, c.o.pp);
  res.balanced_plan = balanced_plan(c, isf_steps, false, res.search, res.candidate_seconds);
  res.adaptive_plan =
      balanced_plan(c, isf_steps, true, res.adaptive_search, res.adaptive_candidate_seconds);
  const Partition bmp = res.balanced_plan.partition;
  const Partition bmp_adaptive = res.adaptive_plan.partition;

  auto& rows = res.rows;
  rows.push_back(
      simulate_row(c, "baseline", "random", "parameters", by_params, data.random, false));
  rows.push_back(simulate_row(c, "+ ISF", "isf", "parameters", by_params, isf_steps, false));
  rows.push_back(simulate_row(c, "+ balanced partition", "isf", "balanced", bmp, isf_steps, false));
  rows.push_back(simulate_row(c, "+ adaptive recompute", "isf", "balanced (memory-aware)",
                              bmp_adaptive, isf_steps, true));
  rows.push_back(
      simulate_row(c, "ISF + uniform split", "isf", "uniform", uniform, isf_steps, false));
  rows.push_back(simulate_row(c, "ISF + greedy profile split", "isf", "greedy-profile",
                              res.search.greedy_anchor, isf_steps, false));
  rows.push_back(
      simulate_row(c, "adaptive on the row-3 split", "isf", "balanced", bmp, isf_steps, true));
}

/// Schedules beyond 1F1B (--schedule): the full OmniBal row under each, and every search's
/// candidates ranked by simulated time (with the 1F1B adaptive search's). A schedule that
/// cannot be planned is listed in res.schedule_errors instead of a row.
void add_schedule_rows(const Context& c, const std::vector<StepLoads>& isf_steps,
                       AblationResult& res) {
  const auto extra = extra_schedules(c.o);
  if (!extra.empty())
    rank_candidates(res.adaptive_plan, res.adaptive_candidate_seconds, res.ranking);
  for (const Schedule& sched : extra) {
    partition::PartitionSearchResult search;
    std::vector<double> seconds;
    try {
      res.schedule_plans.push_back(balanced_plan(c, isf_steps, true, search, seconds, sched));
    } catch (const Error& e) {  // e.g. ZB-H1's deferred W bytes over the budget on every split
      res.schedule_errors.push_back("+ " + sched.name() + ": " + e.what());
      continue;
    }
    const auto& plan = res.schedule_plans.back();
    rank_candidates(plan, seconds, res.ranking);
    res.rows.push_back(simulate_row(c, "+ " + sched.name(), "isf", "balanced (memory-aware)",
                                    plan.partition, isf_steps, true, sched));
  }
  std::stable_sort(res.ranking.begin(), res.ranking.end(),
                   [](const ScheduleCandidate& a, const ScheduleCandidate& b) {
                     return a.simulated_8_steps_s < b.simulated_8_steps_s;
                   });
}

/// --overlap: the baseline and the full OmniBal row (rows 0 and 3) again with the DP
/// collectives overlapped, on the same splits and recompute plans.
void add_overlap_rows(const Context& c, const DataPlans& data, AblationResult& res) {
  Context overlapped = c;
  overlapped.overlap = true;
  const AblationRow& base = res.rows.at(0);
  const AblationRow& full = res.rows.at(3);
  AblationRow b = simulate_row(overlapped, "baseline, DP overlap", base.data, base.split,
                               base.partition, data.random, false);
  AblationRow a = simulate_row(overlapped, "+ adaptive recompute, DP overlap", full.data,
                               full.split, full.partition, data.isf, true);
  res.rows.push_back(std::move(b));
  res.rows.push_back(std::move(a));
}

/// --zero3: the ZeRO-3 recipe's rows (file comment) on `table`, DP only on o.zero3_dp GPUs (or
/// dp x pp x tp), m = 1, shard full.
void add_zero3_rows(const AblationOptions& o, const balance::SampleTable& table,
                    AblationResult& res) {
  AblationOptions z = o;
  z.dp = o.zero3_dp > 0 ? o.zero3_dp : o.dp * o.pp * o.tp;
  z.pp = 1;
  z.tp = 1;
  z.micro_batches = 1;
  Context c = make_context(z, ShardMode::kFull);
  c.epoch_samples = static_cast<int64_t>(table.size());
  c.overlap = true;  // DeepSpeed's overlap_comm, FSDP's prefetch
  res.zero3_dp = z.dp;
  res.zero3_samples_per_pack = static_cast<int>(z.global_batch / z.dp);
  const DataPlans data = plan_data(z, table, balance::Method::kLengthGroup,
                                   res.zero3_samples_per_pack, res.zero3_isf_budgets);
  const Partition whole{{static_cast<int>(c.model().costs(data.isf[0][0][0]).units.size())}};
  auto& rows = res.zero3_rows;
  rows.push_back(
      simulate_row(c, "ZeRO-3 baseline", "length-group", "dp only", whole, data.random, false));
  rows.push_back(simulate_row(c, "ZeRO-3 + ISF", "isf", "dp only", whole, data.isf, false));
  rows.push_back(
      simulate_row(c, "ZeRO-3 + adaptive recompute", "isf", "dp only", whole, data.isf, true));
  c.overlap = false;
  rows.push_back(simulate_row(c, "ZeRO-3 baseline, no overlap", "length-group", "dp only", whole,
                              data.random, false));
  rows.push_back(simulate_row(c, "ZeRO-3 + adaptive recompute, no overlap", "isf", "dp only", whole,
                              data.isf, true));
}

/// Speed-ups and deltas of `rows` against rows[0].
void compare_to_first(std::vector<AblationRow>& rows) {
  for (auto& r : rows) {
    r.speedup = rows[0].epoch_seconds / r.epoch_seconds;
    r.delta = r.components;
    r.delta += rows[0].components.scaled(-1.0);
  }
}

}  // namespace

AblationResult run_partition_ablation(const AblationOptions& o) {
  Context c = make_context(o, o.zero1 ? ShardMode::kOptimizer : ShardMode::kNone);
  const auto table = balance::read_length_files(o.lengths);
  c.epoch_samples = static_cast<int64_t>(table.size());
  AblationResult res;
  res.budget_bytes = c.budget;
  res.epoch_samples = c.epoch_samples;
  res.samples_per_pack = static_cast<int>(o.global_batch / (o.dp * o.micro_batches));
  const DataPlans data =
      plan_data(o, table, balance::Method::kRandom, res.samples_per_pack, res.isf_budgets);
  add_paper_rows(c, data, res);
  add_schedule_rows(c, data.isf, res);
  if (o.overlap_rows) add_overlap_rows(c, data, res);
  if (o.zero3) add_zero3_rows(o, table, res);
  compare_to_first(res.rows);
  if (!res.zero3_rows.empty()) compare_to_first(res.zero3_rows);
  return res;
}

namespace {

/// The options and the figures every row shares (the JSON's "config").
nlohmann::json config_json(const AblationResult& res, const AblationOptions& o) {
  return {{"model", o.model},
          {"lengths", o.lengths},
          {"dp", o.dp},
          {"pp", o.pp},
          {"tp", o.tp},
          {"tp_vit_dummy_heads", o.tp_vit_dummy_heads},
          {"micro_batches", o.micro_batches},
          {"device", o.device},
          {"global_batch", o.global_batch},
          {"zero1", o.zero1},
          {"budget_gb", res.budget_bytes / 1e9},
          {"epoch_samples", res.epoch_samples},
          {"samples_per_pack", res.samples_per_pack},
          {"isf_budgets", res.isf_budgets},
          {"cost_table_in", o.cost_table_in},
          {"schedules", o.schedules},
          {"virtual_stages", o.virtual_stages},
          {"overlap_rows", o.overlap_rows},
          {"zero3", o.zero3},
          {"zero3_dp", res.zero3_dp},
          {"zero3_samples_per_pack", res.zero3_samples_per_pack},
          {"zero3_isf_budgets", res.zero3_isf_budgets}};
}

/// A time breakdown in seconds: useful_s and comm_s apart (`with_useful`) or summed as other_s.
nlohmann::json breakdown_json(const partition::TimeBreakdown& b, bool with_useful) {
  nlohmann::json x = {{"padding_s", b.padding_s},
                      {"dp_wait_s", b.dp_wait_s},
                      {"bubble_s", b.bubble_s},
                      {"recompute_s", b.recompute_s},
                      {"tp_comm_s", b.tp_comm_s}};
  if (with_useful) {
    x["useful_s"] = b.useful_s;
    x["comm_s"] = b.comm_s;
  } else {
    x["other_s"] = b.useful_s + b.comm_s;
  }
  return x;
}

/// One row; `gpus` (dp x pp x tp) turns its epoch into GPU-days.
nlohmann::json row_json(const AblationRow& r, int gpus) {
  return {{"name", r.name},
          {"data", r.data},
          {"split", r.split},
          {"recompute", r.recompute},
          {"schedule", choice_name(r.schedule)},
          {"virtual_stages", r.virtual_stages},
          {"partition", r.partition.sizes},
          {"recomputed_blocks", r.recomputed_units},
          {"epoch_seconds", r.epoch_seconds},
          {"speedup", r.speedup},
          {"gpu_days", r.epoch_seconds * gpus / 86400.0},
          {"bubble_fraction", r.bubble_fraction},
          {"peak_memory_gb", r.peak_memory_gb},
          {"fits", r.fits},
          {"steps", r.steps},
          {"samples", r.samples},
          {"breakdown", breakdown_json(r.delta, false)},
          {"components", breakdown_json(r.components, true)},
          {"stage_busy_s", r.stage_busy_s},
          {"stage_idle_s", r.stage_idle_s}};
}

/// A BMP search: its anchors, candidate counts and top K, each with its simulated seconds
/// (`seconds`, one per top entry).
nlohmann::json search_json(const partition::PartitionSearchResult& r,
                           const std::vector<double>& seconds) {
  nlohmann::json s = {{"exact_anchor", r.exact_anchor.sizes},
                      {"greedy_anchor", r.greedy_anchor.sizes},
                      {"refined_anchor", r.refined_anchor.sizes},
                      {"generated", r.generated},
                      {"non_empty", r.non_empty},
                      {"fitting", r.fitting}};
  for (size_t i = 0; i < r.top.size(); ++i) {
    const auto& t = r.top[i];
    s["top"].push_back({{"partition", t.partition.sizes},
                        {"pipeline_s", t.pipeline_s},
                        {"score", t.score},
                        {"stage_std_s", t.stage_std_s},
                        {"max_stage_s", t.max_stage_s},
                        {"comm_bytes", t.comm_bytes},
                        {"simulated_8_steps_s", seconds.at(i)}});
  }
  return s;
}

/// `rows` as the table's lines, under a header; names padded to the longest (at least 28).
std::string format_rows(const std::vector<AblationRow>& rows) {
  size_t width = 28;
  for (const auto& r : rows) width = std::max(width, r.name.size());
  std::string out =
      fmt::format("{:<{}} {:>9} {:>8} {:>7} {:>8}  {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}  {}\n",
                  "row", width, "epoch_s", "speedup", "bubble", "peak_GB", "d_pad_s", "d_dpwait",
                  "d_bubble", "d_recomp", "d_other", "tp_comm",
                  "split / recomputed blocks per stage");
  for (const auto& r : rows) {
    std::string rc;
    for (size_t s = 0; s < r.recomputed_units.size(); ++s)
      rc += (s ? "," : "") + std::to_string(r.recomputed_units[s]);
    const double other = r.delta.useful_s + r.delta.comm_s;
    out += fmt::format(
        "{:<{}} {:>9.1f} {:>7.2f}x {:>7.3f} {:>8.1f}  {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>8.1f} "
        "{:>8.1f}  {} {} / [{}]{}\n",
        r.name, width, r.epoch_seconds, r.speedup, r.bubble_fraction, r.peak_memory_gb,
        r.delta.padding_s, r.delta.dp_wait_s, r.delta.bubble_s, r.delta.recompute_s, other,
        r.components.tp_comm_s, r.split, r.partition.to_string(), rc,
        r.fits ? "" : "  OVER BUDGET");
  }
  return out;
}

/// The row of `rows` named `name`, or null.
const AblationRow* find_row(const std::vector<AblationRow>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

/// What overlapping the DP collectives is worth in the 3D rows (--overlap), one line.
std::string format_overlap_worth(const AblationResult& res) {
  const AblationRow* base = find_row(res.rows, "baseline");
  const AblationRow* base_o = find_row(res.rows, "baseline, DP overlap");
  const AblationRow* full = find_row(res.rows, "+ adaptive recompute");
  const AblationRow* full_o = find_row(res.rows, "+ adaptive recompute, DP overlap");
  if (!base || !base_o || !full || !full_o) return "";
  auto change = [](const AblationRow& a, const AblationRow& b) {
    return fmt::format("{:.1f} -> {:.1f} s ({:+.1f} %)", a.epoch_seconds, b.epoch_seconds,
                       100.0 * (b.epoch_seconds / a.epoch_seconds - 1.0));
  };
  return fmt::format(
      "DP communication overlapped with compute (3D rows): baseline {}, "
      "+ adaptive recompute {}\n",
      change(*base, *base_o), change(*full, *full_o));
}

/// The ZeRO-3 recipe's table and its comparisons with the paper's figures.
std::string format_zero3(const AblationResult& res) {
  const auto& z = res.zero3_rows;
  std::string out = fmt::format(
      "ZeRO-3 recipe: DP {} x PP 1 x TP 1, m 1, {} samples per baseline micro-batch "
      "(length-grouped), ISF {}, shard full, DP collectives overlapped unless marked; speed-ups "
      "against the ZeRO-3 baseline:\n",
      res.zero3_dp, res.zero3_samples_per_pack, res.zero3_isf_budgets);
  out += format_rows(z);
  const AblationRow* isf = find_row(z, "ZeRO-3 + adaptive recompute");
  const double days = res.zero3_dp / 86400.0;
  if (isf)
    out += fmt::format(
        "ZeRO-3 + ISF + adaptive recompute vs ZeRO-3 baseline: {:.2f}x ({:.2f} -> {:.2f} GPU "
        "days for these {} samples; paper, 1.2M samples: 38.9 -> 25.3 GPU days, 1.54x)\n",
        isf->speedup, z[0].epoch_seconds * days, isf->epoch_seconds * days, res.epoch_samples);
  if (!res.rows.empty())
    out += fmt::format(
        "ZeRO-3 baseline vs the 3D baseline above: {:.2f}x (paper: 61.8 / 38.9 = 1.59x)\n",
        res.rows[0].epoch_seconds / z[0].epoch_seconds);
  return out;
}

}  // namespace

std::string format_ablation_table(const AblationResult& res) {
  std::string out = format_rows(res.rows);
  for (const auto& e : res.schedule_errors) out += "not planned: " + e + "\n";
  if (!res.ranking.empty()) {
    out +=
        "(schedule, split) pairs ranked by the simulated epoch (8 ISF steps, scaled; picked: the "
        "split of its schedule's row above):\n";
    for (size_t i = 0; i < res.ranking.size(); ++i) {
      const auto& rc = res.ranking[i];
      out += fmt::format("{:>3}. {:<16} {:>9.1f} s  pipeline_s {:.3f}  {}{}\n", i + 1,
                         choice_name(rc.schedule) +
                             (rc.virtual_stages > 1 ? fmt::format(" v={}", rc.virtual_stages) : ""),
                         rc.simulated_8_steps_s, rc.pipeline_s, rc.partition.to_string(),
                         rc.chosen ? "  (picked)" : "");
    }
  }
  out += format_overlap_worth(res);
  if (!res.zero3_rows.empty()) out += format_zero3(res);
  return out;
}

std::string ablation_json(const AblationResult& res, const AblationOptions& o) {
  nlohmann::json j;
  j["config"] = config_json(res, o);
  const int gpus = o.dp * o.pp * o.tp;
  for (const auto& r : res.rows) j["rows"].push_back(row_json(r, gpus));
  for (const auto& r : res.zero3_rows) j["zero3_rows"].push_back(row_json(r, res.zero3_dp));
  for (const auto& rc : res.ranking)
    j["ranking"].push_back({{"schedule", choice_name(rc.schedule)},
                            {"virtual_stages", rc.virtual_stages},
                            {"partition", rc.partition.sizes},
                            {"pipeline_s", rc.pipeline_s},
                            {"simulated_8_steps_s", rc.simulated_8_steps_s},
                            {"chosen", rc.chosen}});
  j["schedule_errors"] = res.schedule_errors;
  j["search"] = search_json(res.search, res.candidate_seconds);
  j["adaptive_search"] = search_json(res.adaptive_search, res.adaptive_candidate_seconds);
  return j.dump(2);
}

}  // namespace omnibal::plan
