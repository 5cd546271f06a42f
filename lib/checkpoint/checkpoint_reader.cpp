#include "checkpoint/checkpoint_reader.h"

#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_finiteness.h"
#include "core/error.h"
#include "core/log.h"

#include <algorithm>
#include <filesystem>

namespace omnibal::checkpoint {
namespace fs = std::filesystem;
namespace {

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += "\n  - " + l;
  return out;
}

// What makes `dir` unusable: its differences from the manifest, else (a checkpoint written
// before saves checked them) its non-finite tensors.
std::vector<std::string> checkpoint_problems(const std::string& dir) {
  std::vector<std::string> problems = checkpoint_differences(dir);
  if (!problems.empty()) return problems;
  problems = checkpoint_nonfinite_tensors(dir);
  if (!problems.empty())
    problems.push_back(
        "the tensors above are not finite: a diverged run's weights or optimizer state, "
        "written before checkpoint saves refused them");
  return problems;
}

}  // namespace

std::string shard_file_name(int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; }
std::string state_file_name(int rank) { return "rank-" + std::to_string(rank) + ".json"; }

std::optional<int64_t> parse_step_dir(const std::string& path) {
  fs::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  const std::string name = p.filename().string();
  if (name.size() <= 5 || name.compare(0, 5, "step-") != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
    return std::nullopt;
  return std::stoll(digits);
}

std::optional<std::string> find_latest_checkpoint(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> candidates;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return std::nullopt;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (const auto step = parse_step_dir(name)) {
      if (entry.is_directory()) candidates.emplace_back(*step, entry.path().string());
    } else if (name.rfind("step-", 0) == 0) {
      log_info("checkpoint: ignoring {} (an interrupted save)", entry.path().string());
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [step, dir] : candidates) {
    try {
      const CheckpointManifest manifest = CheckpointManifest::read(dir);
      OMNIBAL_CHECK(manifest.step == step, dir, ": manifest says step ", manifest.step);
      const auto problems = checkpoint_problems(dir);
      if (problems.empty()) return dir;
      log_info("checkpoint: skipping {}:{}", dir, join_lines(problems));
    } catch (const Error& e) {
      log_info("checkpoint: skipping {}: {}", dir, e.what());
    }
  }
  return std::nullopt;
}

void verify_checkpoint(const std::string& dir) {
  const auto problems = checkpoint_differences(dir);
  OMNIBAL_CHECK(problems.empty(), "checkpoint ", dir,
                " does not match its manifest:", join_lines(problems));
  const auto nonfinite = checkpoint_nonfinite_tensors(dir);
  OMNIBAL_CHECK(nonfinite.empty(), "checkpoint ", dir,
                " holds non-finite (NaN / Inf) tensors - a diverged run's, written before "
                "checkpoint saves refused them; resume from an earlier checkpoint:",
                join_lines(nonfinite));
}

std::vector<std::string> checkpoint_tensor_names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& [name, file] : CheckpointManifest::read(dir).tensors) names.push_back(name);
  return names;
}

std::map<std::string, torch::Tensor> load_checkpoint_tensors(
    const std::string& dir, const std::vector<std::string>& names) {
  const CheckpointManifest manifest = CheckpointManifest::read(dir);
  std::map<std::string, std::vector<std::string>> by_file;
  std::vector<std::string> missing;
  for (const auto& name : names) {
    const auto it = manifest.tensors.find(name);
    if (it == manifest.tensors.end()) missing.push_back(name);
    else by_file[it->second].push_back(name);
  }
  OMNIBAL_CHECK(missing.empty(), "checkpoint ", dir, " (step ", manifest.step, ") lacks ",
                missing.size(), " of the ", names.size(),
                " requested tensors:", join_lines(missing));
  std::map<std::string, torch::Tensor> out;
  for (const auto& [file_name, file_names] : by_file) {
    const SafetensorsFile file((fs::path(dir) / file_name).string());
    for (const auto& name : file_names) out[name] = file.tensor(name);
  }
  return out;
}

std::vector<nlohmann::json> load_checkpoint_states(const std::string& dir) {
  const CheckpointManifest manifest = CheckpointManifest::read(dir);
  std::vector<nlohmann::json> states;
  for (int r = 0; r < manifest.world_size; ++r) {
    const std::string path = (fs::path(dir) / state_file_name(r)).string();
    try {
      states.push_back(nlohmann::json::parse(read_text_file(path)));
    } catch (const nlohmann::json::exception& e) {
      OMNIBAL_FAIL(path, ": not valid JSON: ", e.what());
    }
  }
  return states;
}

std::string load_checkpoint_config(const std::string& dir) {
  return read_text_file((fs::path(dir) / CheckpointManifest::kConfigFile).string());
}

}  // namespace omnibal::checkpoint
