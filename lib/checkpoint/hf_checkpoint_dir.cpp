#include "checkpoint/hf_checkpoint_dir.h"

#include "checkpoint/durable_file.h"
#include "core/error.h"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace omnibal::checkpoint {
namespace fs = std::filesystem;

HfCheckpointDir::HfCheckpointDir(std::string dir) : dir_(std::move(dir)) {
  const fs::path index = fs::path(dir_) / kIndexFile;
  const fs::path single = fs::path(dir_) / kSingleFile;
  if (fs::is_regular_file(index)) {
    try {
      const auto j = nlohmann::json::parse(read_text_file(index.string()));
      weight_map_ = j.at("weight_map").get<std::map<std::string, std::string>>();
    } catch (const nlohmann::json::exception& e) {
      OMNIBAL_FAIL(index.string(),
                   ": malformed index (expected {\"weight_map\": {tensor: file}}): ", e.what());
    }
    for (const auto& [name, file] : weight_map_)
      OMNIBAL_CHECK(!file.empty() && file.find('/') == std::string::npos, index.string(),
                    ": tensor \"", name, "\" maps to \"", file,
                    "\", expected a file name in the same directory");
  } else if (fs::is_regular_file(single)) {
    const SafetensorsFile& file =
        *open_.emplace(kSingleFile, std::make_unique<SafetensorsFile>(single.string()))
             .first->second;
    for (const auto& name : file.names()) weight_map_[name] = kSingleFile;
  } else {
    OMNIBAL_FAIL(dir_, ": not a Hugging Face safetensors checkpoint (neither ", kIndexFile, " nor ",
                 kSingleFile, ")");
  }
}

std::vector<std::string> HfCheckpointDir::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : weight_map_) out.push_back(name);
  return out;
}

const SafetensorsFile& HfCheckpointDir::file_of(const std::string& name) const {
  const auto it = weight_map_.find(name);
  OMNIBAL_CHECK(it != weight_map_.end(), dir_, ": no tensor \"", name, "\"");
  auto& slot = open_[it->second];
  if (!slot) slot = std::make_unique<SafetensorsFile>((fs::path(dir_) / it->second).string());
  OMNIBAL_CHECK(slot->contains(name), slot->path(), ": the index says it holds \"", name,
                "\" but it does not");
  return *slot;
}

const SafetensorsEntry& HfCheckpointDir::entry(const std::string& name) const {
  return file_of(name).entry(name);
}

torch::Tensor HfCheckpointDir::tensor(const std::string& name) const {
  return file_of(name).tensor(name);
}

std::set<std::string> HfCheckpointDir::opened_files() const {
  std::set<std::string> out;
  for (const auto& [file, ptr] : open_) out.insert(file);
  return out;
}

}  // namespace omnibal::checkpoint
