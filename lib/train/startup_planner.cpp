#include "train/startup_planner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>

#include "balance/sample_table.h"
#include "core/error.h"
#include "core/log.h"
#include "comm/stop_signal.h"
#include "memory/memory_model.h"
#include "memory/plan_file.h"
#include "memory/plan_sources.h"
#include "models/vlm.h"
#include "partition/cost_model.h"
#include "partition/pick_margin.h"
#include "profile/memory_meter.h"
#include "profile/profiling_pack.h"
#include "profile/unit_profiler.h"
#include "schedule/schedules.h"
#include "train/distributed_optimizer.h"
#include "train/partition_trials.h"
#include "train/run_log.h"
#include "train/startup_stop.h"
#include "train/tp_group.h"
#include "train/training_data.h"

namespace omnibal::train {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
/// Epoch-0 packs timed per rank for the host cost per micro-batch (after one untimed).
constexpr int kHostCostPacks = 5;
/// Largest pick margin taken from a profile's spread (partition/pick_margin.h): a profile
/// that noisy cannot rank splits at all, and a preferred split more than 10 % slower than the
/// fastest predicted should not be kept on its account.
constexpr double kMaxPickMargin = 0.10;
/// Phases named by StartupStopped.
constexpr const char* kProfilePhase = "start-up profiling";

/// Rank 0's `text` on every rank (length, then bytes).
std::string broadcast_text(comm::Communicator& world, const std::string& text, bool root) {
  torch::Tensor n = torch::full({1}, root ? static_cast<int64_t>(text.size()) : 0, torch::kInt64);
  world.broadcast(n, 0, "cost table size");
  torch::Tensor bytes = torch::zeros({n.item<int64_t>()}, torch::kUInt8);
  if (root) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  world.broadcast(bytes, 0, "cost table");
  return std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel());
}

/// The synthetic pack of `load` (profile/profiling_pack.h); tokens are raised to the image
/// tokens of the tiles plus 4 text tokens per sample when the largest pack had fewer (at most
/// llm.max_seq_len).
profile::ProfilingPackOptions pack_options(const StartupPlanContext& c,
                                           const partition::TableLoad& load) {
  const int samples = static_cast<int>(load.samples);
  const int64_t least = load.tiles * c.preset->tokens_per_tile() + 4 * samples;
  const int64_t tokens = std::min<int64_t>(std::max(load.tokens, least), c.preset->llm.max_seq_len);
  return {load.tiles, tokens, samples, c.config->train.seed, c.img_context_id};
}

/// Rank 0's `value` on every rank.
double broadcast_value(comm::Communicator& world, double value, const char* what) {
  torch::Tensor t = torch::full({1}, value, torch::kFloat64);
  world.broadcast(t, 0, what);
  return t.item<double>();
}

/// The repeat spread of a profile over every unit's forward and backward times
/// (partition::timing_spread).
double profile_spread(const profile::ProfileResult& r) {
  std::vector<double> median, low, high;
  for (size_t u = 0; u < r.table.units.size(); ++u) {
    median.insert(median.end(), {r.table.units[u].forward_s, r.table.units[u].backward_s});
    low.insert(low.end(), {r.forward_min_s[u], r.backward_min_s[u]});
    high.insert(high.end(), {r.forward_max_s[u], r.backward_max_s[u]});
  }
  return partition::timing_spread(median, low, high);
}

/// The cost table every rank plans with, and the spread of its timings.
struct ObtainedTable {
  partition::UnitCostTable table;
  double spread = 0;  ///< the start-up profile's repeat spread; 0 for parallel.cost_table
};

/// Rank 0 reads or profiles the table; every rank parses rank 0's text. A failure on rank 0
/// reaches every rank as the same error (sent instead of the table), a stop signal during the
/// profile as StartupStopped.
ObtainedTable obtain_cost_table(const StartupPlanContext& c, const partition::TableLoad& load) {
  const Config& cfg = *c.config;
  auto& world = c.comms->world();
  const bool root = c.comms->rank() == 0;
  const std::string& path = cfg.parallel.cost_table;
  std::string text, origin = path.empty() ? std::string("start-up profile") : path;
  double spread = 0;
  constexpr char kFailed = '\x01', kStopped = '\x02';
  if (root) {
    try {
      if (!path.empty()) {
        text = partition::unit_cost_table_json(partition::read_unit_cost_table(path));
      } else {
        profile::ProfileOptions po;
        po.pack = pack_options(c, load);
        po.warmup = 1;
        po.repeats = 3;
        po.freeze = cfg.train.freeze;
        po.init_seed = cfg.train.seed;
        po.device = *c.device;
        po.dtype = precision_dtype(cfg.train.precision);
        po.tp = cfg.parallel.tp;
        // ZB-H1 and ZB-V (or auto, which may pick them) plan with W's measured share and bytes.
        po.split_backward = schedule::splits_backward(cfg.parallel.schedule) ||
                            cfg.parallel.schedule == PipelineSchedule::kAuto;
        // Recomputation is priced by the blocks' checkpointed times when it may be used.
        po.checkpointed = cfg.memory.recompute.mode != RecomputeMode::kNone;
        po.between_units = [] {
          if (comm::stop_requested()) throw StartupStopped(kProfilePhase);
        };
        const profile::ProfileResult result = profile::profile_units(*c.preset, po);
        text = partition::unit_cost_table_json(result.table);
        spread = profile_spread(result);
      }
    } catch (const StartupStopped&) {
      text = std::string(1, kStopped);
    } catch (const Error& e) {
      text = std::string(1, kFailed) + e.what();
    }
  }
  text = broadcast_text(world, text, root);
  if (text.size() == 1 && text[0] == kStopped) throw StartupStopped(kProfilePhase);
  spread = broadcast_value(world, spread, "profile spread");
  OMNIBAL_CHECK(text.empty() || text[0] != kFailed,
                "parallel.cost_table: ", path.empty() ? "start-up profiling" : "'" + path + "'",
                " failed on rank 0: ", text.substr(1));
  partition::UnitCostTable table = partition::parse_unit_cost_table(text, origin);
  const auto names = unit_names(*c.preset);
  OMNIBAL_CHECK(table.model == c.preset->name, "parallel.cost_table: '", origin,
                "' is a table of model '", table.model, "' but model.preset is '", c.preset->name,
                "'");
  OMNIBAL_CHECK(table.tp == cfg.parallel.tp, "parallel.cost_table: '", origin,
                "' holds the costs of one rank at tp ", table.tp, " but parallel.tp is ",
                cfg.parallel.tp, "; profile at the run's tp (omnibal-plan profile --tp ",
                cfg.parallel.tp, ")");
  OMNIBAL_CHECK(table.units.size() == names.size(), "parallel.cost_table: '", origin, "' has ",
                table.units.size(), " units, the '", c.preset->name, "' preset ", names.size());
  for (size_t u = 0; u < names.size(); ++u)
    OMNIBAL_CHECK(table.units[u].name == cost_table_name(unit_at(*c.preset, static_cast<int>(u))),
                  "parallel.cost_table: '", origin, "': unit ", u, " is '", table.units[u].name,
                  "', expected '", cost_table_name(unit_at(*c.preset, static_cast<int>(u))), "'");
  // train.freeze decides what trains in this run, whatever the table was profiled with.
  const auto trainable = profile::trainable_units(*c.preset, cfg.train.freeze);
  for (size_t u = 0; u < names.size(); ++u) table.units[u].trainable = trainable[u];
  return {partition::table_at_load(table, load), spread};
}

/// The pick margin of this run's planning (partition/pick_margin.h) from the table's spread,
/// at most kMaxPickMargin, logged on rank 0.
double pick_margin(const StartupPlanContext& c, double spread) {
  const double margin = std::min(spread, kMaxPickMargin);
  const bool picks = c.config->parallel.partition.method == PartitionMethod::kBalanced ||
                     c.config->parallel.schedule == PipelineSchedule::kAuto;
  if (c.comms->rank() != 0 || !picks) return margin;  // nothing is picked: nothing to log
  if (!c.config->parallel.cost_table.empty())
    log_info(
        "stage plan: pick margin 0 (parallel.cost_table: the same table at every launch); the "
        "fastest simulated split wins");
  else
    log_info(
        "stage plan: pick margin {:.1f} % (the start-up profile's repeat spread {:.1f} %{}: "
        "slowest minus fastest repeat over the units' total): a split (or schedule) replaces the "
        "preferred one (fewest parameter bytes on the fullest rank; 1F1B, ZB-H1, interleaved, "
        "ZB-V) "
        "only when its simulated step is faster by more than that",
        100.0 * margin, 100.0 * spread,
        spread > kMaxPickMargin ? fmt::format(", capped at {:.0f} %", 100.0 * kMaxPickMargin)
                                : std::string());
  return margin;
}

/// Planner options of this run: m, r, K, trainer memory accounting and the budget.
memory::StagePlannerOptions planner_options(const StartupPlanContext& c,
                                            const partition::UnitCostTable* table) {
  const Config& cfg = *c.config;
  memory::StagePlannerOptions o;
  o.stages = cfg.parallel.pp;
  o.micro_batches = cfg.parallel.micro_batches;
  o.schedule = cfg.parallel.schedule;
  o.virtual_stages = cfg.parallel.virtual_stages;
  o.auto_zb_v = true;  // the executor runs ZB-V: auto compares it too
  o.radius = cfg.parallel.partition_radius;
  o.top_k = cfg.parallel.partition_top_k;
  o.unit_names = unit_names(*c.preset);
  // The trainer's own accounting (train.precision, train.shard); the table gives the parameter
  // bytes in its run dtype, from which parameter counts follow.
  o.memory = memory::trainer_memory_options(cfg.train.precision, cfg.train.shard, cfg.parallel.dp,
                                            cfg.parallel.tp);
  o.memory.workspace_bytes = c.device->is_cuda() ? o.memory.workspace_bytes : 0.0;
  if (table) {
    const auto counts = models::unit_parameter_counts(*c.preset);
    double bytes = 0, params = 0;
    for (size_t u = 0; u < counts.size(); ++u) {
      bytes += table->units[u].parameter_bytes;
      params += static_cast<double>(counts[u]);
    }
    // Under TP the table holds one rank's shards, fewer than the preset's counts: take the
    // run dtype's size instead of the ratio.
    if (cfg.parallel.tp > 1)
      o.memory.weight_bytes_per_param =
          static_cast<double>(torch::elementSize(precision_dtype(cfg.train.precision)));
    else if (params > 0) o.memory.weight_bytes_per_param = bytes / params;
  }
  // The TP all-reduces enter the search on the link this run measures (each TP group times
  // its own; every rank gets the slowest figures).
  if (cfg.parallel.tp > 1)
    o.tp_link = measure_tp_link(*c.comms, *c.device, precision_dtype(cfg.train.precision));
  if (cfg.parallel.tp > 1 && c.comms->rank() == 0)
    log_info(
        "TP link (measured at start-up, slowest TP group): {:.1f} us per all-reduce, {:.2f} "
        "GB/s bus bandwidth",
        o.tp_link.latency_s * 1e6, o.tp_link.bandwidth / 1e9);
  double budget = cfg.memory.budget_gb > 0 ? cfg.memory.budget_gb * kGiB
                                           : default_memory_budget_bytes(*c.device);
  // The smallest budget of any rank, so every rank plans with the same number.
  budget = static_cast<double>(c.comms->world().all_reduce_int(static_cast<int64_t>(budget),
                                                               comm::ReduceOp::kMin, "budget"));
  o.budget_bytes = budget;
  return o;
}

/// The candidate judge of this run: the predicted pipeline time, or, with
/// parallel.partition_trials (>= 2 candidates to compare), timed trials of the first n
/// candidates of each search round. Each split is timed once per start-up (with its own
/// recompute plan, which depends on the split alone), so a candidate that reappears in a later
/// round of the memory-aware search keeps its measurement. Collective: every rank judges the
/// same candidates in the same order.
memory::CandidateJudge trial_judge(const StartupPlanContext& c,
                                   const partition::UnitCostTable& table,
                                   const partition::TableLoad& load,
                                   const memory::StagePlannerOptions& o) {
  const Config& cfg = *c.config;
  const int trials = cfg.parallel.partition_trials < 0 ? cfg.parallel.partition_top_k
                                                       : cfg.parallel.partition_trials;
  if (trials < 2) return memory::judge_by_pipeline_time;  // nothing to compare
  // The trials time one stage's 1F1B program per candidate; interleaved / ZB-H1 / auto
  // candidates are judged by their simulated step time under their own schedule.
  if (cfg.parallel.schedule != PipelineSchedule::k1F1B) {
    if (c.comms->rank() == 0)
      log_info(
          "partition trials: skipped under parallel.schedule {} (the simulated step time "
          "under that schedule picks the split)",
          choice_name(cfg.parallel.schedule));
    return memory::judge_by_pipeline_time;
  }
  auto setup = std::make_shared<TrialSetup>();
  setup->preset = *c.preset;
  setup->init_seed = cfg.train.seed;
  setup->img_context_id = c.img_context_id;
  setup->freeze = cfg.train.freeze;
  setup->micro_batches = cfg.parallel.micro_batches;
  setup->dtype = precision_dtype(cfg.train.precision);
  setup->device = *c.device;
  setup->pack = profile::make_profiling_pack(*c.preset, pack_options(c, load));
  setup->steps_per_repeat = cfg.parallel.partition_trial_steps;
  setup->repeats = cfg.parallel.partition_trial_rounds;
  // Real packs from a loader of their own (the trainer's options), so the trials pay the
  // loader's work on the rank's cores as training does.
  TrainingData* data = c.data;
  setup->loader = [data](int64_t steps) { return data->trial_loader(steps); };
  setup->recompute_for = [&cfg, table, o](const partition::Partition& p) {
    memory::StagePlan tmp;
    tmp.partition = p;
    memory::plan_recompute_for(table, cfg.memory.recompute, o, tmp);
    return tmp.recompute.per_unit;
  };
  auto timed = std::make_shared<std::map<std::vector<int>, std::vector<double>>>();
  comm::ParallelComms* comms = c.comms;
  return [setup, timed, comms, trials](std::vector<memory::PlanCandidate>& candidates) {
    const int n = std::min<int>(trials, static_cast<int>(candidates.size()));
    if (n < 2) return memory::judge_by_pipeline_time(candidates);
    std::vector<partition::Partition> fresh;
    for (int i = 0; i < n; ++i)
      if (!timed->count(candidates[i].partition.sizes)) fresh.push_back(candidates[i].partition);
    if (!fresh.empty()) {
      const TrialOutcome t = run_partition_trials(fresh, *setup, *comms);
      for (size_t i = 0; i < fresh.size(); ++i) (*timed)[fresh[i].sizes] = t.seconds[i];
    }
    std::vector<std::vector<double>> seconds;
    std::vector<partition::Partition> splits;
    for (int i = 0; i < n; ++i) {
      candidates[i].trial_s = timed->at(candidates[i].partition.sizes);
      seconds.push_back(candidates[i].trial_s);
      splits.push_back(candidates[i].partition);
    }
    TrialOutcome t = decide_trials(std::move(seconds));
    summarise_trials(splits, t);
    // The search may ask again about candidates all timed before: nothing new to report.
    if (comms->rank() == 0 && !fresh.empty())
      log_info(
          "partition trials (m {}, {} rounds of {} + {} steps per candidate, real epoch-0 packs): "
          "{}",
          setup->micro_batches, setup->repeats, setup->warmup, setup->steps_per_repeat, t.summary);
    return t.chosen;
  };
}

/// Per pipeline stage, the host seconds per micro-batch the search adds to the stage's forward:
/// on a CPU device the loader builds packs on the rank's own cores, so every pack it builds
/// (first stage: pixels, ids, labels; last stage: labels) takes that CPU time from the stage's
/// compute; on an accelerator the host work overlaps the device's and nothing is added (empty).
/// Each rank times its own packs (TrainingData::pack_build_seconds); a stage takes its slowest
/// DP / TP rank (max over the world). Collective.
std::vector<double> measure_host_costs(const StartupPlanContext& c) {
  if (!c.device->is_cpu()) return {};
  const int stages = c.config->parallel.pp;
  const double mine = c.data->pack_build_seconds(kHostCostPacks);
  torch::Tensor t = torch::zeros({stages}, torch::kFloat64);
  t[c.comms->coord().pp] = mine;
  c.comms->world().all_reduce(t, comm::ReduceOp::kMax, "host cost per micro-batch");
  std::vector<double> out(stages);
  for (int s = 0; s < stages; ++s) out[s] = t[s].item<double>();
  if (c.comms->rank() == 0) {
    std::string ms;
    for (double v : out) ms += fmt::format("{}{:.2f}", ms.empty() ? "" : ", ", 1e3 * v);
    log_info(
        "stage plan: host cost per micro-batch added to each stage's forward in the search: "
        "[{}] ms (CPU seconds of building one epoch-0 pack of the stage's parts, median of {}; "
        "the loader shares the rank's cores on the CPU)",
        ms, kHostCostPacks);
  }
  return out;
}

void check_agreement(comm::ParallelComms& comms, const memory::StagePlan& plan) {
  const bool same =
      comm::same_on_every_rank(comms.world(), memory::stage_plan_hash(plan), "stage plan");
  OMNIBAL_CHECK(same, "rank ", comms.rank(),
                ": the stage plan differs between ranks (this rank: ", plan.describe(),
                "); every rank must see the same cost table and config");
}

}  // namespace

void write_stage_plan_file(const std::string& run_dir, const memory::StagePlan& plan,
                           const nlohmann::json& cost_table) {
  write_run_file(run_dir + "/stage_plan.json", memory::stage_plan_json(plan).dump(2) + "\n",
                 "the stage plan");
  if (!cost_table.is_null())
    write_run_file(run_dir + "/cost_table.json", cost_table.dump(2) + "\n", "the cost table");
}

std::optional<StoredPlan> stored_plan(const nlohmann::json& rank_state, const std::string& dir) {
  if (!rank_state.contains("stage_plan") || rank_state.at("stage_plan").is_null())
    return std::nullopt;
  StoredPlan out{memory::parse_stage_plan(rank_state.at("stage_plan"), dir + ": stage_plan"), dir};
  if (rank_state.contains("cost_table") && !rank_state.at("cost_table").is_null())
    out.table =
        partition::parse_unit_cost_table(rank_state.at("cost_table").dump(), dir + ": cost_table");
  return out;
}

nlohmann::json StartupPlan::table_json() const {
  return table ? nlohmann::json::parse(partition::unit_cost_table_json(*table)) : nlohmann::json();
}

EpochPackLoads epoch0_pack_loads(TrainingData& data) {
  const auto& packs = data.epoch_plan(0).packing.packs;
  OMNIBAL_CHECK(packs.size() > 0, "start-up planning: epoch 0 has no packs");
  EpochPackLoads out;
  int64_t tiles = 0, tokens = 0, samples = 0;
  for (size_t p = 0; p < packs.size(); ++p) {
    const int64_t t = packs.cost(p, balance::kTiles), k = packs.cost(p, balance::kTokens);
    out.largest.tiles = std::max(out.largest.tiles, t);
    out.largest.tokens = std::max(out.largest.tokens, k);
    tiles += t;
    tokens += k;
    samples += packs.load(p).count;
  }
  const auto n = static_cast<int64_t>(packs.size());
  const int64_t mean_samples = std::max<int64_t>(1, (samples + n / 2) / n);
  out.largest.samples = std::min(mean_samples, out.largest.tiles);
  out.mean.tiles = std::max<int64_t>(1, (tiles + n / 2) / n);
  out.mean.tokens = std::max<int64_t>(1, (tokens + n / 2) / n);
  out.mean.samples = std::min(mean_samples, out.mean.tiles);
  return out;
}

double default_memory_budget_bytes(const torch::Device& device) {
  if (device.is_cuda())
    return memory::default_budget_bytes(static_cast<double>(
        profile::cuda_device_memory_bytes(device.index() < 0 ? 0 : device.index())));
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  OMNIBAL_CHECK(pages > 0 && page > 0, "memory.budget_gb: cannot read the physical memory size; ",
                "set memory.budget_gb");
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks = local ? std::max(1, std::atoi(local)) : 1;
  return 0.75 * static_cast<double>(pages) * static_cast<double>(page) / ranks;
}

memory::StagePlanRequest stage_plan_request(const Config& cfg, const ModelPreset& preset,
                                            const StoredPlan* stored, bool log,
                                            const memory::PlanFile* plan_from) {
  memory::StagePlanRequest r;
  r.model = preset.name;
  r.unit_names = unit_names(preset);
  for (int64_t n : models::unit_parameter_counts(preset))
    r.parameter_weights.push_back(static_cast<double>(n));
  r.stages = cfg.parallel.pp;
  r.micro_batches = cfg.parallel.micro_batches;
  r.schedule = cfg.parallel.schedule;
  r.virtual_stages = cfg.parallel.virtual_stages;
  r.auto_zb_v = true;  // as the planner's options below: the executor runs ZB-V
  r.partition = cfg.parallel.partition;
  r.recompute = cfg.memory.recompute;
  if (stored) {
    r.stored = &stored->plan;
    r.stored_origin = "checkpoint " + stored->checkpoint;
  }
  if (!cfg.parallel.plan_from.empty())
    r.plan_from_origin =
        "parallel.plan_from '" + (plan_from ? plan_from->path : cfg.parallel.plan_from) + "'";
  if (plan_from) r.plan_from = &plan_from->plan;
  r.log = log;
  return r;
}

StartupPlan plan_stages_at_startup(const StartupPlanContext& c) {
  OMNIBAL_CHECK(c.device.has_value(),
                "plan_stages_at_startup: StartupPlanContext::device is unset; expected the device "
                "this rank's stage computes on (the trainer's), so the profile runs where training "
                "does");
  const auto t0 = std::chrono::steady_clock::now();
  const bool root = c.comms->rank() == 0;
  const StoredPlan* stored = c.stored ? &*c.stored : nullptr;
  // A resumed checkpoint's plan comes first: parallel.plan_from is read (by every rank, as the
  // config) only when that plan does not serve.
  std::optional<memory::PlanFile> plan_from;
  if (!c.config->parallel.plan_from.empty() &&
      !memory::stored_plan_fits(stage_plan_request(*c.config, *c.preset, stored, false)))
    plan_from = memory::read_plan_file(c.config->parallel.plan_from);
  const memory::StagePlanRequest request =
      stage_plan_request(*c.config, *c.preset, stored, root, plan_from ? &*plan_from : nullptr);
  // Asked for only when the split is searched or the recompute flags planned (collective).
  std::optional<partition::UnitCostTable> table_used;
  const auto inputs = [&c, &table_used] {
    memory::PlanningInputs in;
    const EpochPackLoads loads = epoch0_pack_loads(*c.data);
    const partition::TableLoad& load = loads.largest;
    const ObtainedTable obtained = obtain_cost_table(c, load);
    stop_point(c.comms->world(), kProfilePhase);  // a signal to any rank during the profile
    const partition::UnitCostTable& largest = obtained.table;
    table_used = largest;
    // Stage times at the mean pack (the search times m identical micro-batches: the typical
    // one), memory at the largest (the peak).
    const partition::TableLoad& mean = loads.mean;
    in.table = partition::table_at_load(largest, mean);
    in.options = planner_options(c, &in.table);
    in.options.memory_table = largest;
    in.options.host_micro_batch_s = measure_host_costs(c);
    in.options.pick_margin = pick_margin(c, obtained.spread);
    if (c.comms->rank() == 0)
      log_info(
          "stage plan: stage times at the mean epoch-0 pack ({} tiles, {} tokens), memory at "
          "the largest ({} tiles, {} tokens)",
          mean.tiles, mean.tokens, load.tiles, load.tokens);
    in.judge = trial_judge(c, in.table, load, in.options);
    return in;
  };
  const memory::StagePlan plan = memory::resolve_stage_plan(request, inputs);
  check_agreement(*c.comms, plan);
  // A deferred W needs the weights ZeRO-3 frees after each backward; a resumed checkpoint's
  // plan or parallel.plan_from may name a zero-bubble schedule the config does not.
  OMNIBAL_CHECK(c.config->train.shard != ShardMode::kFull ||
                    !schedule::splits_backward(plan.schedule),
                "train.shard full: the stage plan runs parallel.schedule ",
                choice_name(plan.schedule),
                ", whose deferred weight gradients need the weights ZeRO-3 frees after each "
                "backward; set parallel.schedule 1f1b (or train.shard optimizer)");
  std::string origin = c.config->parallel.cost_table.empty()
                           ? std::string("start-up profile")
                           : "parallel.cost_table " + c.config->parallel.cost_table;
  // Nothing profiled in this launch (the checkpoint's split kept, its flags kept or set by a
  // fixed rule): the checkpoint's table still costs this model's units (ZB-V's lists).
  if (!table_used && stored && stored->table &&
      stored->table->units.size() == plan.unit_names.size()) {
    table_used = stored->table;
    origin = "the checkpoint " + stored->checkpoint;
  }
  StartupPlan out{plan,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  std::move(table_used), origin};
  if (root) {
    log_info("stage plan ({:.2f} s): {}", out.seconds, plan.describe());
    log_info("stage plan: partition from {}", plan.partition_source);
    log_info("stage plan: recompute from {}", plan.recompute_source);
    for (size_t i = 0; i < plan.candidates.size(); ++i)
      log_info("stage plan: candidate {} {} simulated {:.2f} ms{}", i,
               plan.candidates[i].partition.to_string(), 1e3 * plan.candidates[i].pipeline_s,
               static_cast<int>(i) == plan.chosen ? " (chosen)" : "");
  }
  return out;
}

}  // namespace omnibal::train
