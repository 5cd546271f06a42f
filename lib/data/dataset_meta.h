// The InternVL-style meta file that mixes several datasets into one training set:
//   {"name": {"root": images dir, "annotation": JSONL/JSON file, "repeat_time": 1,
//             "length": N (optional), "token_lengths": per-sample length file (optional)}, ...}
// Datasets keep the file's order (it fixes the global sample index). Relative paths are resolved
// against the meta file's directory. The planner applies repeat_time; this file only carries it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace omnibal::data {

/// One dataset of a meta file.
struct DatasetMetaEntry {
  std::string name;           ///< the meta file's key
  std::string root;           ///< directory image paths are relative to (resolved)
  std::string annotation;     ///< JSONL or JSON-array annotation file (resolved)
  double repeat_time = 1.0;   ///< InternVL repeat_time (> 0); applied by the planner
  int64_t length = -1;        ///< "length" when given, else -1
  std::string token_lengths;  ///< per-sample length file (resolved), empty when absent
};

/// Reads a meta file. Throws omnibal::Error naming the file and dataset key on a missing or
/// mistyped field ("annotation" is required; "root" defaults to the meta file's directory).
std::vector<DatasetMetaEntry> load_dataset_meta(const std::string& path);

/// Writes a meta file with the given entries in order; paths are written as given.
void write_dataset_meta(const std::string& path, const std::vector<DatasetMetaEntry>& entries);

}  // namespace omnibal::data
