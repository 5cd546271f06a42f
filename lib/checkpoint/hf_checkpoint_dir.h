// A Hugging Face checkpoint directory of safetensors files: either sharded (the
// model.safetensors.index.json {"metadata": {"total_size": N}, "weight_map": {tensor: file}}
// plus its shards) or one model.safetensors. Shard files are memory-mapped only when one of
// their tensors is asked for, so a pipeline stage touches only the files holding its units.
// Not here: .bin (pickle) checkpoints, remote hub downloads.
#pragma once

#include "checkpoint/safetensors.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace omnibal::checkpoint {

class HfCheckpointDir {
 public:
  static constexpr const char* kIndexFile = "model.safetensors.index.json";
  static constexpr const char* kSingleFile = "model.safetensors";

  /// Reads the index (or the single file's header). Throws omnibal::Error naming the directory
  /// when it has neither, or the index when it is malformed.
  explicit HfCheckpointDir(std::string dir);

  const std::string& dir() const { return dir_; }
  /// Tensor name -> shard file name.
  const std::map<std::string, std::string>& weight_map() const { return weight_map_; }
  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return weight_map_.count(name) > 0; }
  /// Header entry (dtype, shape) of `name`; maps its shard on first use.
  const SafetensorsEntry& entry(const std::string& name) const;
  /// The tensor `name` (zero-copy view of the mapped shard).
  torch::Tensor tensor(const std::string& name) const;
  /// Shard files mapped so far.
  std::set<std::string> opened_files() const;

 private:
  const SafetensorsFile& file_of(const std::string& name) const;

  std::string dir_;
  std::map<std::string, std::string> weight_map_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

}  // namespace omnibal::checkpoint
