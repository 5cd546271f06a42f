#include "train/run_summary.h"

#include <sys/resource.h>

#include "train/stage_optimizer.h"

namespace omnibal::train {

nlohmann::json RunSummary::to_json() const {
  nlohmann::json j = {
      {"steps", steps},
      {"steps_this_run", steps_this_run},
      {"seconds", seconds},
      {"seconds_per_step", steps_this_run ? seconds / steps_this_run : 0.0},
      {"final_loss", final_loss ? nlohmann::json(*final_loss) : nlohmann::json(nullptr)},
      {"samples", samples},
      {"tokens", tokens},
      {"stopped", stopped},
      {"stop_reason", stop_reason},
      {"nonfinite_skipped_steps", nonfinite_skipped_steps},
      {"param_hash", param_hash},
      {"balance_method", balance_method},
      {"precision", precision},
      {"shard", shard},
      {"zero1", zero1},
      {"tp", tp},
      {"schedule", schedule},
      {"virtual_stages", virtual_stages},
      {"peak_rss_mib_max_rank", peak_rss_mib_max_rank},
      {"optimizer_state_mib_max_rank", optimizer_state_mib_max_rank},
      {"parameter_mib_max_rank", parameter_mib_max_rank},
      {"gradient_mib_max_rank", gradient_mib_max_rank},
      {"partition", partition},
      {"recomputed_per_stage", recomputed_per_stage},
      {"skipped_samples",
       {{"scan", skipped_scan}, {"packer", skipped_packer}, {"training", skipped_training}}}};
  if (eval) j["eval"] = *eval;
  if (tied_head_copies_equal) j["tied_head_copies_equal"] = *tied_head_copies_equal;
  if (tp_replicated_equal) j["tp_replicated_equal"] = *tp_replicated_equal;
  if (tp_all_reduce_s_per_step) j["tp_all_reduce_s_per_step_max_rank"] = *tp_all_reduce_s_per_step;
  return j;
}

void RunSummary::describe_layout(const Config& config, const memory::StagePlan& plan) {
  balance_method = choice_name(config.balance.method);
  precision = choice_name(config.train.precision);
  shard = choice_name(config.train.shard);
  zero1 = config.train.zero1_on();
  tp = config.parallel.tp;
  schedule = choice_name(plan.schedule);
  virtual_stages = plan.virtual_stages;
  partition = plan.partition.to_string();
  recomputed_per_stage = plan.recomputed_per_stage();
}

void RunSummary::measure_memory(comm::Communicator& world, const ShardBytes& state) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // ru_maxrss: KiB on Linux
  peak_rss_mib_max_rank =
      world.all_reduce_int(usage.ru_maxrss, comm::ReduceOp::kMax, "peak RSS") / 1024.0;
  const auto mib = [&](int64_t bytes, const char* what) {
    return world.all_reduce_int(bytes, comm::ReduceOp::kMax, what) / 1048576.0;
  };
  optimizer_state_mib_max_rank = mib(state.optimizer, "state bytes");
  parameter_mib_max_rank = mib(state.params, "parameter bytes");
  gradient_mib_max_rank = mib(state.grads, "gradient bytes");
}

}  // namespace omnibal::train
