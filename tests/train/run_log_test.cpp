// RunLog: a failed write to the run directory is an error naming the file and the record, not
// a silently cut metrics.jsonl. Linux /dev/full fails every write with ENOSPC, so a run
// directory whose metrics.jsonl (eval.jsonl, summary.json, config.yaml) links to it behaves like
// a full disk for that one file. Also: one line per step, and a resume keeps the earlier steps.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/common/scratch_dir.h"
#include "train/run_log.h"

using omnibal::testing::ScratchDir;
using omnibal::train::EvalResult;
using omnibal::train::RunLog;

namespace {

namespace fs = std::filesystem;

// Makes `name` in the run directory `dir` a link to /dev/full (every write: ENOSPC).
void fill(const ScratchDir& dir, const std::string& name) {
  fs::create_symlink("/dev/full", dir.path() / name);
}

nlohmann::json step_record(int64_t step) {
  return {{"step", step},
          {"loss", 2.5},
          {"lr", 1e-3},
          {"grad_norm", 1.0},
          {"samples_per_s", 10.0},
          {"tokens_per_s", 100.0},
          {"step_seconds", 0.1},
          {"bubble_fraction", 0.0},
          {"dp_ranks", {{{"tiles", 4}, {"tokens", 40}}}}};
}

int count_lines(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

bool dev_full_fails() {
  std::ofstream out("/dev/full");
  out << "x" << std::flush;
  return out.is_open() && !out.good();
}

}  // namespace

TEST_CASE("run log: one metrics line per step, and a resume keeps the steps before it", "[train]") {
  ScratchDir dir("run_log_lines");
  {
    RunLog log(dir.str(), true, "a: 1\n", 0, 4);
    for (int64_t s = 0; s < 3; ++s) log.step(step_record(s));
  }
  CHECK(count_lines(dir.file("metrics.jsonl")) == 3);
  RunLog resumed(dir.str(), true, "a: 1\n", 2, 4);  // steps 0, 1 done
  CHECK(count_lines(dir.file("metrics.jsonl")) == 2);
  resumed.step(step_record(2));
  resumed.step(step_record(3));
  CHECK(count_lines(dir.file("metrics.jsonl")) == 4);
}

TEST_CASE("run log: a failed metrics write names the file and the step", "[train]") {
  if (!dev_full_fails()) {
    WARN("/dev/full does not fail writes here: nothing to test");
    return;
  }
  ScratchDir dir("run_log_metrics_full");
  fill(dir, "metrics.jsonl");
  RunLog log(dir.str(), true, "a: 1\n", 0, 10);
  CHECK_THROWS_WITH(log.step(step_record(0)),
                    Catch::Contains(dir.file("metrics.jsonl") +
                                    ": writing the step 0 record failed (No space left on "
                                    "device) - is the disk full?"));
}

TEST_CASE("run log: failed eval, summary and config writes are errors naming the file", "[train]") {
  if (!dev_full_fails()) {
    WARN("/dev/full does not fail writes here: nothing to test");
    return;
  }
  {
    ScratchDir dir("run_log_eval_full");
    fill(dir, "eval.jsonl");
    RunLog log(dir.str(), true, "a: 1\n", 0, 10);
    CHECK_THROWS_WITH(log.eval(3, EvalResult{}),
                      Catch::Contains(dir.file("eval.jsonl") +
                                      ": writing the evaluation record of step 3 failed (No "
                                      "space left on device)"));
  }
  {
    ScratchDir dir("run_log_summary_full");
    fill(dir, "summary.json");
    RunLog log(dir.str(), true, "a: 1\n", 0, 10);
    CHECK_THROWS_WITH(log.finish({{"steps", 1}}),
                      Catch::Contains(
                          dir.file("summary.json") +
                          ": writing the run summary failed (No space left on device)"));
  }
  {
    ScratchDir dir("run_log_config_full");
    fill(dir, "config.yaml");
    CHECK_THROWS_WITH(RunLog(dir.str(), true, "a: 1\n", 0, 10),
                      Catch::Contains(dir.file("config.yaml") +
                                      ": writing the resolved config failed"));
  }
}

TEST_CASE("run log: ranks other than 0 write nothing", "[train]") {
  ScratchDir dir("run_log_inactive");
  fill(dir, "metrics.jsonl");
  RunLog log(dir.str(), false, "a: 1\n", 0, 10);
  CHECK_NOTHROW(log.step(step_record(0)));
  CHECK_FALSE(fs::exists(dir.file("config.yaml")));
}
