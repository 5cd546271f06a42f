// Read-only access to checkpoint directories written by CheckpointStore (checkpoint_store.h has
// the layout): verification against manifest.json, discovery of the newest complete checkpoint
// under a root, and loading tensors by name, per-rank states and the saved config. Needs no
// communicator, so tools (omnibal-plan export) and any rank of any later partition can use it.
// Not here: writing (CheckpointStore::save).
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace omnibal::checkpoint {

/// Throws omnibal::Error listing everything in `dir` that differs from its manifest (missing
/// file, size, checksum), or that the manifest itself is missing or malformed, or - for a
/// checkpoint without the manifest's "all_finite" mark (written before saves checked it) - every
/// tensor holding a NaN / Inf (tensor_finiteness.h).
void verify_checkpoint(const std::string& dir);

/// Path of the newest <root>/step-N whose manifest verifies and whose tensors are finite (see
/// verify_checkpoint), or nullopt. Damaged, incomplete or non-finite directories and *.tmp
/// leftovers are skipped with a log line saying why.
std::optional<std::string> find_latest_checkpoint(const std::string& root);

/// The tensors `names` from whichever shard files of `dir` hold them (CPU, zero-copy views of
/// the memory-mapped files, see safetensors.h). Throws one omnibal::Error listing every
/// missing name. Does not verify checksums.
std::map<std::string, torch::Tensor> load_checkpoint_tensors(const std::string& dir,
                                                             const std::vector<std::string>& names);

/// Every tensor name stored in `dir` (from the manifest index), sorted.
std::vector<std::string> checkpoint_tensor_names(const std::string& dir);

/// Each saving rank's state, indexed by rank (size = world size at save).
std::vector<nlohmann::json> load_checkpoint_states(const std::string& dir);

/// The resolved config (YAML text) saved with the checkpoint.
std::string load_checkpoint_config(const std::string& dir);

/// Step of a directory named step-N (a path or a name), or nullopt (also for step-N.tmp).
std::optional<int64_t> parse_step_dir(const std::string& path);

/// "rank-3.safetensors" / "rank-3.json": the files rank r writes.
std::string shard_file_name(int rank);
std::string state_file_name(int rank);

}  // namespace omnibal::checkpoint
