#include "train/train_checkpoint.h"

#include "checkpoint/checkpoint_store.h"
#include "core/error.h"
#include "core/log.h"

namespace omnibal::train {

nlohmann::json TrainCounters::to_json() const {
  nlohmann::json j = {{"step", step},
                      {"epoch", epoch},
                      {"step_in_epoch", step_in_epoch},
                      {"samples", samples},
                      {"tokens", tokens},
                      {"plan_hash", plan_hash},
                      {"stage_plan", stage_plan}};
  if (!model_architecture.empty()) j["model_architecture"] = model_architecture;
  if (!cost_table.is_null()) j["cost_table"] = cost_table;
  j["nonfinite_skipped_steps"] = nonfinite_skipped_steps;
  return j;
}

TrainCounters TrainCounters::from_json(const nlohmann::json& j) {
  TrainCounters c;
  c.step = j.at("step").get<int64_t>();
  c.epoch = j.at("epoch").get<int>();
  c.step_in_epoch = j.at("step_in_epoch").get<int64_t>();
  c.samples = j.at("samples").get<int64_t>();
  c.tokens = j.at("tokens").get<int64_t>();
  c.plan_hash = j.at("plan_hash").get<uint64_t>();
  if (j.contains("stage_plan")) c.stage_plan = j.at("stage_plan");
  if (j.contains("cost_table")) c.cost_table = j.at("cost_table");  // absent before 7 Dec 2026
  if (j.contains("model_architecture"))  // checkpoints before it: not recorded
    c.model_architecture = j.at("model_architecture").get<std::string>();
  c.nonfinite_skipped_steps = j.value("nonfinite_skipped_steps", int64_t{0});  // absent before
  return c;
}

struct TrainCheckpoint::Impl {
  checkpoint::CheckpointStore store;
};

TrainCheckpoint::TrainCheckpoint(std::string root, int keep_last, int every,
                                 comm::Communicator& world)
    : impl_(new Impl{checkpoint::CheckpointStore(std::move(root), keep_last, world)}),
      every_(every) {}

TrainCheckpoint::~TrainCheckpoint() = default;

void TrainCheckpoint::save(const TrainCounters& counters, const CheckpointedStage& stage,
                           const std::string& config_yaml) {
  const bool writer = stage.writer;
  const TpLayout& tp = stage.tp;
  StageOptimizer& optimizer = stage.optimizer;
  checkpoint::Shard shard;
  // Collective over DP under ZeRO-1; only the writer keeps the gathered state.
  auto state = optimizer.state_tensors(writer);
  if (writer) {
    // The TP ranks of a DP-rank-0 stage are writers together; the gathers below run in the
    // same (sorted) name order on each of them.
    for (auto& [name, t] : state) shard.tensors[name] = tp.gather(name, t);  // fp32 masters
    for (const auto& [name, p] : stage.params)  // frozen parameters (no master weight): as fp32
      if (!shard.tensors.count(name))
        shard.tensors[name] = tp.gather(name, p.detach().to(torch::kFloat32));
    for (const auto& name : stage.not_written)
      for (const char* suffix : {"", "#exp_avg", "#exp_avg_sq"}) shard.tensors.erase(name + suffix);
    if (tp.active() && tp.tp().rank != 0) shard.tensors.clear();  // TP rank 0 stores them
  }
  shard.state = counters.to_json();
  shard.state["optimizer_steps"] = optimizer.steps();
  shard.state["precision"] = choice_name(optimizer.options().precision);
  shard.state["zero1"] = optimizer.shard_mode() == ShardMode::kOptimizer;  // before "shard"
  shard.state["shard"] = choice_name(optimizer.shard_mode());
  shard.state["tp"] = tp.tp().size;
  impl_->store.save(counters.step, shard, config_yaml);
}

TrainCounters TrainCheckpoint::load(const std::string& dir, const CheckpointedStage& stage) const {
  const auto& params = stage.params;
  StageOptimizer& optimizer = stage.optimizer;
  const TpLayout& tp = stage.tp;
  std::vector<std::string> names;
  for (const auto& [name, p] : params) names.push_back(name);
  for (const auto& n : optimizer.state_names())
    if (n.find('#') != std::string::npos) names.push_back(n);  // the plain names are above
  auto tensors = impl_->store.load_tensors(dir, names);
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : tensors) t = tp.shard(name, t, dir);
  for (const auto& [name, p] : params) {
    const torch::Tensor& t = tensors.at(name);
    OMNIBAL_CHECK(t.sizes() == p.sizes(), dir, ": parameter '", name, "' has shape ", t.sizes(),
                  " in the checkpoint but ", p.sizes(), " in this model (another preset?)");
    if (optimizer.params_resident()) p.copy_(t);  // else the optimizer takes them below
  }
  optimizer.load_state_tensors(tensors);
  const auto states = impl_->store.load_states(dir);
  OMNIBAL_CHECK(!states.empty(), dir, ": the checkpoint has no rank state");
  optimizer.set_steps(states[0].at("optimizer_steps").get<int64_t>());
  return TrainCounters::from_json(states[0]);
}

}  // namespace omnibal::train
