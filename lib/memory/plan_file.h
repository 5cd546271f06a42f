// Reading the stage plan of an earlier run for `parallel.plan_from` (docs/conventions.md): a run
// directory, whose `stage_plan.json` the trainer writes at start-up, or such a file itself (the
// JSON of stage_plan.h's stage_plan_json). The plan is parsed as it was written; whether it fits
// this run (model, units, stage count, schedule, v) is plan_sources.h's plan_misfits, checked
// where it is used. Not here: writing the file (lib/train/startup_planner.h), torch, MPI.
#pragma once

#include <string>

#include "memory/stage_plan.h"

namespace omnibal::memory {

/// A stage plan read from a file, with the file's path.
struct PlanFile {
  StagePlan plan;
  std::string path;  ///< the file read: `<dir>/stage_plan.json` for a run directory
};

/// The file `plan_from` names: `<plan_from>/stage_plan.json` for a directory, else the path.
std::string plan_file_path(const std::string& plan_from);

/// Reads and parses the plan `plan_from` names (plan_file_path). Throws omnibal::Error naming
/// parallel.plan_from and the path when it does not exist, a directory holds no
/// stage_plan.json, the file cannot be read or is not JSON, and parse_stage_plan's errors
/// (naming the key at fault).
PlanFile read_plan_file(const std::string& plan_from);

}  // namespace omnibal::memory
