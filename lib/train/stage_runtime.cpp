#include "train/stage_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "comm/communicator.h"
#include "core/log.h"
#include "train/init_weights.h"

namespace omnibal::train {

namespace {

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

models::VlmOptions StageRuntime::model_options() const {
  models::VlmOptions opt;
  opt.with_img_context_id(setup.img_context_id)
      .with_seed(setup.config.train.seed)
      .with_dropout(setup.config.model.dropout)
      .with_dtype(precision_dtype(setup.config.train.precision))
      .with_device(setup.device);
  return opt;
}

StageRuntime::StageRuntime(const StageSetup& s)
    : setup(s), at(StageCoord::of(s.comms)), tp(tensor_parallel_of(s.comms)) {
  build_units();
  tied = std::make_unique<TiedHead>(s.preset, s.plan.partition, at.stage, params,
                                    s.plan.virtual_stages, schedule::chunk_layout(s.plan.schedule));
  // A tied head's copy on the head's stage answers to the embedding's name (tied_head.h): give
  // it the head's shard layout, so it is gathered and sharded like the embedding.
  if (tied->split() && !tp_layout.spec(TiedHead::kEmbeddingName).sharded())
    tp_layout.alias(TiedHead::kEmbeddingName, TiedHead::kHeadName);
  std::vector<std::string> names;
  for (const auto& [name, p] : params) names.push_back(name);
  tp_replicated = tp_layout.replicated_names(names);
  norm_scope.exclude = tied->norm_excluded();
  if (at.stages > 1) norm_scope.groups.push_back(&s.comms.pipeline());
  if (tp.active()) {
    norm_scope.groups.push_back(&s.comms.tp_group());
    if (at.tp_rank != 0) norm_scope.exclude.insert(tp_replicated.begin(), tp_replicated.end());
  }
  programs = schedule::build_schedule(s.plan.schedule, at.stages, s.config.parallel.micro_batches,
                                      s.plan.virtual_stages);
}

void StageRuntime::plan_step_programs(const partition::UnitCostTable* table, TrainingData& data) {
  step_programs = std::make_unique<StepPrograms>(setup.config, setup.plan, table, data, at.dp_rank,
                                                 setup.comms.rank() == 0);
}

const std::vector<schedule::Instruction>& StageRuntime::program(int64_t step) {
  return (step_programs ? step_programs->at(step) : programs)[at.stage];
}

/// The stage's units chunk after chunk, their recompute flags and frozen groups, the executor.
void StageRuntime::build_units() {
  const memory::StagePlan& plan = setup.plan;
  const schedule::ChunkLayout layout = schedule::chunk_layout(plan.schedule);  // ZB-V: a V
  for (int c = 0; c < plan.virtual_stages; ++c) {
    const int k = schedule::virtual_stage(c, at.stage, at.stages, layout);
    chunk_ranges.emplace_back(plan.begin(k), plan.end(k));
  }
  at.loss_stage =
      schedule::stage_of_virtual(at.stages * plan.virtual_stages - 1, at.stages, layout);
  std::vector<int> unit_index;  // chain index of each unit of this stage
  for (const auto& [begin, end] : chunk_ranges)
    for (int64_t k = begin; k < end; ++k) unit_index.push_back(static_cast<int>(k));
  // Each unit's recompute flag and frozen group as it is built; under ZeRO-3 it is then sharded
  // at once, so the stage is never whole on this rank (FullShard::add_unit).
  const auto& freeze = setup.config.train.freeze;
  if (setup.config.train.shard == ShardMode::kFull)
    sharded = std::make_unique<FullShard>(optimizer_options(), &setup.comms.dp_group(),
                                          DpShard{at.dp_rank, at.dp});
  const auto configure = [&](const models::UnitPtr& u) {
    u->set_recompute(plan.recompute[unit_index[units.size()]]);
    const bool frozen =
        std::find(freeze.begin(), freeze.end(), freeze_group(u->kind())) != freeze.end();
    for (auto& np : u->named_parameters()) {
      np.value().requires_grad_(!frozen);
      params.emplace_back(u->unit_name() + "." + np.key(), np.value());
    }
    if (sharded) sharded->add_unit(u);
    units.push_back(u);
  };
  const auto chunks =
      models::make_chunk_units(setup.preset, model_options().with_tensor_parallel(tp), chunk_ranges,
                               configure);
  tp_layout = TpLayout(units, tp);
  if (at.stages > 1) pipe = std::make_unique<comm::TensorMessenger>(setup.comms.pipeline());
  executor = std::make_unique<pipeline::StageExecutor>(chunks, at.stage, at.stages, pipe.get(),
                                                       setup.device, layout);
}

/// What the stage's optimizer is configured with (train.*, comm.*, the chunks of each parameter).
OptimizerOptions StageRuntime::optimizer_options() const {
  const Config& cfg = setup.config;
  OptimizerOptions o;
  o.adam.beta1 = cfg.train.beta1;
  o.adam.beta2 = cfg.train.beta2;
  o.adam.weight_decay = cfg.train.weight_decay;
  o.precision = cfg.train.precision;
  o.reduce_dtype = cfg.comm.grad_reduce_dtype;
  o.zero1 = cfg.train.zero1_on();
  if (tied && tied->active()) o.own_bucket = {TiedHead::kEmbeddingName};
  o.overlap = cfg.comm.overlap;
  o.chunks = static_cast<int>(chunk_ranges.size());
  std::map<const void*, int> chunk_of;  // by tensor: the tied head's copy is renamed
  for (size_t c = 0, u = 0; c < chunk_ranges.size() && !units.empty(); ++c)
    for (int64_t k = chunk_ranges[c].first; k < chunk_ranges[c].second; ++k, ++u)
      for (const auto& p : units[u]->parameters())
        chunk_of.emplace(p.unsafeGetTensorImpl(), static_cast<int>(c));
  for (const auto& [name, p] : params)
    if (chunk_of.count(p.unsafeGetTensorImpl()))
      o.chunk_of[name] = chunk_of[p.unsafeGetTensorImpl()];
  // A head tied on this stage reaches the embedding again (in its own chunk at P 1 with v > 1).
  // (build_units asks before the tied head exists: FullShard reads neither.)
  if (setup.preset.llm.tie_embeddings && tied && !tied->split())
    o.late = {TiedHead::kEmbeddingName};
  return o;
}

/// The optimizer over this stage's trainable parameters as they are now (it takes the current
/// values as master weights): after the initialisation, before a checkpoint is loaded. Under
/// ZeRO-3 the FullShard build_units() filled.
void StageRuntime::make_optimizer() {
  if (sharded) {  // (the start-up planner refused a plan whose schedule defers W)
    sharded->attach();
    full = sharded.get();
    optimizer = std::move(sharded);
    return;
  }
  auto d =
      std::make_unique<DistributedOptimizer>(params, optimizer_options(), &setup.comms.dp_group(),
                                             DpShard{at.dp_rank, at.dp});
  dist = d.get();
  optimizer = std::move(d);
}

CheckpointedStage StageRuntime::checkpointed() {
  optimizer->wait_params();
  CheckpointedStage c{params, *optimizer, tp_layout, at.dp_rank == 0, {}};
  for (const auto& [name, p] : params)
    if (tied->not_written(name)) c.not_written.push_back(name);
  return c;
}

std::optional<TrainCounters> StageRuntime::restore(const ResumePoint& resume,
                                                   TrainCheckpoint& checkpoints) {
  const Config& cfg = setup.config;
  const bool rank0 = setup.comms.rank() == 0;
  if (resume.resuming()) {
    make_optimizer();
    TrainCounters counters = checkpoints.load(resume.dir, checkpointed());
    if (rank0) {
      const nlohmann::json& st = resume.state;
      const std::string written =
          st.value("precision", std::string("fp32")) + ", shard " +
          st.value("shard", std::string(st.value("zero1", false) ? "optimizer" : "none"));
      log_info("resumed from {} at step {} (written in {}; continuing in {}, shard {})", resume.dir,
               counters.step, written, choice_name(cfg.train.precision),
               choice_name(cfg.train.shard));
      if (!cfg.model.init_from.empty())
        log_info("model.init_from {} ignored: resuming from checkpoint {}", cfg.model.init_from,
                 resume.dir);
    }
    return counters;
  }
  if (resume.request == "auto" && rank0)
    log_info("resume auto: no checkpoint under {}/checkpoints, starting afresh",
             cfg.runtime.run_dir);
  init_weights();
  make_optimizer();
  if (!cfg.model.init_from.empty()) {
    const std::string hash = param_hash_text();
    if (rank0)
      log_info("model.init_from {}: {} layout, parameter hash {}", cfg.model.init_from,
               choice_name(cfg.model.hf_style), hash);
  }
  return std::nullopt;
}

/// The seeded initialisation and model.init_from. The checkpoint init_from names holds whole
/// tensors: under TP they are loaded into an unsharded copy of this stage and each rank keeps
/// its shards (a transient second copy of the stage's weights; under ZeRO-3 of one unit).
void StageRuntime::init_weights() {
  const Config& cfg = setup.config;
  if (sharded) {
    if (!cfg.model.init_from.empty()) init_sharded_from();
    return;
  }
  if (!tp.active()) {
    init_stage_weights(cfg.model, setup.preset, units);
    return;
  }
  if (cfg.model.init_from.empty()) return;
  std::vector<models::UnitPtr> whole;
  for (auto& chunk : models::make_chunk_units(setup.preset, model_options(), chunk_ranges))
    whole.insert(whole.end(), chunk.begin(), chunk.end());
  init_stage_weights(cfg.model, setup.preset, whole);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < units.size(); ++i) {
    auto full = whole[i]->named_parameters();
    for (auto& np : units[i]->named_parameters()) {
      const std::string name = units[i]->unit_name() + "." + np.key();
      np.value().copy_(tp_layout.shard(name, full[np.key()].detach(), cfg.model.init_from));
    }
  }
}

/// ZeRO-3's model.init_from, one unit at a time: gathered, loaded (under TP through a whole copy
/// of that unit), its values taken into the shards, released. Collective over DP.
void StageRuntime::init_sharded_from() {
  const Config& cfg = setup.config;
  torch::NoGradGuard no_grad;
  size_t i = 0;
  for (const auto& [begin, end] : chunk_ranges)
    for (int64_t k = begin; k < end; ++k, ++i) {
      const models::UnitPtr& u = units[i];
      sharded->before_forward(*u);
      if (!tp.active()) {
        init_stage_weights(cfg.model, setup.preset, {u});
      } else {
        const auto whole = models::make_units(setup.preset, model_options(), k, k + 1);
        init_stage_weights(cfg.model, setup.preset, whole);
        auto values = whole.front()->named_parameters();
        for (auto& np : u->named_parameters()) {
          const std::string name = u->unit_name() + "." + np.key();
          np.value().copy_(tp_layout.shard(name, values[np.key()].detach(), cfg.model.init_from));
        }
      }
      sharded->store_gathered(*u);
      sharded->release_unit(*u);
    }
}

void StageRuntime::finalize_grads() {
  if (full != nullptr) return;  // reduce-scattered unit by unit in the backward; PP 1: no tied copy
  dist->reduce_grads();
  tied->sum_gradients(setup.comms.pipeline(), dist->reduced_grad(TiedHead::kEmbeddingName));
}

void StageRuntime::add_gradient_hooks(pipeline::StepHooks& hooks) {
  if (full != nullptr) {
    FullShard* f = full;
    hooks.after_backward = [f](int) { f->end_backward(); };
    return;
  }
  DistributedOptimizer* opt = dist;
  if (setup.config.train.precision == Precision::kBf16)
    hooks.after_backward = [opt](int) { opt->accumulate_grads(); };
  hooks.reduce_grads = [this] { finalize_grads(); };
  if (!opt->overlaps()) return;
  hooks.final_grads = [opt](const pipeline::FinalGrads& at) {
    if (at.begin) opt->begin_final_grads(at.chunk);
    else opt->end_final_grads(at.chunk, at.chunk_done);
    std::vector<pipeline::CommInterval> out;
    for (const auto& l : opt->take_launches()) out.push_back({l.start_us, l.end_us});
    return out;
  };
  if (opt->options().zero1)
    hooks.before_chunk_forward = [opt](int chunk) { opt->wait_params(chunk); };
}

void StageRuntime::for_each_param(
    const std::function<void(const std::string&, const torch::Tensor&)>& fn) {
  optimizer->wait_params();
  if (full == nullptr) {
    for (const auto& [name, p] : params) fn(name, p);
    return;
  }
  for (const auto& u : units) {  // params is unit after unit (build_units)
    full->before_forward(*u);
    for (const auto& np : u->named_parameters()) fn(u->unit_name() + "." + np.key(), np.value());
    full->release_unit(*u);
  }
}

std::string StageRuntime::param_hash_text() {
  int64_t sum = 0;
  // The digest of the whole tensor (gathered over TP), counted on TP rank 0 of DP rank 0.
  for_each_param([&](const std::string& name, const torch::Tensor& p) {
    if (tied->not_written(name)) return;
    const torch::Tensor whole = tp_layout.gather(name, p.detach());
    if (at.tp_rank == 0 && at.dp_rank == 0) sum += param_digest(name, whole);
  });
  const int64_t hash =
      setup.comms.world().all_reduce_int(sum, comm::ReduceOp::kSum, "parameter hash");
  return fmt::format("{:08x}", static_cast<uint64_t>(hash) & 0xffffffffffffULL);
}

bool StageRuntime::tied_copies_equal() {
  optimizer->wait_params();
  const int64_t differ = tied->copies_equal(setup.comms.pipeline()) ? 0 : 1;
  return setup.comms.world().all_reduce_int(differ, comm::ReduceOp::kMax, "tied head check") == 0;
}

bool StageRuntime::tp_replicated_equal() {
  int64_t digest = 0;
  for_each_param([&](const std::string& name, const torch::Tensor& p) {
    if (tp_replicated.count(name)) digest += param_digest(name, p);
  });
  const bool same = comm::same_on_every_rank(setup.comms.tp_group(), static_cast<uint64_t>(digest),
                                             "TP replicas");
  return setup.comms.world().all_reduce_int(same ? 0 : 1, comm::ReduceOp::kMax,
                                            "TP replica check") == 0;
}

ShardBytes StageRuntime::resident_bytes() const {
  if (full != nullptr) return full->resident_bytes();
  ShardBytes b;
  for (const auto& [name, p] : params) b.params += static_cast<int64_t>(p.nbytes());
  b.grads = dist->main_grad_bytes();
  b.optimizer = dist->state_bytes();
  return b;
}

void StageRuntime::log_layout() const {
  const Config& cfg = setup.config;
  const memory::StagePlan& plan = setup.plan;
  const int64_t vocab = setup.preset.llm.vocab_size;
  if (tp.active())
    log_info(
        "tensor parallel: tp {} (TP all-reduces over {}), vocabulary {} padded to {} "
        "({} rows per TP rank)",
        tp.size, setup.comms.tp_group().name(), vocab, padded_vocab_size(vocab, tp.size),
        models::vocab_per_rank(vocab, tp.size));
  log_info("stages: {}", plan.describe_stages());
  log_info("schedule {}{} over {} stages, m {}{}", choice_name(plan.schedule),
           plan.virtual_stages > 1
               ? fmt::format(" (v {} model chunks per stage)", plan.virtual_stages)
               : std::string(),
           at.stages, cfg.parallel.micro_batches,
           cfg.parallel.schedule == PipelineSchedule::kAuto ? " (parallel.schedule auto)" : "");
  log_info(
      "precision {} (gradient reduction {}), shard {}: optimizer state {:.1f} MiB, fp32 "
      "main gradient {:.1f} MiB on rank 0",
      choice_name(cfg.train.precision), choice_name(cfg.comm.grad_reduce_dtype),
      choice_name(cfg.train.shard), optimizer->state_bytes() / 1048576.0,
      optimizer->main_grad_bytes() / 1048576.0);
}

}  // namespace omnibal::train
