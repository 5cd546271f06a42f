// RunSummary: summary.json, what a run did, written by rank 0 at the end of every launch
// (train/run_log.h). Fields are reduced over the ranks where they differ (the _max_rank ones).
#pragma once

#include <nlohmann/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/config.h"
#include "memory/stage_plan.h"

namespace omnibal::train {

struct ShardBytes;  // train/stage_optimizer.h

/// The end-of-run record; to_json() gives summary.json's object (keys as the field names, plus
/// seconds_per_step = seconds / steps_this_run, 0 when none ran).
struct RunSummary {
  int64_t steps = 0;                 ///< global steps completed, including those before a resume
  int64_t steps_this_run = 0;        ///< steps run by this launch
  double seconds = 0;                ///< wall time of this launch's loop (s)
  std::optional<double> final_loss;  ///< loss of the last step; none when no step ran
  int64_t samples = 0, tokens = 0;   ///< trained so far (all launches)
  bool stopped = false;              ///< ended early (TrainOutcome::stop_reason)
  std::string stop_reason;
  int64_t nonfinite_skipped_steps = 0;  ///< train.on_nonfinite skip (all launches)
  std::string param_hash;               ///< 48-bit digest of the parameters (hex)
  std::string balance_method, precision, schedule, partition;
  std::string shard;   ///< train.shard
  bool zero1 = false;  ///< train.shard optimizer (the key before train.shard)
  int tp = 1, virtual_stages = 1;
  double peak_rss_mib_max_rank = 0;         ///< ru_maxrss, MiB, largest rank
  double optimizer_state_mib_max_rank = 0;  ///< StageOptimizer::state_bytes, MiB
  double parameter_mib_max_rank = 0;        ///< ShardBytes::params between steps, MiB
  double gradient_mib_max_rank = 0;         ///< ShardBytes::grads, MiB
  std::vector<int> recomputed_per_stage;    ///< recomputed units of each stage
  int64_t skipped_scan = 0, skipped_packer = 0, skipped_training = 0;  ///< data.on_bad_sample
  std::optional<nlohmann::json> eval;              ///< the last evaluation (eval_json)
  std::optional<bool> tied_head_copies_equal;      ///< a tied head split over stages
  std::optional<bool> tp_replicated_equal;         ///< TP: replicated parameters agree
  std::optional<double> tp_all_reduce_s_per_step;  ///< TP all-reduce s/step, largest rank

  nlohmann::json to_json() const;
  /// Sets the layout fields (balance method, precision, zero1, tp, schedule, virtual stages,
  /// partition, recomputed units) from the resolved `config` and the stage `plan`.
  void describe_layout(const Config& config, const memory::StagePlan& plan);
  /// Collective over `world`: peak RSS and optimizer state (`state_bytes` of this rank), the
  /// largest over ranks.
  void measure_memory(comm::Communicator& world, const ShardBytes& state);
};

}  // namespace omnibal::train
