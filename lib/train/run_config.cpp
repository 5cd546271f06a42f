#include "train/run_config.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_style.h"
#include "core/error.h"

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
    checkpoint::verify_checkpoint(resume);
    point.dir = resume;
  }
  point.saved = parse_config(checkpoint::load_checkpoint_config(point.dir), point.dir + "/config");
  OMNIBAL_CHECK(point.saved->model.preset == config.model.preset, point.dir,
                ": the checkpoint is of model '", point.saved->model.preset,
                "' but model.preset is '", config.model.preset, "'");
  return point;
}

Config resolve_run_config(const Config& config, const ResumePoint& resume) {
  Config out = config;
  if (out.model.hf_style == HfStyle::kAuto) {
    if (resume.saved) {
      // The checkpoint wins over init_from; checkpoints written before the key say auto.
      const HfStyle saved = resume.saved->model.hf_style;
      out.model.hf_style = saved == HfStyle::kAuto ? HfStyle::kInternLm2 : saved;
    } else {
      out.model.hf_style = checkpoint::config_hf_style(
          checkpoint::resolve_hf_style(HfStyle::kAuto, out.model.init_from));
    }
  }
  if (out.parallel.partition_trials < 0)
    out.parallel.partition_trials = out.parallel.partition_top_k;
  out.validate();
  return out;
}

}  // namespace omnibal::train
