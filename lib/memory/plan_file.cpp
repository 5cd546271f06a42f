#include "memory/plan_file.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace omnibal::memory {
namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string plan_file_path(const std::string& plan_from) {
  return is_directory(plan_from) ? plan_from + "/stage_plan.json" : plan_from;
}

PlanFile read_plan_file(const std::string& plan_from) {
  OMNIBAL_CHECK(!plan_from.empty(), "parallel.plan_from: expected a run directory or a ",
                "stage_plan.json file, got an empty path");
  const std::string path = plan_file_path(plan_from);
  std::ifstream in(path);
  if (!in.good()) {
    OMNIBAL_CHECK(!is_directory(plan_from), "parallel.plan_from: the run directory '", plan_from,
                  "' holds no stage_plan.json (omnibal-train writes it at start-up, before the "
                  "first step); name a run that got that far, or a stage_plan.json file");
    OMNIBAL_FAIL("parallel.plan_from: cannot read '", path,
                 "': expected a run directory or a stage_plan.json file");
  }
  std::stringstream text;
  text << in.rdbuf();
  const std::string origin = "parallel.plan_from '" + path + "'";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    OMNIBAL_FAIL(origin, ": not a JSON stage plan (", e.what(), ")");
  }
  try {
    return {parse_stage_plan(j, origin), path};
  } catch (const nlohmann::json::exception& e) {  // a key parse_stage_plan reads with at()
    OMNIBAL_FAIL(origin, ": not a stage plan (", e.what(), ")");
  }
}

}  // namespace omnibal::memory
