#include "train/run_config.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_style.h"
#include "core/error.h"
#include "train/train_checkpoint.h"

namespace omnibal::train {

namespace {

/// A fresh start (no --resume) in a run directory that holds checkpoints of an earlier run would
/// prune them by step number, possibly the new checkpoint first, and truncate metrics.jsonl:
/// refuse, naming the checkpoints and the two ways on.
/// `after_auto`: --resume auto found none of them usable (the log says why each was skipped).
void refuse_earlier_checkpoints(const std::string& run_dir, bool after_auto = false) {
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
  for (const int64_t step : steps)
    names += (names.empty() ? "step-" : ", step-") + std::to_string(step);
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
void refuse_data_plan_change(const std::string& dir, const TrainCounters& at, uint64_t plan_hash,
                             const Config& saved, const Config& now) {
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
void refuse_architecture_change(const std::string& dir, const TrainCounters& at,
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

}  // namespace

ResumePoint find_resume_point(const Config& config, const std::string& resume) {
  ResumePoint point;
  point.request = resume;
  const std::string& run_dir = config.runtime.run_dir;
  if (resume.empty()) {
    refuse_earlier_checkpoints(run_dir);
    return point;
  }
  if (resume == "auto") {
    const auto latest = checkpoint::find_latest_checkpoint(run_dir + "/checkpoints");
    // --resume auto with checkpoints none of which verifies must not restart from step 0 over
    // them (pruning them and truncating metrics.jsonl): refuse like a fresh start would.
    if (!latest) {
      refuse_earlier_checkpoints(run_dir, true);
      return point;
    }
    point.dir = *latest;
  } else {
    OMNIBAL_CHECK(std::filesystem::is_directory(resume), "--resume ", resume,
                  ": no such checkpoint directory; give auto (the newest valid checkpoint under ",
                  run_dir, "/checkpoints) or a checkpoint's directory (", run_dir,
                  "/checkpoints/step-N)");
    OMNIBAL_CHECK(!std::filesystem::is_directory(resume + "/checkpoints"), "--resume ", resume,
                  ": a run directory, not a checkpoint; give one of its checkpoints (", resume,
                  "/checkpoints/step-N), or auto with runtime.run_dir ", resume);
    checkpoint::verify_checkpoint(resume);
    point.dir = resume;
  }
  point.saved = parse_config(checkpoint::load_checkpoint_config(point.dir), point.dir + "/config");
  OMNIBAL_CHECK(point.saved->model.preset == config.model.preset, point.dir,
                ": the checkpoint is of model '", point.saved->model.preset,
                "' but model.preset is '", config.model.preset, "'");
  const auto states = checkpoint::load_checkpoint_states(point.dir);
  OMNIBAL_CHECK(!states.empty(), point.dir, ": the checkpoint has no rank state");
  point.state = states[0];
  return point;
}

void refuse_incompatible_resume(const ResumePoint& resume, const Config& now,
                                const std::string& architecture_yaml, uint64_t plan_hash) {
  if (!resume.resuming()) return;
  const TrainCounters saved = TrainCounters::from_json(resume.state);
  refuse_architecture_change(resume.dir, saved, architecture_yaml, now.model.preset);
  refuse_data_plan_change(resume.dir, saved, plan_hash, *resume.saved, now);
}

Config resolve_run_config(const Config& config, const ResumePoint& resume) {
  Config out = config;
  if (out.model.hf_style == HfStyle::kAuto) {
    if (resume.saved) {
      // The checkpoint wins over init_from; checkpoints written before the key say auto.
      const HfStyle saved = resume.saved->model.hf_style;
      out.model.hf_style = saved == HfStyle::kAuto ? HfStyle::kInternLm2 : saved;
    } else {
      out.model.hf_style = checkpoint::resolve_hf_style(HfStyle::kAuto, out.model.init_from);
    }
  }
  if (out.parallel.partition_trials < 0)
    out.parallel.partition_trials = out.parallel.partition_top_k;
  out.validate();
  return out;
}

}  // namespace omnibal::train
