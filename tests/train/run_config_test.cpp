// resolve_run_config settles every auto (model.hf_style from the resumed checkpoint, else
// init_from's config.json, else internlm2; partition_trials -1 -> top K) and keeps explicit
// values; find_resume_point refuses a fresh start over an earlier run's checkpoints and passes
// over an older checkpoint holding a NaN. Resuming real checkpoints is tests/integration
// (resume, init_from, truncated).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <limits>

#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/file_digest.h"
#include "checkpoint/safetensors.h"
#include "tests/common/scratch_dir.h"
#include "train/run_config.h"

using namespace omnibal;
using omnibal::testing::ScratchDir;
using omnibal::train::find_resume_point;
using omnibal::train::resolve_run_config;
using omnibal::train::ResumePoint;

namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

}  // namespace

TEST_CASE("run config: model.hf_style auto from init_from's config.json", "[train]") {
  ScratchDir dir("run_config_hf_style");
  write(dir.path() / "config.json", R"({"llm_config": {"architectures": ["LlamaForCausalLM"]}})");
  Config c;
  CHECK(resolve_run_config(c, {}).model.hf_style == HfStyle::kInternLm2);  // no init_from
  c.model.init_from = dir.str();
  CHECK(resolve_run_config(c, {}).model.hf_style == HfStyle::kLlama);
  c.model.hf_style = HfStyle::kLlamaFused;  // explicit: config.json is not read
  CHECK(resolve_run_config(c, {}).model.hf_style == HfStyle::kLlamaFused);
  c.model.hf_style = HfStyle::kAuto;
  c.model.init_from = (dir.path() / "absent").string();
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
  ScratchDir dir("run_config_resume");
  Config c;
  c.runtime.run_dir = dir.str();
  const ResumePoint fresh = find_resume_point(c, "");
  CHECK_FALSE(fresh.resuming());
  CHECK_FALSE(fresh.saved);
  CHECK_FALSE(find_resume_point(c, "auto").resuming());  // no checkpoints: afresh
  fs::create_directories(dir.path() / "checkpoints" / "step-3");
  fs::create_directories(dir.path() / "checkpoints" / "step-3.tmp");
  CHECK_THROWS_WITH(find_resume_point(c, ""),
                    Catch::Contains("already holds checkpoints of an earlier run (step-3"));
  // step-3 has no manifest: auto finds none that verifies and refuses rather than restart.
  CHECK_THROWS_WITH(find_resume_point(c, "auto"), Catch::Contains("none of the checkpoints"));
  CHECK_THROWS(find_resume_point(c, (dir.path() / "checkpoints" / "step-3").string()));
  // A word other than auto (latest, as other trainers spell it) is no directory: say what is.
  CHECK_THROWS_WITH(find_resume_point(c, "latest"),
                    Catch::Contains("--resume latest: no such checkpoint directory; give auto") &&
                        Catch::Contains(dir.str() + "/checkpoints/step-N"));
  // A run directory is not a checkpoint: name one of its checkpoints, or auto.
  CHECK_THROWS_WITH(find_resume_point(c, dir.str()),
                    Catch::Contains("a run directory, not a checkpoint") &&
                        Catch::Contains("auto with runtime.run_dir " + dir.str()));
}

namespace {

/// A one-rank checkpoint step-`step` under `root` as a build before the finiteness mark wrote
/// it (no "all_finite"): `w` as rank 0's tensor, `config` as its config.
void write_unmarked_checkpoint(const fs::path& root, int64_t step, const torch::Tensor& w,
                               const std::string& config) {
  const fs::path d = root / ("step-" + std::to_string(step));
  write(d / "rank-0.json", "{\"step\": " + std::to_string(step) + "}\n");
  write(d / "config.yaml", config);
  checkpoint::write_safetensors((d / "rank-0.safetensors").string(), {{"llm_head.w", w}});
  checkpoint::CheckpointManifest m;
  m.step = step;
  m.world_size = 1;
  for (const char* f : {"rank-0.safetensors", "rank-0.json", "config.yaml"}) {
    const auto digest = checkpoint::digest_file((d / f).string());
    m.files.push_back({f, digest.bytes, digest.hex()});
  }
  m.tensors["llm_head.w"] = "rank-0.safetensors";
  write(d / "manifest.json", m.to_json().dump(1) + "\n");
}

}  // namespace

TEST_CASE("run config: --resume auto passes over an older checkpoint holding a NaN", "[train]") {
  ScratchDir dir("run_config_nan_resume");
  Config c;
  c.runtime.run_dir = dir.str();
  const fs::path root = dir.path() / "checkpoints";
  write_unmarked_checkpoint(root, 2, torch::ones({2, 3}), to_yaml(c));
  torch::Tensor diverged = torch::ones({2, 3});
  diverged[1][1] = std::numeric_limits<float>::quiet_NaN();
  write_unmarked_checkpoint(root, 4, diverged, to_yaml(c));
  const ResumePoint at = find_resume_point(c, "auto");
  CHECK(at.dir == (root / "step-2").string());
  CHECK(at.saved.has_value());
  CHECK_THROWS_WITH(find_resume_point(c, (root / "step-4").string()),
                    Catch::Contains("holds non-finite (NaN / Inf) tensors") &&
                        Catch::Contains("'llm_head.w' holds 1 nan and 0 inf of 6 values"));
}
