// resolve_run_config settles every auto (model.hf_style from the resumed checkpoint, else
// init_from's config.json, else internlm2; partition_trials -1 -> top K) and keeps explicit
// values; find_resume_point refuses a fresh start over an earlier run's checkpoints. Resuming
// real checkpoints is tests/integration (resume, init_from, truncated).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "train/run_config.h"

using namespace omnibal;
using omnibal::train::find_resume_point;
using omnibal::train::resolve_run_config;
using omnibal::train::ResumePoint;

namespace {

namespace fs = std::filesystem;

// A fresh directory under the temp dir, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() /
             ("omnibal_run_config_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

}  // namespace

TEST_CASE("run config: model.hf_style auto from init_from's config.json", "[train]") {
  TempDir dir("hf_style");
  write(dir.path / "config.json", R"({"llm_config": {"architectures": ["LlamaForCausalLM"]}})");
  Config c;
  CHECK(resolve_run_config(c, {}).model.hf_style == HfStyle::kInternLm2);  // no init_from
  c.model.init_from = dir.path.string();
  CHECK(resolve_run_config(c, {}).model.hf_style == HfStyle::kLlama);
  c.model.hf_style = HfStyle::kLlamaFused;  // explicit: config.json is not read
  CHECK(resolve_run_config(c, {}).model.hf_style == HfStyle::kLlamaFused);
  c.model.hf_style = HfStyle::kAuto;
  c.model.init_from = (dir.path / "absent").string();
  CHECK_THROWS_WITH(resolve_run_config(c, {}), Catch::Contains("config.json"));
}

TEST_CASE("run config: on a resume the checkpoint's model.hf_style wins over init_from",
          "[train]") {
  Config c;
  c.model.init_from = "/nonexistent";  // never read when resuming
  ResumePoint resume;
  resume.dir = "/runs/x/checkpoints/step-4";
  resume.saved = Config{};
  resume.saved->model.hf_style = HfStyle::kLlama;
  CHECK(resolve_run_config(c, resume).model.hf_style == HfStyle::kLlama);
  resume.saved->model.hf_style = HfStyle::kAuto;  // a checkpoint from before the key
  CHECK(resolve_run_config(c, resume).model.hf_style == HfStyle::kInternLm2);
  c.model.hf_style = HfStyle::kLlamaFused;  // the config's explicit choice stays
  CHECK(resolve_run_config(c, resume).model.hf_style == HfStyle::kLlamaFused);
}

TEST_CASE("run config: partition_trials -1 becomes partition_top_k, and the rest stays",
          "[train]") {
  Config c;
  c.parallel.partition_top_k = 5;
  const Config r = resolve_run_config(c, {});
  CHECK(r.parallel.partition_trials == 5);
  c.parallel.partition_trials = 0;
  CHECK(resolve_run_config(c, {}).parallel.partition_trials == 0);
  // Values settled later, by the processes, stay as written.
  CHECK(r.runtime.threads == c.runtime.threads);
  CHECK(r.memory.budget_gb == c.memory.budget_gb);
  CHECK(r.balance.q_tok == c.balance.q_tok);
  // The resolved config reads back as itself.
  CHECK(to_yaml(parse_config(to_yaml(r), "resolved")) == to_yaml(r));
  CHECK_THAT(to_yaml(r), Catch::Contains("hf_style: internlm2"));
}

TEST_CASE("run config: a fresh start over an earlier run's checkpoints is refused", "[train]") {
  TempDir dir("resume");
  Config c;
  c.runtime.run_dir = dir.path.string();
  const ResumePoint fresh = find_resume_point(c, "");
  CHECK_FALSE(fresh.resuming());
  CHECK_FALSE(fresh.saved);
  CHECK_FALSE(find_resume_point(c, "auto").resuming());  // no checkpoints: afresh
  fs::create_directories(dir.path / "checkpoints" / "step-3");
  fs::create_directories(dir.path / "checkpoints" / "step-3.tmp");
  CHECK_THROWS_WITH(find_resume_point(c, ""),
                    Catch::Contains("already holds checkpoints of an earlier run (step-3"));
  // step-3 has no manifest: auto finds none that verifies and refuses rather than restart.
  CHECK_THROWS_WITH(find_resume_point(c, "auto"), Catch::Contains("none of the checkpoints"));
  CHECK_THROWS(find_resume_point(c, (dir.path / "checkpoints" / "step-3").string()));
}
