#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "checkpoint/checkpoint_reader.h"
#include "comm/stop_signal.h"
#include "core/error.h"
#include "core/log.h"
#include "core/model_preset.h"
#include "data/pack_loader.h"
#include "models/vlm.h"
#include "pipeline/stage_executor.h"
#include "schedule/one_f_one_b.h"
#include "train/adamw.h"
#include "train/grad_sync.h"
#include "train/init_weights.h"
#include "train/loss_normaliser.h"
#include "train/lr_schedule.h"
#include "train/run_log.h"
#include "train/startup_planner.h"
#include "train/tied_head.h"
#include "train/train_checkpoint.h"
#include "train/training_data.h"

namespace omnibal::train {

namespace {

using Clock = std::chrono::steady_clock;
using NamedParams = std::vector<std::pair<std::string, torch::Tensor>>;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

UnitGroup unit_group(models::UnitKind kind) {
  switch (kind) {
    case models::UnitKind::kVitEmbed:
    case models::UnitKind::kVitBlock: return UnitGroup::kVit;
    case models::UnitKind::kProjector: return UnitGroup::kProjector;
    case models::UnitKind::kLlmEmbed:
    case models::UnitKind::kLlmBlock:
    case models::UnitKind::kLlmHead: return UnitGroup::kLlm;
  }
  return UnitGroup::kLlm;
}

// A 32-bit FNV-1a of a parameter's name and bytes; summed over parameters it is independent of
// how parameters are spread over stages.
int64_t param_digest(const std::string& name, const torch::Tensor& p) {
  uint32_t h = 2166136261u;
  auto mix = [&](const uint8_t* d, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ d[i]) * 16777619u;
  };
  mix(reinterpret_cast<const uint8_t*>(name.data()), name.size());
  const torch::Tensor c = p.detach().to(torch::kCPU).contiguous();
  mix(static_cast<const uint8_t*>(c.data_ptr()), c.numel() * c.element_size());
  return static_cast<int64_t>(h);
}

}  // namespace

/// A fresh start (no --resume) in a run directory that holds checkpoints of an earlier run would
/// prune them by step number, possibly the new checkpoint first, and truncate metrics.jsonl:
/// refuse, naming the checkpoints and the two ways on.
/// `after_auto`: --resume auto found none of them usable (the log says why each was skipped).
static void refuse_earlier_checkpoints(const std::string& run_dir, bool after_auto = false) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  std::vector<int64_t> steps;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (const auto step = checkpoint::parse_step_dir(e.path().filename().string());
        step && e.is_directory())
      steps.push_back(*step);
  if (steps.empty()) return;
  std::sort(steps.begin(), steps.end());
  std::string names;
  for (const int64_t step : steps) names += (names.empty() ? "step-" : ", step-") + std::to_string(step);
  if (after_auto)
    OMNIBAL_FAIL("--resume auto: none of the checkpoints in ", root.string(), " (", names,
                 ") verifies (the lines above say why each was skipped); rather than restart from ",
                 "step 0 over them: repair or remove them, resume from one with --resume PATH, or ",
                 "set another runtime.run_dir to start afresh");
  OMNIBAL_FAIL("runtime.run_dir ", run_dir, " already holds checkpoints of an earlier run (", names,
                " in ", root.string(),
                "): pass --resume auto to continue it, or set another runtime.run_dir (or delete ",
                "the directory) to start afresh");
}

/// Resuming on another data plan (other data, balance.*, or dp * m) would continue the
/// checkpoint's epoch on a different sample stream: some samples trained twice, others never.
/// Refuse, naming the keys that changed and the two ways on. Same dp * m keeps the plan (steps
/// are planned as dp * m packs whatever the DP size): the same sample stream, bitwise at the
/// same dp and m, within float reordering (about 1e-7) at another DP size or m.
static void refuse_data_plan_change(const std::string& dir, const TrainCounters& at,
                                    uint64_t plan_hash, const Config& saved, const Config& now) {
  if (at.plan_hash == plan_hash) return;
  static const std::vector<std::string> kPlanKeys{
      "parallel.dp", "parallel.micro_batches", "balance", "data.meta", "data.tokenizer",
      "data.template", "data.min_tiles", "data.max_tiles", "data.on_bad_sample"};
  const auto changed = config_differences(saved, now, kPlanKeys);
  std::string list;
  for (const auto& c : changed) list += "\n  " + c;
  if (changed.empty())
    list = "\n  no plan key changed: the data files (data.meta and the files it lists) differ";
  const int64_t old_batch = int64_t{saved.parallel.dp} * saved.parallel.micro_batches;
  const int64_t new_batch = int64_t{now.parallel.dp} * now.parallel.micro_batches;
  std::string keep = "restore the keys above";
  if (old_batch != new_batch)
    keep += fmt::format(
        "; only parallel.dp x parallel.micro_batches must stay {}{}", old_batch,
        old_batch % now.parallel.dp == 0
            ? fmt::format(" (parallel.micro_batches={} at parallel.dp={})",
                          old_batch / now.parallel.dp, now.parallel.dp)
            : fmt::format(" (parallel.dp={} does not divide it)", now.parallel.dp));
  OMNIBAL_FAIL(dir, ": the data plan differs from the checkpoint's (plan hash ",
               fmt::format("{:016x}", plan_hash), " vs ", fmt::format("{:016x}", at.plan_hash),
               "): continuing at step ", at.step, " (epoch ", at.epoch, ", step ", at.step_in_epoch,
               " of it) would train some samples twice and others never. Changed since the "
               "checkpoint:", list, "\nTo continue this run exactly, ", keep,
               ". To train on the new plan from these weights, start a new run: omnibal-plan "
               "export --checkpoint ", dir, " --out DIR, then model.init_from=DIR in a fresh "
               "runtime.run_dir");
}

struct Trainer::State {
  Config cfg;
  comm::ParallelComms& comms;
  std::shared_ptr<comm::ErrorForwarder> errors;
  ModelPreset preset;
  std::unique_ptr<data::Tokenizer> tokenizer;
  memory::StagePlan plan;      ///< split + recompute flags (train/startup_planner.h)
  std::vector<models::UnitPtr> units;
  NamedParams params;          ///< all of this stage's parameters (frozen included)
  std::vector<torch::Tensor> trainable;
  std::unique_ptr<AdamW> adam;
  std::unique_ptr<TiedHead> tied;  ///< the tied LM head's two copies when split over stages
  std::unique_ptr<comm::TensorMessenger> pipe;
  std::unique_ptr<pipeline::StageExecutor> stage;
  std::unique_ptr<TrainingData> data;
  std::unique_ptr<Evaluator> evaluator;
  std::unique_ptr<TrainCheckpoint> checkpoints;
  std::unique_ptr<RunLog> log;
  schedule::StageSchedules programs;
  TrainCounters counters;
  std::unique_ptr<data::PackLoader> loader;
  int loader_epoch = -1;
  int64_t skipped_samples = 0;  ///< bad samples left out of consumed packs (stage 0, this run)
  int64_t packer_skipped = 0;   ///< samples the packer left out of the epochs this run entered
  int packer_epoch = -1;        ///< last epoch whose packer skips were counted
  Clock::time_point started = Clock::now();  ///< train.exit_duration_min counts from here
  std::string config_yaml;
  int stage_index = 0, stages = 1, dp_rank = 0, dp = 1, m = 1;
  models::LossReduction reduction = models::LossReduction::kToken;
  std::optional<EvalResult> last_eval;

  bool needs_packs() const { return stage_index == 0 || stage_index == stages - 1; }
  /// Logs the loader's skipped-sample report (reasons, first example) for `epoch` on every
  /// stage-0 rank (one per DP replica) when it skipped any; the loader may have built a few
  /// packs ahead of the last step.
  void report_skipped(int epoch) const {
    if (loader && stage_index == 0 && loader->bad_samples().total() > 0)
      log_info_every_rank("data: epoch {}, DP rank {}: {}", epoch, dp_rank,
                          loader->bad_samples().report());
  }
  void count_packer_skips(int epoch);
  std::optional<std::string> exit_due(int64_t steps_this_run);
  void build_stage();
  void check_plan_hash();
  std::vector<models::PackBatch> next_packs(int64_t step);
  void maybe_fail(FailWhere where, int64_t step) const;
  nlohmann::json step_metrics(int64_t step, const pipeline::StageStepResult& r,
                              const std::vector<models::PackBatch>& packs,
                              const LossNormaliser& n, double lr, double norm, double seconds);
  int64_t param_hash();
  bool tied_copies_equal();
  std::string param_hash_text() {
    return fmt::format("{:08x}", static_cast<uint64_t>(param_hash()) & 0xffffffffffffULL);
  }
  void save_checkpoint();
};

void Trainer::State::build_stage() {
  models::VlmOptions opt;
  opt.with_img_context_id(tokenizer->special().img_context).with_seed(cfg.train.seed)
      .with_dropout(cfg.model.dropout);
  units = models::make_units(preset, opt, plan.begin(stage_index), plan.end(stage_index));
  for (size_t i = 0; i < units.size(); ++i) {
    auto& u = units[i];
    u->set_recompute(plan.recompute[plan.begin(stage_index) + static_cast<int>(i)]);
    const UnitGroup group = unit_group(u->kind());
    const bool frozen =
        std::find(cfg.train.freeze.begin(), cfg.train.freeze.end(), group) != cfg.train.freeze.end();
    for (auto& np : u->named_parameters()) {
      np.value().requires_grad_(!frozen);
      params.emplace_back(u->unit_name() + "." + np.key(), np.value());
      if (!frozen) trainable.push_back(np.value());
    }
  }
  tied = std::make_unique<TiedHead>(preset, plan.partition, stage_index, params);
  AdamWOptions ao;
  ao.beta1 = cfg.train.beta1;
  ao.beta2 = cfg.train.beta2;
  ao.weight_decay = cfg.train.weight_decay;
  adam = std::make_unique<AdamW>(params, ao);
  if (stages > 1) pipe = std::make_unique<comm::TensorMessenger>(comms.pipeline());
  stage = std::make_unique<pipeline::StageExecutor>(units, stage_index, stages, pipe.get());
  programs = schedule::build_1f1b_schedule(stages, m);
}

void Trainer::State::check_plan_hash() {
  const uint64_t h = data->plan_hash();
  const int64_t hi = static_cast<int64_t>(h >> 32), lo = static_cast<int64_t>(h & 0xffffffffu);
  auto& w = comms.world();
  const bool same = w.all_reduce_int(hi, comm::ReduceOp::kMax) == w.all_reduce_int(hi, comm::ReduceOp::kMin) &&
                    w.all_reduce_int(lo, comm::ReduceOp::kMax) == w.all_reduce_int(lo, comm::ReduceOp::kMin);
  OMNIBAL_CHECK(same, "rank ", comms.rank(), ": the data plan differs between ranks (this rank's ",
                "hash ", fmt::format("{:016x}", h), "); all ranks must read the same data files ",
                "and config");
  counters.plan_hash = h;
}

/// Collective: why this run ends at this step boundary (train.exit_after_steps, or
/// train.exit_duration_min agreed over all ranks), or nothing.
std::optional<std::string> Trainer::State::exit_due(int64_t steps_this_run) {
  const TrainConfig& t = cfg.train;
  if (t.exit_after_steps > 0 && steps_this_run >= t.exit_after_steps)
    return fmt::format("train.exit_after_steps {}", t.exit_after_steps);
  if (t.exit_duration_min <= 0) return std::nullopt;
  const int64_t over = since(started) >= 60.0 * t.exit_duration_min ? 1 : 0;
  if (comms.world().all_reduce_int(over, comm::ReduceOp::kMax, "exit duration") == 0)
    return std::nullopt;
  return fmt::format("train.exit_duration_min {}", t.exit_duration_min);
}

void Trainer::State::maybe_fail(FailWhere where, int64_t step) const {
  const auto& f = cfg.debug.fail_at;
  if (f.rank != comms.rank() || f.step != step || f.where != where) return;
  if (where == FailWhere::kLoader) {
    // As a data-loader thread would: the error reaches the main thread at its next wait.
    std::thread t([&] {
      errors->run_guarded("data-loader", [&] {
        OMNIBAL_FAIL("debug.fail_at: injected loader failure at step ", step);
      });
    });
    t.join();
    return;
  }
  OMNIBAL_FAIL("debug.fail_at: injected ", choice_name(where), " failure at step ", step);
}

/// The samples the packer (ISF budgets, baselines' caps) left out of epoch `epoch` under
/// data.on_bad_sample: skip: counted once per epoch this run enters, logged by rank 0 with the
/// first one's file:line and load.
void Trainer::State::count_packer_skips(int epoch) {
  if (epoch <= packer_epoch) return;
  packer_epoch = epoch;
  const auto& skipped = data->epoch_plan(epoch).packing.skipped;
  if (skipped.empty()) return;
  packer_skipped += static_cast<int64_t>(skipped.size());
  if (comms.rank() != 0) return;
  const auto& set = data->set();
  const uint32_t first = skipped.front();
  const auto& budgets = data->epoch_plan(epoch).budgets;
  log_info("data: epoch {}: the packer left out {} samples over the pack budgets (Q_v {} Q_t {}) "
           "under data.on_bad_sample: skip; first: {} ({} tiles, {} tokens)", epoch,
           skipped.size(), budgets.q_vit, budgets.q_tok,
           set.dataset->entry(set.global_id(first)).origin.to_string(), set.table.load[first].tiles(),
           set.table.load[first].tokens());
}

std::vector<models::PackBatch> Trainer::State::next_packs(int64_t step) {
  const DataPosition pos = data->position(step);
  count_packer_skips(pos.epoch);
  if (!needs_packs()) return {};
  if (pos.epoch != loader_epoch) {
    std::vector<std::vector<int64_t>> packs;
    const int64_t steps = data->steps_in_epoch(pos.epoch);
    const int64_t first = step - pos.step_in_epoch;
    for (int64_t s = pos.step_in_epoch; s < steps; ++s)
      for (int k = 0; k < m; ++k) packs.push_back(data->pack(first + s, dp_rank, k));
    data::LoaderOptions lo;
    lo.workers = cfg.data.workers;
    lo.prefetch = std::max(4, 2 * m);
    lo.parts = {stage_index == 0, stage_index == 0, true};
    report_skipped(loader_epoch);
    loader.reset();
    loader = std::make_unique<data::PackLoader>(data->builder(), std::move(packs), lo);
    loader_epoch = pos.epoch;
  }
  std::vector<models::PackBatch> out;
  for (int k = 0; k < m; ++k) {
    auto p = loader->next();
    OMNIBAL_CHECK(p.has_value(), "data loader ran out of packs at step ", step);
    if (stage_index == 0) {  // every loading stage skips the same samples; count them once
      skipped_samples += static_cast<int64_t>(p->skipped.size());
      if (p->num_samples() == 0) {
        std::string why;
        for (const auto& e : p->skipped) why += "\n  " + e;
        log_info_every_rank("data: step {}, DP rank {}, micro-batch {}: every sample of the pack "
                            "was left out (data.on_bad_sample: skip); it runs as an empty "
                            "micro-batch:{}", step, dp_rank, k, why);
      }
    }
    out.push_back(std::move(*p));
  }
  return out;
}

nlohmann::json Trainer::State::step_metrics(int64_t step, const pipeline::StageStepResult& r,
                                            const std::vector<models::PackBatch>& packs,
                                            const LossNormaliser& n_global, double lr, double norm,
                                            double seconds) {
  // One world all-reduce: [loss_sum, samples, tokens, 4 per stage, 2 per DP rank, sum of
  // per-micro-batch mean losses, micro-batches].
  const int n = 3 + 4 * stages + 2 * dp + 2;
  torch::Tensor v = torch::zeros({n}, torch::kFloat64);
  auto a = v.accessor<double, 1>();
  if (stage_index == stages - 1) {
    a[0] = r.loss_term_sum;  // sum of w_t * l_t under loss.reduction
    for (const auto& [loss, count] : r.micro_batches) {
      a[n - 2] += count ? loss / count : 0.0;
      a[n - 1] += 1;
    }
  }
  if (stage_index == 0) {
    int64_t samples = 0, tokens = 0, tiles = 0;
    for (const auto& p : packs) {
      samples += p.num_samples();
      tokens += p.position_ids.numel();
      tiles += p.image_flags.numel();
    }
    a[1] = static_cast<double>(samples);
    a[2] = static_cast<double>(tokens);
    a[3 + 4 * stages + 2 * dp_rank] = static_cast<double>(tiles);
    a[3 + 4 * stages + 2 * dp_rank + 1] = static_cast<double>(tokens);
  }
  if (dp_rank == 0) {
    a[3 + 4 * stage_index] = r.times.forward_s;
    a[4 + 4 * stage_index] = r.times.backward_s;
    a[5 + 4 * stage_index] = r.times.idle_s;
    a[6 + 4 * stage_index] = r.times.reduce_s;
  }
  comms.world().all_reduce(v, comm::ReduceOp::kSum, "step metrics");
  nlohmann::json st = nlohmann::json::array(), dpj = nlohmann::json::array();
  double idle = 0, reduce = 0;
  for (int s = 0; s < stages; ++s) {
    st.push_back({{"forward_s", a[3 + 4 * s]}, {"backward_s", a[4 + 4 * s]},
                  {"idle_s", a[5 + 4 * s]}});
    idle += a[5 + 4 * s];
    reduce = std::max(reduce, a[6 + 4 * s]);
  }
  for (int d = 0; d < dp; ++d)
    dpj.push_back({{"tiles", static_cast<int64_t>(a[3 + 4 * stages + 2 * d])},
                   {"tokens", static_cast<int64_t>(a[4 + 4 * stages + 2 * d])}});
  counters.samples += static_cast<int64_t>(a[1]);
  counters.tokens += static_cast<int64_t>(a[2]);
  const DataPosition pos = data->position(step);
  const int64_t labels = n_global.label_tokens;
  return {{"step", step}, {"loss", n_global.normaliser > 0 ? a[0] / n_global.normaliser : 0.0},
          {"lr", lr}, {"grad_norm", norm},
          {"samples", static_cast<int64_t>(a[1])}, {"tokens", static_cast<int64_t>(a[2])},
          {"label_tokens", labels}, {"loss_normaliser", n_global.normaliser},
          {"tokens_per_s", a[2] / seconds},
          {"samples_per_s", a[1] / seconds}, {"step_seconds", seconds}, {"dp_wait_s", reduce},
          {"bubble_fraction", idle / stages / seconds}, {"epoch", pos.epoch},
          // What averaging per micro-batch (instead of per global batch) would have reported.
          {"micro_batch_mean_loss", a[n - 1] ? a[n - 2] / a[n - 1] : 0.0},
          {"stages", st}, {"dp_ranks", dpj}};
}

int64_t Trainer::State::param_hash() {
  int64_t sum = 0;
  if (dp_rank == 0)
    for (const auto& [name, p] : params)
      if (!tied->not_written(name)) sum += param_digest(name, p);
  return comms.world().all_reduce_int(sum, comm::ReduceOp::kSum, "parameter hash");
}

// Collective: whether the tied head's two copies are bitwise equal on every pipeline.
bool Trainer::State::tied_copies_equal() {
  const int64_t differ = tied->copies_equal(comms.pipeline()) ? 0 : 1;
  return comms.world().all_reduce_int(differ, comm::ReduceOp::kMax, "tied head check") == 0;
}

void Trainer::State::save_checkpoint() {
  const DataPosition pos = data->position(counters.step);
  counters.epoch = pos.epoch;
  counters.step_in_epoch = pos.step_in_epoch;
  std::vector<std::string> skip;
  for (const auto& [name, p] : params)
    if (tied->not_written(name)) skip.push_back(name);
  checkpoints->save(counters, params, *adam, dp_rank == 0, config_yaml, skip);
  if (comms.rank() == 0) log_info("checkpoint: step {} in {}/checkpoints", counters.step, cfg.runtime.run_dir);
}

Trainer::Trainer(const Config& config, comm::ParallelComms& comms,
                 std::shared_ptr<comm::ErrorForwarder> errors, const std::string& resume)
    : s_(new State{config, comms, std::move(errors)}) {
  State& s = *s_;
  s.stage_index = comms.coord().pp;
  s.stages = comms.grid().shape().pp;
  s.dp_rank = comms.coord().dp;
  s.dp = comms.grid().shape().dp;
  s.m = config.parallel.micro_batches;
  s.config_yaml = to_yaml(config);
  s.preset = load_model_preset(config.model.preset);
  OMNIBAL_CHECK(!config.data.meta.empty(), "data.meta: expected the training meta file");
  s.reduction = config.loss.reduction;
  OMNIBAL_CHECK(!config.data.tokenizer.empty(), "data.tokenizer: expected a SentencePiece .model");
  s.tokenizer = std::make_unique<data::Tokenizer>(config.data.tokenizer);
  s.data = std::make_unique<TrainingData>(
      load_set(config.data.meta, config, s.preset, *s.tokenizer, std::max(1, config.data.workers)),
      config);
  s.check_plan_hash();
  if (resume.empty()) refuse_earlier_checkpoints(config.runtime.run_dir);
  s.checkpoints = std::make_unique<TrainCheckpoint>(config.runtime.run_dir + "/checkpoints",
                                                    config.train.keep_checkpoints, comms.world());
  const std::string dir = s.checkpoints->resolve(resume);
  // --resume auto with checkpoints none of which verifies must not restart from step 0 over
  // them (pruning them and truncating metrics.jsonl): refuse like a fresh start would.
  if (resume == "auto" && dir.empty()) refuse_earlier_checkpoints(config.runtime.run_dir, true);
  std::optional<Config> saved;  // the checkpoint's config, checked before any start-up work
  if (!dir.empty()) {
    saved = parse_config(s.checkpoints->config_text(dir), dir + "/config");
    OMNIBAL_CHECK(saved->model.preset == config.model.preset, dir, ": the checkpoint is of model '",
                  saved->model.preset, "' but model.preset is '", config.model.preset, "'");
    refuse_data_plan_change(dir, TrainCounters::from_json(s.checkpoints->rank_state(dir)),
                            s.counters.plan_hash, *saved, config);
  }
  StartupPlanContext planning;
  planning.config = &config;
  planning.preset = &s.preset;
  planning.comms = &comms;
  planning.data = s.data.get();
  planning.img_context_id = s.tokenizer->special().img_context;
  if (!dir.empty()) planning.stored = stored_plan(s.checkpoints->rank_state(dir), dir);
  s.plan = plan_stages_at_startup(planning).plan;
  s.counters.stage_plan = memory::stage_plan_json(s.plan);
  s.build_stage();
  if (!config.data.eval_meta.empty())
    s.evaluator = std::make_unique<Evaluator>(
        load_set(config.data.eval_meta, config, s.preset, *s.tokenizer, 1, /*repeat=*/false),
        config.balance.samples_per_pack, s.preset.llm.max_seq_len);
  if (!dir.empty()) {
    const uint64_t hash = s.counters.plan_hash;
    s.counters = s.checkpoints->load(dir, s.params, *s.adam);
    s.counters.plan_hash = hash;
    s.counters.stage_plan = memory::stage_plan_json(s.plan);
    if (comms.rank() == 0) log_info("resumed from {} at step {}", dir, s.counters.step);
    if (!config.model.init_from.empty() && comms.rank() == 0)
      log_info("model.init_from {} ignored: resuming from checkpoint {}", config.model.init_from, dir);
    if (s.cfg.model.hf_style == HfStyle::kAuto) s.cfg.model.hf_style = saved->model.hf_style;
    if (s.cfg.model.hf_style == HfStyle::kAuto) s.cfg.model.hf_style = HfStyle::kInternLm2;  // checkpoints before the key
  } else {
    if (resume == "auto" && comms.rank() == 0)
      log_info("resume auto: no checkpoint under {}/checkpoints, starting afresh", config.runtime.run_dir);
    init_stage_weights(s.cfg.model, s.preset, s.units);
    if (!config.model.init_from.empty()) {
      const std::string hash = s.param_hash_text();
      if (comms.rank() == 0)
        log_info("model.init_from {}: {} layout, parameter hash {}", config.model.init_from,
                 choice_name(s.cfg.model.hf_style), hash);
    }
  }
  s.config_yaml = to_yaml(s.cfg);  // with model.hf_style resolved (export reads it)
  s.log = std::make_unique<RunLog>(config.runtime.run_dir, comms.rank() == 0, s.config_yaml,
                                   s.counters.step, config.train.steps);
  if (comms.rank() == 0) {
    write_stage_plan_file(config.runtime.run_dir, s.plan);
    const auto& plan = s.data->epoch_plan(0);
    log_info("{}", comms.grid().describe(comms.rank()));
    log_info("stages: {}", s.plan.describe_stages());
    const size_t left_out = plan.packing.skipped.size();
    log_info("data: {} samples{}, balance.method {}, {} packs, {} steps per epoch of dp {} x m {} "
             "packs, budgets Q_v {} Q_t {}, plan hash {:016x}", s.data->set().table.size(),
             left_out ? fmt::format(" ({} planned; the packer leaves out {} over budget)",
                                    s.data->set().table.size() - left_out, left_out)
                      : std::string(),
             choice_name(config.balance.method), plan.packing.packs.size(),
             plan.plan.steps(), s.dp, s.m, plan.budgets.q_vit, plan.budgets.q_tok,
             s.counters.plan_hash);
    if (s.data->set().bad_samples > 0)
      log_info("data: on_bad_sample skip: the start-up scan left out {} samples (not in the plan)",
               s.data->set().bad_samples);
  }
}

Trainer::~Trainer() = default;

TrainOutcome Trainer::run() {
  State& s = *s_;
  const Config& cfg = s.cfg;
  TrainOutcome out;
  const auto t_start = Clock::now();
  const int64_t first = s.counters.step;
  int64_t last_ckpt = first;
  if (first >= cfg.train.steps) {  // a finished run relaunched: leave its files as they are
    if (s.comms.rank() == 0)
      log_info("resumed at step {} = train.steps: nothing to train (raise train.steps to "
               "continue); summary.json and eval.jsonl left as they are", first);
    out.steps_done = first;
    return out;
  }
  for (int64_t step = first; step < cfg.train.steps; ++step) {
    if (comm::should_stop(s.comms.world())) {
      out.stopped = true;
      out.stop_reason = "signal";
      break;
    }
    // At least one step per launch, so a slot shorter than start-up still makes progress.
    if (auto why = step > first ? s.exit_due(step - first) : std::nullopt) {
      out.stopped = true;
      out.stop_reason = *why;
      break;
    }
    const auto t0 = Clock::now();
    s.maybe_fail(FailWhere::kStep, step);
    s.maybe_fail(FailWhere::kLoader, step);
    std::vector<models::PackBatch> packs = s.next_packs(step);
    for (size_t k = 0; k < packs.size(); ++k)  // dropout masks follow the pack, not the rank
      packs[k].dropout_key = models::dropout_key(cfg.train.seed, step,
                                                 s.data->slot(s.dp_rank, static_cast<int>(k)));
    // N of the whole global batch, identical on every rank (loss_normaliser.h).
    const LossNormaliser n = global_normaliser(
        s.stage_index == s.stages - 1 ? local_normaliser(packs, s.reduction) : LossNormaliser{},
        s.comms.world());
    s.adam->zero_grad();
    pipeline::StepHooks hooks;
    hooks.before_op = [&](const char* where, int) {
      s.maybe_fail(parse_choice<FailWhere>(where, "stage op"), step);
    };
    hooks.reduce_grads = [&] {
      all_reduce_gradients(s.trainable, s.comms.dp_group());
      s.tied->sum_gradients(s.comms.pipeline());
    };
    if (s.reduction != models::LossReduction::kToken)
      hooks.loss_term = [&](const models::UnitState& out) { return micro_batch_loss_term(out, s.reduction); };
    const auto r = s.stage->run_step(s.programs[s.stage_index], packs,
                                     n.normaliser > 0 ? 1.0 / n.normaliser : 0.0, hooks);
    const double norm = global_grad_norm(s.tied->norm_params(s.trainable),
                                         s.stages > 1 ? &s.comms.pipeline() : nullptr);
    clip_gradients(s.trainable, norm, cfg.train.grad_clip);
    const double lr = learning_rate(cfg.train, step);
    s.adam->step(lr);
    s.counters.step = step + 1;
    const auto m = s.step_metrics(step, r, packs, n, lr, norm, since(t0));
    out.final_loss = m["loss"].get<double>();
    s.log->step(m);
    const bool last = step + 1 == cfg.train.steps;
    if (s.evaluator && cfg.train.eval_every > 0 && (step + 1) % cfg.train.eval_every == 0 && !last) {
      s.last_eval = s.evaluator->run(*s.stage, s.comms);
      s.log->eval(step + 1, *s.last_eval);
    }
    if (cfg.train.checkpoint_every > 0 && (step + 1) % cfg.train.checkpoint_every == 0 && !last) {
      s.save_checkpoint();
      last_ckpt = step + 1;
    }
  }
  s.report_skipped(s.loader_epoch);
  s.loader.reset();
  const int64_t skipped = s.comms.world().all_reduce_int(s.skipped_samples, comm::ReduceOp::kSum,
                                                         "skipped-sample count");
  if (s.comms.rank() == 0 && (skipped > 0 || s.data->set().bad_samples > 0 || s.packer_skipped > 0))
    log_info("data: on_bad_sample skip left out {} samples at the start-up scan, {} in the "
             "packer over the epochs of this run and {} of the packs trained in this run",
             s.data->set().bad_samples, s.packer_skipped, skipped);
  if (s.counters.step != last_ckpt || s.counters.step == 0) s.save_checkpoint();
  if (!out.stopped && s.evaluator) {
    s.last_eval = s.evaluator->run(*s.stage, s.comms);
    s.log->eval(s.counters.step, *s.last_eval);
  }
  out.steps_done = s.counters.step;
  out.eval = s.last_eval;
  const double seconds = since(t_start);
  const int64_t run_steps = s.counters.step - first;
  nlohmann::json summary = {
      {"steps", s.counters.step}, {"steps_this_run", run_steps}, {"seconds", seconds},
      {"seconds_per_step", run_steps ? seconds / run_steps : 0.0}, {"final_loss", out.final_loss},
      {"samples", s.counters.samples}, {"tokens", s.counters.tokens}, {"stopped", out.stopped},
      {"stop_reason", out.stop_reason},
      {"param_hash", s.param_hash_text()},
      {"balance_method", choice_name(cfg.balance.method)}, {"partition", s.plan.partition.to_string()},
      {"recomputed_per_stage", s.plan.recomputed_per_stage()},
      {"skipped_samples",
       {{"scan", s.data->set().bad_samples}, {"packer", s.packer_skipped}, {"training", skipped}}}};
  if (s.last_eval) summary["eval"] = eval_json(s.counters.step, *s.last_eval);
  if (s.tied->split()) summary["tied_head_copies_equal"] = s.tied_copies_equal();
  s.log->finish(summary);
  return out;
}

}  // namespace omnibal::train
