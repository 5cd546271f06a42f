#include "train/trainer.h"

#include <fmt/format.h>

#include <chrono>

#include "core/error.h"
#include "core/log.h"
#include "train/loss_normaliser.h"
#include "train/lr_schedule.h"
#include "train/nonfinite_guard.h"
#include "train/pack_time_source.h"
#include "train/run_device.h"
#include "train/run_log.h"
#include "train/run_stop.h"
#include "train/run_summary.h"
#include "train/stage_runtime.h"
#include "train/startup_planner.h"
#include "train/step_metrics.h"
#include "train/step_trace.h"
#include "train/train_checkpoint.h"

namespace omnibal::train {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

struct Trainer::State {
  State(const Config& c, comm::ParallelComms& m, std::shared_ptr<comm::ErrorForwarder> e,
        RunInputs i)
      : cfg(c), comms(m), errors(std::move(e)), in(std::move(i)), config_yaml(to_yaml(c)) {}
  const Config cfg;  ///< resolved (run_config.h); never changed
  comm::ParallelComms& comms;
  std::shared_ptr<comm::ErrorForwarder> errors;
  RunInputs in;             ///< preset, tokenizer, training data, evaluator
  std::string config_yaml;  ///< cfg as written to the run directory and every checkpoint (every
                            ///< auto resolved: export reads model.hf_style)
  memory::StagePlan plan;   ///< split + recompute flags + schedule (startup_planner.h)
  TrainerTimeModel time;    ///< predicted pack seconds (pack_time_source.h)
  std::unique_ptr<StageRuntime> stage;
  // What the loop drives besides the stage.
  std::unique_ptr<TrainCheckpoint> checkpoints;
  std::unique_ptr<RunLog> log;
  std::unique_ptr<NonFiniteGuard> nonfinite;  ///< train.on_nonfinite (nonfinite_guard.h)
  std::unique_ptr<StepTracer> tracer;         ///< runtime.trace_steps
  RunStop stop{cfg.train, comms.world(), in.started};
  FaultInjector faults{cfg.debug.fail_at, comms.rank(), errors};  ///< debug.fail_at
  // Progress.
  TrainCounters counters;
  int64_t last_checkpoint = 0;    ///< step of the newest checkpoint of this run (or its start)
  Clock::time_point run_started;  ///< run() began (summary.json's seconds)
  std::optional<EvalResult> last_eval;
  double tp_eval_s = 0;  ///< TP all-reduce seconds spent in evaluation

  const StageCoord& at() const { return stage->at; }
  bool rank0() const { return comms.rank() == 0; }
  void plan_and_build(const ResumePoint& resume);
  std::vector<models::PackBatch> next_packs(int64_t step);
  pipeline::StepHooks step_hooks(int64_t step);
  StepScalars update(int64_t step, const pipeline::StageStepResult& r);
  void write_trace(int64_t step, pipeline::StageStepResult& r,
                   const std::vector<models::PackBatch>& packs);
  void evaluate(int64_t step);
  void save_checkpoint();
  void report_skipped(RunSummary& r);
  void summarize(RunSummary& r, const TrainOutcome& out, int64_t first);
  void log_start() const;
};

/// The start-up plan (on a resume the checkpoint's, where it fits), this rank's stage on it and
/// the stage's starting weights.
void Trainer::State::plan_and_build(const ResumePoint& resume) {
  StartupPlanContext planning;
  planning.config = &cfg;
  planning.preset = &in.preset;
  planning.comms = &comms;
  planning.data = in.data.get();
  planning.img_context_id = in.tokenizer->special().img_context;
  const torch::Device device = run_device(cfg.runtime.device);
  planning.device = device;
  if (resume.resuming()) planning.stored = stored_plan(resume.state, resume.dir);
  StartupPlan startup = plan_stages_at_startup(planning);
  plan = std::move(startup.plan);
  const auto& epoch0 = in.data->epoch_plan(0).metrics;
  time = trainer_time_model(cfg, in.preset, startup.table ? &*startup.table : nullptr,
                            startup.table_origin, epoch0.max_tiles, epoch0.max_tokens);
  stage = std::make_unique<StageRuntime>(
      StageSetup{cfg, in.preset, plan, comms, device, planning.img_context_id});
  stage->plan_step_programs(startup.table ? &*startup.table : nullptr, *in.data);
  if (auto loaded = stage->restore(resume, *checkpoints)) counters = *loaded;
  counters.plan_hash = in.plan_hash();
  counters.stage_plan = memory::stage_plan_json(plan);
  counters.cost_table = startup.table_json();
  counters.model_architecture = in.architecture_yaml;
}

/// This rank's m packs of `step`; dropout masks follow the pack's slot, not the rank.
std::vector<models::PackBatch> Trainer::State::next_packs(int64_t step) {
  std::vector<models::PackBatch> packs = in.data->next_packs(step);
  for (size_t k = 0; k < packs.size(); ++k)
    packs[k].dropout_key =
        models::dropout_key(cfg.train.seed, step, in.data->slot(at().dp_rank, static_cast<int>(k)));
  return packs;
}

/// The executor's hooks for `step`: injected failures, the optimizer's (bf16 fold, finalize_grads
/// at ReduceGrads, comm.overlap's bucket launches), the loss.reduction term of the last stage and
/// runtime.sync_timers' device wait.
pipeline::StepHooks Trainer::State::step_hooks(int64_t step) {
  pipeline::StepHooks hooks;
  hooks.before_op = [this, step](FailWhere where, int) { faults.maybe_fail(where, step); };
  stage->add_gradient_hooks(hooks);
  const LossReduction reduction = cfg.loss.reduction;
  if (reduction != LossReduction::kToken)
    hooks.loss_term = [reduction](const models::UnitState& out) {
      return micro_batch_loss_term(out, reduction);
    };
  hooks.trace = tracer->traced(step);
  if (cfg.runtime.sync_timers) hooks.settle = timer_sync(stage->setup.device);
  return hooks;
}

/// Collective: the gradient norm, train.on_nonfinite's verdict (or its throw), then clipping and
/// AdamW at the step's learning rate, or a skipped step. Returns the step's scalars so far.
StepScalars Trainer::State::update(int64_t step, const pipeline::StageStepResult& r) {
  StageOptimizer& opt = *stage->optimizer;
  StepScalars u;
  u.step = step;
  u.grad_norm = stage->grad_norm();
  u.lr = learning_rate(cfg.train, step);
  const StepObservation seen{at().last(), r.loss_term_sum, opt.local_grad_sq(), u.grad_norm};
  u.nonfinite_skipped = nonfinite->check(step, seen, comms.world()) == StepVerdict::kSkip;
  if (u.nonfinite_skipped) {
    opt.skip_step();
    ++counters.nonfinite_skipped_steps;
  } else {
    opt.clip(u.grad_norm, cfg.train.grad_clip);
    opt.step(u.lr);
  }
  return u;
}

/// Collective: the timeline of a traced step (after the step's metrics, so writing it does not
/// count in its step_seconds).
void Trainer::State::write_trace(int64_t step, pipeline::StageStepResult& r,
                                 const std::vector<models::PackBatch>& packs) {
  RankTrace mine{at().dp_rank, at().stage, at().tp_rank, r.spans, {}};
  if (at().first()) mine.loads = pack_loads(packs);
  tracer->write(step, mine,
                {{"schedule", choice_name(plan.schedule)},
                 {"virtual_stages", plan.virtual_stages},
                 {"pp", at().stages},
                 {"dp", at().dp},
                 {"micro_batches", cfg.parallel.micro_batches},
                 {"partition", plan.partition.to_string()}});
}

/// Collective: evaluates after `step` steps and logs it; the evaluator's TP all-reduce seconds
/// are kept apart from the training steps'.
void Trainer::State::evaluate(int64_t step) {
  const double before = tp_all_reduce_seconds(stage->tp);
  stage->optimizer->wait_params();  // ZeRO-1's overlapped all-gather of the last step
  last_eval = in.evaluator->run(*stage->executor, comms, /*lockstep=*/stage->full != nullptr);
  tp_eval_s += tp_all_reduce_seconds(stage->tp) - before;
  log->eval(step, *last_eval);
}

void Trainer::State::save_checkpoint() {
  const DataPosition pos = in.data->position(counters.step);
  counters.epoch = pos.epoch;
  counters.step_in_epoch = pos.step_in_epoch;
  checkpoints->save(counters, stage->checkpointed(), config_yaml);
  last_checkpoint = counters.step;
  if (rank0())
    log_info("checkpoint: step {} in {}/checkpoints", counters.step, cfg.runtime.run_dir);
}

/// Rank 0's start-up lines: the grid, the stage layout, the data plan.
void Trainer::State::log_start() const {
  if (!rank0()) return;
  log_info("{}", comms.grid().describe(comms.rank()));
  stage->log_layout();
  in.data->log_plan(cfg.balance.method, at().dp, time.model, time.description);
}

Trainer::Trainer(const Config& config, comm::ParallelComms& comms,
                 std::shared_ptr<comm::ErrorForwarder> errors, const ResumePoint& resume,
                 RunInputs inputs)
    : s_(new State(config, comms, std::move(errors), std::move(inputs))) {
  State& s = *s_;
  OMNIBAL_CHECK(config.model.hf_style != HfStyle::kAuto,
                "Trainer: model.hf_style is auto; the config must come from resolve_run_config "
                "(train/run_config.h)");
  const TrainConfig& t = config.train;
  s.checkpoints =
      std::make_unique<TrainCheckpoint>(config.runtime.run_dir + "/checkpoints", t.keep_checkpoints,
                                        t.checkpoint_every, comms.world());
  s.plan_and_build(resume);
  s.log = std::make_unique<RunLog>(config.runtime.run_dir, s.rank0(), s.config_yaml,
                                   s.counters.step, t.steps, t.log_every);
  s.nonfinite = std::make_unique<NonFiniteGuard>(t.on_nonfinite, t.max_nonfinite_skips, t.steps,
                                                 comms.grid());
  s.tracer = std::make_unique<StepTracer>(config.runtime.trace_steps, config.runtime.run_dir,
                                          comms.world());
  if (s.rank0()) write_stage_plan_file(config.runtime.run_dir, s.plan, s.counters.cost_table);
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
    if (s.rank0())
      log_info(
          "resumed at step {} = train.steps: nothing to train (raise train.steps to "
          "continue); summary.json and eval.jsonl left as they are",
          first);
    out.steps_done = first;
    return out;
  }
  for (int64_t step = first; step < s.cfg.train.steps; ++step) {
    if (auto why = s.stop.at_boundary(step, first)) {
      out.stopped = true;
      out.stop_reason = *why;
      break;
    }
    out.final_loss = train_step(step);
    after_step(step);
  }
  finish(out, first);
  if (s.cfg.train.steps == 0 && s.rank0())
    log_info(
        "train.steps 0: saved the initial weights as step-0 in {}/checkpoints with "
        "summary.json, nothing trained (export them: omnibal-plan export --checkpoint DIR; "
        "train from them: raise train.steps, --resume auto)",
        s.cfg.runtime.run_dir);
  return out;
}

double Trainer::train_step(int64_t step) {
  State& s = *s_;
  const auto t0 = Clock::now();
  s.faults.maybe_fail(FailWhere::kStep, step);
  s.faults.maybe_fail(FailWhere::kLoader, step);
  const std::vector<models::PackBatch> packs = s.next_packs(step);
  // N of the whole global batch, identical on every rank (loss_normaliser.h).
  const bool counts_labels = s.at().last() && s.at().tp_rank == 0;
  const LossNormaliser n =
      global_normaliser(counts_labels ? local_normaliser(packs, s.cfg.loss.reduction)
                                      : LossNormaliser{},
                        s.comms.world());
  s.stage->optimizer->zero_grad();
  const pipeline::StepHooks hooks = s.step_hooks(step);
  auto r = s.stage->executor->run_step(s.stage->program(step), packs,
                                       n.normaliser > 0 ? 1.0 / n.normaliser : 0.0, hooks);
  const double optimizer_us = pipeline::trace_clock_us();
  StepScalars scalars = s.update(step, r);
  if (hooks.trace)
    r.spans.push_back({"optimizer", -1, 0, optimizer_us, pipeline::trace_clock_us()});
  s.counters.step = step + 1;
  scalars.seconds = since(t0);
  const StepMetrics metrics = gather_step_metrics(r, packs, s.at(), s.comms.world());
  s.counters.samples += static_cast<int64_t>(metrics.samples);
  s.counters.tokens += static_cast<int64_t>(metrics.tokens);
  scalars.label_tokens = n.label_tokens;
  scalars.normaliser = n.normaliser;
  scalars.epoch = s.in.data->position(step).epoch;
  scalars.predicted = s.in.data->predicted_step(step, s.time.model);
  s.log->step(metrics_record(metrics, scalars));
  if (hooks.trace) s.write_trace(step, r, packs);
  return metrics.loss(n.normaliser);
}

void Trainer::after_step(int64_t step) {
  State& s = *s_;
  const int64_t done = step + 1;
  if (done == s.cfg.train.steps) return;  // the end of the run evaluates and checkpoints anyway
  if (s.in.evaluator && s.in.evaluator->due(done)) s.evaluate(done);
  if (s.checkpoints->due(done)) s.save_checkpoint();
}

void Trainer::finish(TrainOutcome& out, int64_t first) {
  State& s = *s_;
  s.in.data->stop_loading();
  RunSummary summary;
  s.report_skipped(summary);
  if (s.counters.step != s.last_checkpoint || s.counters.step == 0) s.save_checkpoint();
  if (!out.stopped && s.in.evaluator) s.evaluate(s.counters.step);
  out.steps_done = s.counters.step;
  out.eval = s.last_eval;
  s.summarize(summary, out, first);
  s.log->finish(summary.to_json());
}

/// Collective: the samples left out under data.on_bad_sample (rank 0 logs them).
void Trainer::State::report_skipped(RunSummary& r) {
  r.skipped_training =
      comms.world().all_reduce_int(at().tp_rank == 0 ? in.data->skipped_in_packs() : 0,
                                   comm::ReduceOp::kSum, "skipped-sample count");
  r.skipped_scan = in.data->set().bad_samples;
  r.skipped_packer = in.data->skipped_by_packer();
  if (rank0() && (r.skipped_training > 0 || r.skipped_scan > 0 || r.skipped_packer > 0))
    log_info(
        "data: on_bad_sample skip left out {} samples at the start-up scan, {} in the "
        "packer over the epochs of this run and {} of the packs trained in this run",
        r.skipped_scan, r.skipped_packer, r.skipped_training);
}

/// Collective: summary.json's record `r` completed (report_skipped filled its skips).
void Trainer::State::summarize(RunSummary& r, const TrainOutcome& out, int64_t first) {
  comm::Communicator& world = comms.world();
  r.steps = counters.step;
  r.steps_this_run = counters.step - first;
  r.seconds = since(run_started);
  if (r.steps_this_run) r.final_loss = out.final_loss;
  r.samples = counters.samples;
  r.tokens = counters.tokens;
  r.stopped = out.stopped;
  r.stop_reason = out.stop_reason;
  r.nonfinite_skipped_steps = counters.nonfinite_skipped_steps;
  r.param_hash = stage->param_hash_text();
  r.describe_layout(cfg, plan);
  r.measure_memory(world, stage->resident_bytes());
  if (last_eval) r.eval = eval_json(counters.step, *last_eval);
  if (stage->tied->split()) r.tied_head_copies_equal = stage->tied_copies_equal();
  if (stage->tp.active()) {
    r.tp_replicated_equal = stage->tp_replicated_equal();
    torch::Tensor t =
        torch::full({1}, tp_all_reduce_seconds(stage->tp) - tp_eval_s, torch::kFloat64);
    world.all_reduce(t, comm::ReduceOp::kMax, "TP all-reduce time");
    r.tp_all_reduce_s_per_step = r.steps_this_run ? t.item<double>() / r.steps_this_run : 0.0;
  }
}

}  // namespace omnibal::train
