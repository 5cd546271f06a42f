#include "train/trainer.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/stop_signal.h"
#include "core/error.h"
#include "core/log.h"
#include "core/model_preset.h"
#include "models/vlm.h"
#include "pipeline/stage_executor.h"
#include "schedule/schedules.h"
#include "train/distributed_optimizer.h"
#include "train/init_weights.h"
#include "train/loss_normaliser.h"
#include "train/lr_schedule.h"
#include "train/nonfinite_guard.h"
#include "train/pack_time_source.h"
#include "train/run_device.h"
#include "train/run_log.h"
#include "train/startup_planner.h"
#include "train/step_metrics.h"
#include "train/step_trace.h"
#include "train/tied_head.h"
#include "train/tp_group.h"
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

/// Resuming on another data plan (other data, balance.*, or dp * m) would continue the
/// checkpoint's epoch on a different sample stream: some samples trained twice, others never.
/// Refuse, naming the keys that changed and the two ways on. Same dp * m keeps the plan (steps
/// are planned as dp * m packs whatever the DP size): the same sample stream, bitwise at the
/// same dp and m, within float reordering (about 1e-7) at another DP size or m.
static void refuse_data_plan_change(const std::string& dir, const TrainCounters& at,
                                    uint64_t plan_hash, const Config& saved, const Config& now) {
  if (at.plan_hash == plan_hash) return;
  static const std::vector<std::string> kPlanKeys{"parallel.dp",       "parallel.micro_batches",
                                                  "balance",           "data.meta",
                                                  "data.tokenizer",    "data.template",
                                                  "data.min_tiles",    "data.max_tiles",
                                                  "data.on_bad_sample"};
  const auto changed = config_differences(saved, now, kPlanKeys);
  std::string list;
  for (const auto& c : changed) list += "\n  " + c;
  if (changed.empty())
    list = "\n  no plan key changed: the data files (data.meta and the files it lists) differ";
  const int64_t old_batch = int64_t{saved.parallel.dp} * saved.parallel.micro_batches;
  const int64_t new_batch = int64_t{now.parallel.dp} * now.parallel.micro_batches;
  std::string keep = "restore the keys above";
  if (old_batch != new_batch)
    keep += fmt::format("; only parallel.dp x parallel.micro_batches must stay {}{}", old_batch,
                        old_batch % now.parallel.dp == 0
                            ? fmt::format(" (parallel.micro_batches={} at parallel.dp={})",
                                          old_batch / now.parallel.dp, now.parallel.dp)
                            : fmt::format(" (parallel.dp={} does not divide it)", now.parallel.dp));
  OMNIBAL_FAIL(dir, ": the data plan differs from the checkpoint's (plan hash ",
               fmt::format("{:016x}", plan_hash), " vs ", fmt::format("{:016x}", at.plan_hash),
               "): continuing at step ", at.step, " (epoch ", at.epoch, ", step ", at.step_in_epoch,
               " of it) would train some samples twice and others never. Changed since the "
               "checkpoint:",
               list, "\nTo continue this run exactly, ", keep,
               ". To train on the new plan from these weights, start a new run: omnibal-plan "
               "export --checkpoint ",
               dir,
               " --out DIR, then model.init_from=DIR in a fresh "
               "runtime.run_dir");
}

/// The preset file behind model.preset may change between launches; a checkpoint of another
/// architecture would load whatever names still match (a head untied since, say, left out).
/// Refuse, naming the keys that changed.
static void refuse_architecture_change(const std::string& dir, const TrainCounters& at,
                                       const std::string& now, const std::string& preset) {
  if (at.model_architecture.empty()) return;  // written before the record existed
  const auto changed = yaml_differences(at.model_architecture, now, {"vit", "projector", "llm"});
  if (changed.empty()) return;
  std::string list;
  for (const auto& c : changed) list += "\n  " + c;
  OMNIBAL_FAIL(dir, ": the checkpoint was written for another architecture than model.preset '",
               preset, "' has now (checkpoint -> now):", list,
               "\nRestore the preset to resume; to train the changed model from these weights, "
               "start a new run from an export (omnibal-plan export, then model.init_from)");
}

struct Trainer::State {
  const Config cfg;  ///< resolved (run_config.h); never changed
  comm::ParallelComms& comms;
  std::shared_ptr<comm::ErrorForwarder> errors;
  ModelPreset preset;
  std::unique_ptr<data::Tokenizer> tokenizer;
  memory::StagePlan plan;              ///< split + recompute flags (train/startup_planner.h)
  std::vector<models::UnitPtr> units;  ///< this stage's units, chunk after chunk
  std::vector<models::UnitRange> chunk_ranges;  ///< unit interval of each chunk of this stage
  NamedParams params;  ///< all of this stage's parameters (frozen included)
  /// Mixed precision, ZeRO-1, fp32 master weights, AdamW; made after the weights are set.
  std::unique_ptr<DistributedOptimizer> optimizer;
  std::unique_ptr<TiedHead> tied;       ///< the tied LM head's two copies when split over stages
  models::TensorParallel tp;            ///< this rank's TP group (size 1: none)
  TpLayout tp_layout;                   ///< which parameters are TP-sharded, and how
  std::set<std::string> tp_replicated;  ///< parameters whole on every TP rank (norm counts once)
  std::unique_ptr<comm::TensorMessenger> pipe;
  std::unique_ptr<pipeline::StageExecutor> stage;
  /// The device this rank's stage computes on (runtime.device, train/run_device.h): its units,
  /// packs and optimizer buffers; the start-up plan profiles and runs its trials there too.
  torch::Device device = torch::kCPU;
  std::unique_ptr<TrainingData> data;  ///< the data plan and this rank's loader
  TrainerTimeModel time;  ///< predicted pack seconds (pack_time_source.h), built after the plan
  std::unique_ptr<Evaluator> evaluator;
  std::unique_ptr<TrainCheckpoint> checkpoints;
  std::unique_ptr<RunLog> log;
  std::unique_ptr<NonFiniteGuard> nonfinite;  ///< train.on_nonfinite (nonfinite_guard.h)
  schedule::StageSchedules programs;
  TrainCounters counters;
  int64_t last_checkpoint = 0;  ///< step of the newest checkpoint of this run (or its start)
  Clock::time_point started = Clock::now();  ///< train.exit_duration_min counts from here
  Clock::time_point run_started;             ///< run() began (summary.json's seconds)
  std::string config_yaml;  ///< cfg as written to the run directory and every checkpoint
  int stage_index = 0, stages = 1, dp_rank = 0, dp = 1, m = 1, tp_rank = 0;
  std::optional<EvalResult> last_eval;
  std::vector<double> clock_offsets_us;  ///< runtime.trace_steps: each rank's clock vs rank 0's

  models::VlmOptions model_options() const;
  bool is_last_stage() const { return stage_index == stages - 1; }
  std::optional<std::string> exit_due(int64_t steps_this_run);
  void build_stage();
  void make_optimizer();
  void check_plan_hash();
  void restore(const ResumePoint& resume);
  void log_start() const;
  void maybe_fail(FailWhere where, int64_t step) const;
  pipeline::StepHooks step_hooks(int64_t step);
  StepMetrics gather_metrics(const pipeline::StageStepResult& r,
                             const std::vector<models::PackBatch>& packs);
  int64_t param_hash();
  bool tied_copies_equal();
  bool tp_replicated_equal();
  /// Runs the evaluator; its TP all-reduce seconds are kept apart from the training steps'.
  EvalResult evaluate() {
    const double before = tp_all_reduce_seconds(tp);
    EvalResult r = evaluator->run(*stage, comms);
    tp_eval_s += tp_all_reduce_seconds(tp) - before;
    return r;
  }
  double tp_eval_s = 0;  ///< TP all-reduce seconds spent in evaluation
  std::string param_hash_text() {
    return fmt::format("{:08x}", static_cast<uint64_t>(param_hash()) & 0xffffffffffffULL);
  }
  void save_checkpoint();
};

models::VlmOptions Trainer::State::model_options() const {
  models::VlmOptions opt;
  opt.with_img_context_id(tokenizer->special().img_context)
      .with_seed(cfg.train.seed)
      .with_dropout(cfg.model.dropout)
      .with_dtype(precision_dtype(cfg.train.precision))
      .with_device(device);
  return opt;
}

void Trainer::State::build_stage() {
  // Interleaved: this stage holds chunks k = c * P + stage (lib/schedule/instruction.h).
  for (int c = 0; c < plan.virtual_stages; ++c) {
    const int k = c * stages + stage_index;
    chunk_ranges.emplace_back(plan.begin(k), plan.end(k));
  }
  const auto chunks =
      models::make_chunk_units(preset, model_options().with_tensor_parallel(tp), chunk_ranges);
  std::vector<int> unit_index;  // chain index of each unit of this stage
  for (size_t c = 0; c < chunks.size(); ++c)
    for (size_t i = 0; i < chunks[c].size(); ++i) {
      units.push_back(chunks[c][i]);
      unit_index.push_back(static_cast<int>(chunk_ranges[c].first + i));
    }
  tp_layout = TpLayout(units, tp);
  for (size_t i = 0; i < units.size(); ++i) {
    auto& u = units[i];
    u->set_recompute(plan.recompute[unit_index[i]]);
    const UnitGroup group = unit_group(u->kind());
    const bool frozen = std::find(cfg.train.freeze.begin(), cfg.train.freeze.end(), group) !=
                        cfg.train.freeze.end();
    for (auto& np : u->named_parameters()) {
      np.value().requires_grad_(!frozen);
      params.emplace_back(u->unit_name() + "." + np.key(), np.value());
    }
  }
  tied =
      std::make_unique<TiedHead>(preset, plan.partition, stage_index, params, plan.virtual_stages);
  // A tied head's copy on the head's stage answers to the embedding's name (tied_head.h): give
  // it the head's shard layout, so it is gathered and sharded like the embedding.
  if (tied->split() && !tp_layout.spec(TiedHead::kEmbeddingName).sharded())
    tp_layout.alias(TiedHead::kEmbeddingName, TiedHead::kHeadName);
  std::vector<std::string> names;
  for (const auto& [name, p] : params) names.push_back(name);
  tp_replicated = tp_layout.replicated_names(names);
  if (stages > 1) pipe = std::make_unique<comm::TensorMessenger>(comms.pipeline());
  stage =
      std::make_unique<pipeline::StageExecutor>(chunks, stage_index, stages, pipe.get(), device);
  programs = schedule::build_schedule(plan.schedule, stages, m, plan.virtual_stages);
}

/// The optimizer over this stage's trainable parameters as they are now (it takes the current
/// values as master weights): after the initialisation, before a checkpoint is loaded.
void Trainer::State::make_optimizer() {
  OptimizerOptions o;
  o.adam.beta1 = cfg.train.beta1;
  o.adam.beta2 = cfg.train.beta2;
  o.adam.weight_decay = cfg.train.weight_decay;
  o.precision = cfg.train.precision;
  o.reduce_dtype = cfg.comm.grad_reduce_dtype;
  o.zero1 = cfg.train.zero1;
  if (tied->active()) o.own_bucket = {TiedHead::kEmbeddingName};
  optimizer =
      std::make_unique<DistributedOptimizer>(params, o, &comms.dp_group(), DpShard{dp_rank, dp});
}

void Trainer::State::check_plan_hash() {
  const uint64_t h = data->plan_hash();
  OMNIBAL_CHECK(comm::same_on_every_rank(comms.world(), h, "data plan hash"), "rank ", comms.rank(),
                ": the data plan differs between ranks (this rank's hash ",
                fmt::format("{:016x}", h), "); all ranks must read the same data files and config");
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

/// The executor's hooks for `step`: injected failures, the DP gradient all-reduce (and the tied
/// head's sum) at ReduceGrads, and the loss.reduction term the last stage backpropagates.
pipeline::StepHooks Trainer::State::step_hooks(int64_t step) {
  pipeline::StepHooks hooks;
  hooks.before_op = [this, step](const char* where, int) {
    maybe_fail(parse_choice<FailWhere>(where, "stage op"), step);
  };
  if (cfg.train.precision == Precision::kBf16)
    hooks.after_backward = [this](int) { optimizer->accumulate_grads(); };
  hooks.reduce_grads = [this] {
    optimizer->reduce_grads();
    tied->sum_gradients(comms.pipeline(), optimizer->reduced_grad(TiedHead::kEmbeddingName));
  };
  const LossReduction reduction = cfg.loss.reduction;
  if (reduction != LossReduction::kToken)
    hooks.loss_term = [reduction](const models::UnitState& out) {
      return micro_batch_loss_term(out, reduction);
    };
  return hooks;
}

/// Collective: this rank's part of the step's metrics (the last stage the loss, the first stage
/// the samples, tokens and tiles of its packs, DP rank 0 of each stage its times, every stage
/// its forward + backward seconds into its DP rank's busy_s), summed over the world in one
/// all-reduce.
StepMetrics Trainer::State::gather_metrics(const pipeline::StageStepResult& r,
                                           const std::vector<models::PackBatch>& packs) {
  StepMetrics mine(stages, dp);
  const bool counts = tp_rank == 0;  // the TP ranks of a stage hold the same loss, packs, times
  if (counts && is_last_stage()) {
    mine.loss_term_sum = r.loss_term_sum;  // sum of w_t * l_t under loss.reduction
    for (const auto& [loss, count] : r.micro_batches) {
      mine.micro_batch_mean_loss_sum += count ? loss / count : 0.0;
      mine.micro_batches += 1;
    }
  }
  if (counts && stage_index == 0) {
    int64_t samples = 0, tokens = 0, tiles = 0;
    for (const auto& p : packs) {
      samples += p.num_samples();
      tokens += p.position_ids.numel();
      tiles += p.image_flags.numel();
    }
    mine.samples = static_cast<double>(samples);
    mine.tokens = static_cast<double>(tokens);
    mine.dp_ranks[dp_rank].tiles = static_cast<double>(tiles);
    mine.dp_ranks[dp_rank].tokens = static_cast<double>(tokens);
  }
  if (counts) mine.dp_ranks[dp_rank].busy_s = r.times.forward_s + r.times.backward_s;
  if (counts && dp_rank == 0)
    mine.stages[stage_index] = {r.times.forward_s, r.times.backward_s, r.times.idle_s,
                                r.times.reduce_s};
  torch::Tensor v = mine.pack();
  comms.world().all_reduce(v, comm::ReduceOp::kSum, "step metrics");
  return StepMetrics::unpack(v, stages, dp);
}

int64_t Trainer::State::param_hash() {
  int64_t sum = 0;
  if (dp_rank == 0)  // the digest of the whole tensor (gathered over TP), counted on TP rank 0
    for (const auto& [name, p] : params) {
      if (tied->not_written(name)) continue;
      const torch::Tensor full = tp_layout.gather(name, p.detach());
      if (tp_rank == 0) sum += param_digest(name, full);
    }
  return comms.world().all_reduce_int(sum, comm::ReduceOp::kSum, "parameter hash");
}

// Collective: whether the tied head's two copies are bitwise equal on every pipeline.
bool Trainer::State::tied_copies_equal() {
  const int64_t differ = tied->copies_equal(comms.pipeline()) ? 0 : 1;
  return comms.world().all_reduce_int(differ, comm::ReduceOp::kMax, "tied head check") == 0;
}

// Collective: whether every replicated parameter (whole on each TP rank) is bitwise the same on
// every rank of its TP group, on every stage and replica.
bool Trainer::State::tp_replicated_equal() {
  int64_t digest = 0;
  for (const auto& [name, p] : params)
    if (tp_replicated.count(name)) digest += param_digest(name, p);
  const int64_t differ =
      comm::same_on_every_rank(comms.tp_group(), static_cast<uint64_t>(digest), "TP replicas") ? 0
                                                                                               : 1;
  return comms.world().all_reduce_int(differ, comm::ReduceOp::kMax, "TP replica check") == 0;
}

void Trainer::State::save_checkpoint() {
  const DataPosition pos = data->position(counters.step);
  counters.epoch = pos.epoch;
  counters.step_in_epoch = pos.step_in_epoch;
  std::vector<std::string> skip;
  for (const auto& [name, p] : params)
    if (tied->not_written(name)) skip.push_back(name);
  checkpoints->save(counters, params, *optimizer, dp_rank == 0, config_yaml, skip, tp_layout);
  if (comms.rank() == 0)
    log_info("checkpoint: step {} in {}/checkpoints", counters.step, cfg.runtime.run_dir);
}

/// The stage's starting weights: the checkpoint's (parameters, AdamW moments, counters) on a
/// resume, otherwise the seeded initialisation and model.init_from.
void Trainer::State::restore(const ResumePoint& resume) {
  if (resume.resuming()) {
    make_optimizer();
    const uint64_t hash = counters.plan_hash;
    counters = checkpoints->load(resume.dir, params, *optimizer, tp_layout);
    counters.plan_hash = hash;
    counters.stage_plan = memory::stage_plan_json(plan);
    counters.model_architecture = preset_architecture_yaml(preset);
    if (comms.rank() == 0) {
      const nlohmann::json st = checkpoints->rank_state(resume.dir);
      const std::string written =
          st.contains("precision")
              ? st.at("precision").get<std::string>() + (st.value("zero1", false) ? ", zero1" : "")
              : std::string("fp32");
      log_info("resumed from {} at step {} (written in {}; continuing in {}{})", resume.dir,
               counters.step, written, choice_name(cfg.train.precision),
               cfg.train.zero1 ? ", zero1" : "");
    }
    if (!cfg.model.init_from.empty() && comms.rank() == 0)
      log_info("model.init_from {} ignored: resuming from checkpoint {}", cfg.model.init_from,
               resume.dir);
    return;
  }
  if (resume.request == "auto" && comms.rank() == 0)
    log_info("resume auto: no checkpoint under {}/checkpoints, starting afresh",
             cfg.runtime.run_dir);
  if (!tp.active()) {
    init_stage_weights(cfg.model, preset, units);
  } else if (!cfg.model.init_from.empty()) {
    // The checkpoint holds whole tensors: load them into an unsharded copy of this stage, then
    // keep this rank's shards (a transient second copy of the stage's weights).
    std::vector<models::UnitPtr> whole;
    for (auto& chunk : models::make_chunk_units(preset, model_options(), chunk_ranges))
      whole.insert(whole.end(), chunk.begin(), chunk.end());
    init_stage_weights(cfg.model, preset, whole);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < units.size(); ++i) {
      auto full = whole[i]->named_parameters();
      for (auto& np : units[i]->named_parameters()) {
        const std::string name = units[i]->unit_name() + "." + np.key();
        np.value().copy_(tp_layout.shard(name, full[np.key()].detach(), cfg.model.init_from));
      }
    }
  }
  make_optimizer();
  if (!cfg.model.init_from.empty()) {
    const std::string hash = param_hash_text();
    if (comms.rank() == 0)
      log_info("model.init_from {}: {} layout, parameter hash {}", cfg.model.init_from,
               choice_name(cfg.model.hf_style), hash);
  }
}

/// Rank 0's start-up lines: the grid, the stages, the data plan.
void Trainer::State::log_start() const {
  if (comms.rank() != 0) return;
  const auto& epoch0 = data->epoch_plan(0);
  log_info("{}", comms.grid().describe(comms.rank()));
  if (tp.active())
    log_info(
        "tensor parallel: tp {} (TP all-reduces over {}), vocabulary {} padded to {} "
        "({} rows per TP rank)",
        tp.size, comms.tp_group().name(), preset.llm.vocab_size,
        padded_vocab_size(preset.llm.vocab_size, tp.size),
        models::vocab_per_rank(preset.llm.vocab_size, tp.size));
  log_info("stages: {}", plan.describe_stages());
  log_info("schedule {}{} over {} stages, m {}{}", choice_name(plan.schedule),
           plan.virtual_stages > 1
               ? fmt::format(" (v {} model chunks per stage)", plan.virtual_stages)
               : std::string(),
           stages, m,
           cfg.parallel.schedule == PipelineSchedule::kAuto ? " (parallel.schedule auto)"
                                                            : std::string());
  log_info(
      "precision {} (gradient reduction {}), zero1 {}: optimizer state {:.1f} MiB, fp32 "
      "main gradient {:.1f} MiB on rank 0",
      choice_name(cfg.train.precision), choice_name(cfg.comm.grad_reduce_dtype), cfg.train.zero1,
      optimizer->state_bytes() / 1048576.0, optimizer->main_grad_bytes() / 1048576.0);
  const size_t left_out = epoch0.packing.skipped.size();
  log_info(
      "data: {} samples{}, balance.method {}, {} packs, {} steps per epoch of dp {} x m {} "
      "packs, budgets Q_v {} Q_t {}, plan hash {:016x}",
      data->set().table.size(),
      left_out ? fmt::format(" ({} planned; the packer leaves out {} over budget)",
                             data->set().table.size() - left_out, left_out)
               : std::string(),
      choice_name(cfg.balance.method), epoch0.packing.packs.size(), epoch0.plan.steps(), dp, m,
      epoch0.budgets.q_vit, epoch0.budgets.q_tok, counters.plan_hash);
  const balance::BalanceMetrics dealt = data->dealt_metrics(0, &time.model);
  log_info("data: epoch 0 dealt to dp {} x m {}: Dist ViT {:.4f}, LLM {:.4f} (counts)", dp, m,
           dealt.dist_ratio_vit, dealt.dist_ratio_llm);
  log_info("data: cost Dist (predicted, {}): ranks {:.4f}, micro-batches {:.4f}", time.description,
           dealt.cost_dist_ratio_dp, dealt.cost_dist_ratio_mb);
  if (data->set().bad_samples > 0)
    log_info("data: on_bad_sample skip: the start-up scan left out {} samples (not in the plan)",
             data->set().bad_samples);
}

Trainer::Trainer(const Config& config, comm::ParallelComms& comms,
                 std::shared_ptr<comm::ErrorForwarder> errors, const ResumePoint& resume)
    : s_(new State{config, comms, std::move(errors)}) {
  State& s = *s_;
  OMNIBAL_CHECK(config.model.hf_style != HfStyle::kAuto,
                "Trainer: model.hf_style is auto; the config must come from resolve_run_config "
                "(train/run_config.h)");
  s.stage_index = comms.coord().pp;
  s.stages = comms.grid().shape().pp;
  s.dp_rank = comms.coord().dp;
  s.dp = comms.grid().shape().dp;
  s.m = config.parallel.micro_batches;
  s.tp_rank = comms.coord().tp;
  s.device = run_device(config.runtime.device);  // fails early without the CUDA it asks for
  s.config_yaml = to_yaml(config);  // every auto resolved (export reads model.hf_style)
  s.preset = load_model_preset(config.model.preset);
  check_tensor_parallel(s.preset, comms.grid().shape().tp);
  s.tp = tensor_parallel_of(comms);
  OMNIBAL_CHECK(!config.data.meta.empty(), "data.meta: expected the training meta file");
  OMNIBAL_CHECK(!config.data.tokenizer.empty(), "data.tokenizer: expected a SentencePiece .model");
  s.tokenizer = std::make_unique<data::Tokenizer>(config.data.tokenizer);
  s.data = std::make_unique<TrainingData>(load_set(config.data.meta, config, s.preset, *s.tokenizer,
                                                   std::max(1, config.data.workers)),
                                          config, DataRank{s.dp_rank, s.stage_index, s.stages});
  s.check_plan_hash();
  s.checkpoints = std::make_unique<TrainCheckpoint>(config.runtime.run_dir + "/checkpoints",
                                                    config.train.keep_checkpoints, comms.world());
  s.counters.model_architecture = preset_architecture_yaml(s.preset);
  if (resume.resuming()) {  // checked before any start-up work
    const TrainCounters saved = TrainCounters::from_json(s.checkpoints->rank_state(resume.dir));
    refuse_architecture_change(resume.dir, saved, s.counters.model_architecture,
                               config.model.preset);
    refuse_data_plan_change(resume.dir, saved, s.counters.plan_hash, *resume.saved, config);
  }
  StartupPlanContext planning;
  planning.config = &config;
  planning.preset = &s.preset;
  planning.comms = &comms;
  planning.data = s.data.get();
  planning.img_context_id = s.tokenizer->special().img_context;
  planning.device = s.device;
  if (resume.resuming())
    planning.stored = stored_plan(s.checkpoints->rank_state(resume.dir), resume.dir);
  StartupPlan startup = plan_stages_at_startup(planning);
  s.plan = std::move(startup.plan);
  {
    const auto& epoch0 = s.data->epoch_plan(0).metrics;
    s.time = trainer_time_model(config, s.preset, startup.table ? &*startup.table : nullptr,
                                startup.table_origin, epoch0.max_tiles, epoch0.max_tokens);
  }
  s.counters.stage_plan = memory::stage_plan_json(s.plan);
  s.build_stage();
  if (!config.data.eval_meta.empty())
    s.evaluator =
        std::make_unique<Evaluator>(load_set(config.data.eval_meta, config, s.preset, *s.tokenizer,
                                             1, /*repeat=*/false),
                                    config.balance.samples_per_pack, s.preset.llm.max_seq_len);
  s.restore(resume);
  s.log = std::make_unique<RunLog>(config.runtime.run_dir, comms.rank() == 0, s.config_yaml,
                                   s.counters.step, config.train.steps, config.train.log_every);
  s.nonfinite =
      std::make_unique<NonFiniteGuard>(config.train.on_nonfinite, config.train.max_nonfinite_skips,
                                       config.train.steps, comms.grid());
  if (!config.runtime.trace_steps.empty())
    s.clock_offsets_us = measure_clock_offsets(comms.world());
  if (comms.rank() == 0) write_stage_plan_file(config.runtime.run_dir, s.plan);
  s.log_start();
}

Trainer::~Trainer() = default;

TrainOutcome Trainer::run() {
  State& s = *s_;
  TrainOutcome out;
  s.run_started = Clock::now();
  const int64_t first = s.counters.step;
  s.last_checkpoint = first;
  // A finished run relaunched: leave its files as they are (train.steps 0: finish() saves step-0).
  if (first >= s.cfg.train.steps && s.cfg.train.steps > 0) {
    if (s.comms.rank() == 0)
      log_info(
          "resumed at step {} = train.steps: nothing to train (raise train.steps to "
          "continue); summary.json and eval.jsonl left as they are",
          first);
    out.steps_done = first;
    return out;
  }
  for (int64_t step = first; step < s.cfg.train.steps; ++step) {
    if (auto why = stop_reason(step, first)) {
      out.stopped = true;
      out.stop_reason = *why;
      break;
    }
    out.final_loss = train_step(step);
    after_step(step);
  }
  finish(out, first);
  if (s.cfg.train.steps == 0 && s.comms.rank() == 0)
    log_info(
        "train.steps 0: saved the initial weights as step-0 in {}/checkpoints with "
        "summary.json, nothing trained (export them: omnibal-plan export --checkpoint DIR; "
        "train from them: raise train.steps, --resume auto)",
        s.cfg.runtime.run_dir);
  return out;
}

std::optional<std::string> Trainer::stop_reason(int64_t step, int64_t first) {
  State& s = *s_;
  if (comm::should_stop(s.comms.world())) return std::string("signal");
  // At least one step per launch, so a slot shorter than start-up still makes progress.
  return step > first ? s.exit_due(step - first) : std::nullopt;
}

double Trainer::train_step(int64_t step) {
  State& s = *s_;
  const Config& cfg = s.cfg;
  const auto t0 = Clock::now();
  s.maybe_fail(FailWhere::kStep, step);
  s.maybe_fail(FailWhere::kLoader, step);
  std::vector<models::PackBatch> packs = s.data->next_packs(step);
  for (size_t k = 0; k < packs.size(); ++k)  // dropout masks follow the pack, not the rank
    packs[k].dropout_key =
        models::dropout_key(cfg.train.seed, step, s.data->slot(s.dp_rank, static_cast<int>(k)));
  // N of the whole global batch, identical on every rank (loss_normaliser.h).
  const LossNormaliser n = global_normaliser(s.is_last_stage() && s.tp_rank == 0
                                                 ? local_normaliser(packs, cfg.loss.reduction)
                                                 : LossNormaliser{},
                                             s.comms.world());
  s.optimizer->zero_grad();
  pipeline::StepHooks hooks = s.step_hooks(step);
  const auto& traced = cfg.runtime.trace_steps;
  hooks.trace = std::find(traced.begin(), traced.end(), step) != traced.end();
  auto r = s.stage->run_step(s.programs[s.stage_index], packs,
                             n.normaliser > 0 ? 1.0 / n.normaliser : 0.0, hooks);
  const double optimizer_us = pipeline::trace_clock_us();
  const double norm =
      s.optimizer->grad_norm(s.stages > 1 ? &s.comms.pipeline() : nullptr, s.tied->norm_excluded(),
                             s.tp.active() ? &s.comms.tp_group() : nullptr, s.tp_replicated);
  const double lr = learning_rate(cfg.train, step);
  const bool apply =
      s.nonfinite->check(step,
                         {s.is_last_stage(), r.loss_term_sum, s.optimizer->local_grad_sq(), norm},
                         s.comms.world()) == StepVerdict::kApply;  // or throws
  if (apply) {
    s.optimizer->clip(norm, cfg.train.grad_clip);
    s.optimizer->step(lr);
  } else {
    s.optimizer->skip_step();
    ++s.counters.nonfinite_skipped_steps;
  }
  const double optimizer_end_us = pipeline::trace_clock_us();
  s.counters.step = step + 1;
  const double seconds = since(t0);
  const StepMetrics metrics = s.gather_metrics(r, packs);
  s.counters.samples += static_cast<int64_t>(metrics.samples);
  s.counters.tokens += static_cast<int64_t>(metrics.tokens);
  StepScalars scalars;
  scalars.step = step;
  scalars.lr = lr;
  scalars.grad_norm = norm;
  scalars.nonfinite_skipped = !apply;
  scalars.label_tokens = n.label_tokens;
  scalars.normaliser = n.normaliser;
  scalars.seconds = seconds;
  scalars.epoch = s.data->position(step).epoch;
  scalars.predicted = s.data->predicted_step(step, s.time.model);
  s.log->step(metrics_record(metrics, scalars));
  // After the step's metrics, so writing the trace does not count in its step_seconds.
  if (hooks.trace) {
    r.spans.push_back({"optimizer", -1, 0, optimizer_us, optimizer_end_us});
    RankTrace mine{s.dp_rank, s.stage_index, s.tp_rank, r.spans, {}};
    if (s.stage_index == 0) mine.loads = pack_loads(packs);
    const std::string path = fmt::format("{}/trace/step-{}.json", cfg.runtime.run_dir, step);
    write_step_trace(path, step, mine, s.clock_offsets_us, s.comms.world(),
                     {{"schedule", choice_name(s.plan.schedule)},
                      {"virtual_stages", s.plan.virtual_stages},
                      {"pp", s.stages},
                      {"dp", s.dp},
                      {"micro_batches", s.m},
                      {"partition", s.plan.partition.to_string()}});
    if (s.comms.rank() == 0) log_info("trace: step {} in {}", step, path);
  }
  return metrics.loss(n.normaliser);
}

void Trainer::after_step(int64_t step) {
  State& s = *s_;
  const TrainConfig& t = s.cfg.train;
  const bool last = step + 1 == t.steps;  // the end of the run evaluates and checkpoints anyway
  if (s.evaluator && t.eval_every > 0 && (step + 1) % t.eval_every == 0 && !last) {
    s.last_eval = s.evaluate();
    s.log->eval(step + 1, *s.last_eval);
  }
  if (t.checkpoint_every > 0 && (step + 1) % t.checkpoint_every == 0 && !last) {
    s.save_checkpoint();
    s.last_checkpoint = step + 1;
  }
}

void Trainer::finish(TrainOutcome& out, int64_t first) {
  State& s = *s_;
  s.data->stop_loading();
  const int64_t skipped =
      s.comms.world().all_reduce_int(s.tp_rank == 0 ? s.data->skipped_in_packs() : 0,
                                     comm::ReduceOp::kSum, "skipped-sample count");
  const int64_t scanned_out = s.data->set().bad_samples, packer = s.data->skipped_by_packer();
  if (s.comms.rank() == 0 && (skipped > 0 || scanned_out > 0 || packer > 0))
    log_info(
        "data: on_bad_sample skip left out {} samples at the start-up scan, {} in the "
        "packer over the epochs of this run and {} of the packs trained in this run",
        scanned_out, packer, skipped);
  if (s.counters.step != s.last_checkpoint || s.counters.step == 0) s.save_checkpoint();
  if (!out.stopped && s.evaluator) {
    s.last_eval = s.evaluate();
    s.log->eval(s.counters.step, *s.last_eval);
  }
  out.steps_done = s.counters.step;
  out.eval = s.last_eval;
  const double seconds = since(s.run_started);
  const int64_t run_steps = s.counters.step - first;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // ru_maxrss: KiB on Linux
  const int64_t peak_rss_kib = s.comms.world().all_reduce_int(static_cast<int64_t>(usage.ru_maxrss),
                                                              comm::ReduceOp::kMax, "peak RSS");
  const int64_t state_bytes = s.comms.world().all_reduce_int(s.optimizer->state_bytes(),
                                                             comm::ReduceOp::kMax, "state bytes");
  nlohmann::json summary = {{"steps", s.counters.step},
                            {"steps_this_run", run_steps},
                            {"seconds", seconds},
                            {"seconds_per_step", run_steps ? seconds / run_steps : 0.0},
                            {"final_loss", run_steps ? nlohmann::json(out.final_loss) : nullptr},
                            {"samples", s.counters.samples},
                            {"tokens", s.counters.tokens},
                            {"stopped", out.stopped},
                            {"stop_reason", out.stop_reason},
                            {"nonfinite_skipped_steps", s.counters.nonfinite_skipped_steps},
                            {"param_hash", s.param_hash_text()},
                            {"balance_method", choice_name(s.cfg.balance.method)},
                            {"precision", choice_name(s.cfg.train.precision)},
                            {"zero1", s.cfg.train.zero1},
                            {"tp", s.cfg.parallel.tp},
                            {"schedule", choice_name(s.plan.schedule)},
                            {"virtual_stages", s.plan.virtual_stages},
                            {"peak_rss_mib_max_rank", peak_rss_kib / 1024.0},
                            {"optimizer_state_mib_max_rank", state_bytes / 1048576.0},
                            {"partition", s.plan.partition.to_string()},
                            {"recomputed_per_stage", s.plan.recomputed_per_stage()},
                            {"skipped_samples",
                             {{"scan", scanned_out}, {"packer", packer}, {"training", skipped}}}};
  if (s.last_eval) summary["eval"] = eval_json(s.counters.step, *s.last_eval);
  if (s.tied->split()) summary["tied_head_copies_equal"] = s.tied_copies_equal();
  if (s.tp.active()) {
    summary["tp_replicated_equal"] = s.tp_replicated_equal();
    torch::Tensor t = torch::full({1}, tp_all_reduce_seconds(s.tp) - s.tp_eval_s, torch::kFloat64);
    s.comms.world().all_reduce(t, comm::ReduceOp::kMax, "TP all-reduce time");
    summary["tp_all_reduce_s_per_step_max_rank"] = run_steps ? t.item<double>() / run_steps : 0.0;
  }
  s.log->finish(summary);
}

}  // namespace omnibal::train
