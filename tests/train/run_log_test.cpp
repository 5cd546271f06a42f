// RunLog: a failed write to the run directory is an error naming the file and the record, not
// a silently cut metrics.jsonl. Linux /dev/full fails every write with ENOSPC, so a run
// directory whose metrics.jsonl (eval.jsonl, summary.json, config.yaml) links to it behaves like
// a full disk for that one file. Also: one line per step, and a resume keeps the earlier steps.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "train/run_log.h"

using omnibal::train::EvalResult;
using omnibal::train::RunLog;

namespace {

namespace fs = std::filesystem;

// A fresh run directory under the temp dir, removed at the end.
struct RunLogDir {
  fs::path path;
  explicit RunLogDir(const std::string& tag)
      : path(fs::temp_directory_path() /
             ("omnibal_run_log_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~RunLogDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  /// Makes `name` in the run directory a link to /dev/full (every write: ENOSPC).
  void fill(const std::string& name) const { fs::create_symlink("/dev/full", path / name); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

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
  RunLogDir dir("lines");
  {
    RunLog log(dir.path.string(), true, "a: 1\n", 0, 4);
    for (int64_t s = 0; s < 3; ++s) log.step(step_record(s));
  }
  CHECK(count_lines(dir.file("metrics.jsonl")) == 3);
  RunLog resumed(dir.path.string(), true, "a: 1\n", 2, 4);  // steps 0, 1 done
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
  RunLogDir dir("metrics_full");
  dir.fill("metrics.jsonl");
  RunLog log(dir.path.string(), true, "a: 1\n", 0, 10);
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
    RunLogDir dir("eval_full");
    dir.fill("eval.jsonl");
    RunLog log(dir.path.string(), true, "a: 1\n", 0, 10);
    CHECK_THROWS_WITH(log.eval(3, EvalResult{}),
                      Catch::Contains(dir.file("eval.jsonl") +
                                      ": writing the evaluation record of step 3 failed (No "
                                      "space left on device)"));
  }
  {
    RunLogDir dir("summary_full");
    dir.fill("summary.json");
    RunLog log(dir.path.string(), true, "a: 1\n", 0, 10);
    CHECK_THROWS_WITH(log.finish({{"steps", 1}}),
                      Catch::Contains(
                          dir.file("summary.json") +
                          ": writing the run summary failed (No space left on device)"));
  }
  {
    RunLogDir dir("config_full");
    dir.fill("config.yaml");
    CHECK_THROWS_WITH(RunLog(dir.path.string(), true, "a: 1\n", 0, 10),
                      Catch::Contains(dir.file("config.yaml") +
                                      ": writing the resolved config failed"));
  }
}

TEST_CASE("run log: ranks other than 0 write nothing", "[train]") {
  RunLogDir dir("inactive");
  dir.fill("metrics.jsonl");
  RunLog log(dir.path.string(), false, "a: 1\n", 0, 10);
  CHECK_NOTHROW(log.step(step_record(0)));
  CHECK_FALSE(fs::exists(dir.file("config.yaml")));
}
