// parallel.plan_from's file (memory/plan_file.h): a run directory or a stage_plan.json file is
// read back as the plan written; a missing file, a directory without a plan and a broken file
// are refused naming the key and the path.
#include "memory/plan_file.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tests/common/scratch_dir.h"

using namespace omnibal;
using omnibal::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

memory::StagePlan small_plan() {
  memory::StagePlan p;
  p.model = "tiny";
  p.micro_batches = 4;
  p.unit_names = {"vit_embed", "projector", "llm_embed", "llm_head"};
  p.partition = partition::Partition{{1, 3}};
  p.recompute = memory::RecomputeFlags::none(4);
  p.partition_source = "balanced: test";
  p.recompute_source = "adaptive: test";
  return p;
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("plan file: a run directory or its stage_plan.json", "[memory][plan_file]") {
  ScratchDir dir("plan_file_read");
  const memory::StagePlan plan = small_plan();
  write(dir.path() / "stage_plan.json", memory::stage_plan_json(plan).dump(2));
  const bool as_dir = GENERATE(true, false);
  const std::string from = as_dir ? dir.str() : (dir.path() / "stage_plan.json").string();
  const memory::PlanFile got = memory::read_plan_file(from);
  CHECK(got.path == (dir.path() / "stage_plan.json").string());
  CHECK(got.plan.partition == plan.partition);
  CHECK(got.plan.unit_names == plan.unit_names);
  CHECK(memory::stage_plan_hash(got.plan) == memory::stage_plan_hash(plan));
}

TEST_CASE("plan file: what cannot be read is refused naming the key and the path",
          "[memory][plan_file]") {
  ScratchDir dir("plan_file_refused");
  CHECK_THROWS_WITH(memory::read_plan_file(dir.str()),
                    Catch::Contains("parallel.plan_from: the run directory '" + dir.str() +
                                    "' holds no stage_plan.json"));
  const std::string missing = (dir.path() / "nope.json").string();
  CHECK_THROWS_WITH(memory::read_plan_file(missing),
                    Catch::Contains("parallel.plan_from: cannot read '" + missing + "'"));
  CHECK_THROWS_WITH(memory::read_plan_file(""), Catch::Contains("empty path"));
  write(dir.path() / "stage_plan.json", "{\"format\": ");
  CHECK_THROWS_WITH(memory::read_plan_file(dir.str()), Catch::Contains("not a JSON stage plan"));
  auto j = memory::stage_plan_json(small_plan());
  j.erase("partition");
  write(dir.path() / "stage_plan.json", j.dump());
  CHECK_THROWS_WITH(memory::read_plan_file(dir.str()),
                    Catch::Contains("parallel.plan_from '") && Catch::Contains("'partition'"));
}
