// What omnibal-train settles once, in main, before it builds anything: the checkpoint a launch
// continues from (find_resume_point: `--resume auto | PATH`, or a fresh start, which must not
// overwrite an earlier run's checkpoints) and the run config with every `auto` resolved
// (resolve_run_config). The trainer takes that resolved config as `const Config&` and never
// changes it; it is what config.yaml in the run directory and every checkpoint hold, so
// `omnibal-plan export` reads the settled model.hf_style from it.
// Not resolved here: values that need the job's processes or devices — runtime.threads 0
// (threads per rank, comm/thread_setup.h, from the ranks on the node) and memory.budget_gb 0
// (device or physical memory, the smallest over ranks, train/startup_planner.h) — and the ISF
// budgets left at 0, which the data planner searches (balance.q_vit, q_tok, q_tok_thresh).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/config.h"

namespace omnibal::train {

/// The checkpoint this launch continues from, found before the trainer is built.
struct ResumePoint {
  std::string request;          ///< --resume as given: "", "auto" or a checkpoint directory
  std::string dir;              ///< the checkpoint continued from; empty = a fresh start
  std::optional<Config> saved;  ///< that checkpoint's config (set exactly when `dir` is)
  /// That checkpoint's rank-0 state (counters, stage plan, precision; train_checkpoint.h);
  /// null on a fresh start.
  nlohmann::json state;
  /// True when a checkpoint is continued.
  bool resuming() const { return !dir.empty(); }
};

/// Finds the checkpoint `resume` names under `config.runtime.run_dir`/checkpoints: "" = a fresh
/// start, "auto" = the newest one whose manifest verifies and whose tensors are finite (damaged
/// ones, and older ones holding a NaN / Inf, are skipped with a log line; none = a fresh start),
/// a path = that checkpoint, verified (checkpoint/checkpoint_reader.h). Not collective (every rank
/// reads the same files). Throws omnibal::Error when a fresh start (or `auto` finding none that
/// verifies) would overwrite checkpoints of an earlier run in the run directory, when the path
/// is damaged, or when the checkpoint is of another model.preset.
ResumePoint find_resume_point(const Config& config, const std::string& resume);

/// Refuses to continue `resume` (no-op on a fresh start) when this launch would train something
/// else than the checkpoint was written for, before any start-up work:
/// - another architecture than model.preset has now (`architecture_yaml`,
///   preset_architecture_yaml): the names that still match would load, the rest not;
/// - another data plan (`plan_hash`, TrainingData::plan_hash: other data, balance.*, or
///   parallel.dp x parallel.micro_batches): the epoch would go on over a different sample
///   stream, some samples trained twice and others never. The same dp x m keeps the plan
///   (bitwise at the same dp and m, within float reordering at another split of it).
/// Throws omnibal::Error naming the checkpoint, the keys that changed and the ways on (restore
/// them, or start a new run from `omnibal-plan export` through model.init_from).
void refuse_incompatible_resume(const ResumePoint& resume, const Config& now,
                                const std::string& architecture_yaml, uint64_t plan_hash);

/// `config` with every `auto` settled:
/// - model.hf_style auto: on a resume the checkpoint's saved style (internlm2 for checkpoints
///   older than the key; init_from is not read, the checkpoint wins), otherwise init_from's
///   config.json (checkpoint/hf_style.h), or internlm2 without init_from;
/// - parallel.partition_trials -1: parallel.partition_top_k.
/// An explicit value always stays. Throws omnibal::Error naming init_from's config.json when
/// it cannot tell the LLM naming.
Config resolve_run_config(const Config& config, const ResumePoint& resume);

}  // namespace omnibal::train
