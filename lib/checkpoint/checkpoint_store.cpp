#include "checkpoint/checkpoint_store.h"

#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/file_digest.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_finiteness.h"
#include "core/error.h"
#include "core/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace omnibal::checkpoint {
namespace fs = std::filesystem;
namespace {

std::string shard_file(int rank) { return shard_file_name(rank); }
std::string state_file(int rank) { return state_file_name(rank); }

// Columns of the per-rank digest table all-reduced after the writes.
enum DigestColumn {
  kTensorBytes,
  kTensorHash,
  kStateBytes,
  kStateHash,
  kFailed,
  kNonFinite,  // the rank's shard holds a NaN / Inf: nothing written
  kColumns
};

// "1, 3": the ranks whose row of the all-reduced table has `column` set.
std::string ranks_with(const torch::Tensor& table, int column) {
  std::string ranks;
  for (int64_t r = 0; r < table.size(0); ++r)
    if (table[r][column].item<int64_t>() != 0)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return ranks;
}

// Writes, fsyncs and digests rank `rank`'s two files of `shard` into `tmp`; fills its `row` of
// the digest table. Throws on any I/O failure.
void write_shard(const std::string& tmp, int rank, int64_t step, const Shard& shard, int64_t* row) {
  const std::string tensors_path = (fs::path(tmp) / shard_file(rank)).string();
  const std::string state_path = (fs::path(tmp) / state_file(rank)).string();
  write_safetensors(tensors_path, shard.tensors,
                    {{"format", "pt"},
                     {"omnibal_step", std::to_string(step)},
                     {"omnibal_rank", std::to_string(rank)}});
  write_text_file_durable(state_path, shard.state.dump(1) + "\n");
  const FileDigest t = digest_file(tensors_path);
  const FileDigest s = digest_file(state_path);
  row[kTensorBytes] = static_cast<int64_t>(t.bytes);
  row[kTensorHash] = static_cast<int64_t>(t.xxh3);
  row[kStateBytes] = static_cast<int64_t>(s.bytes);
  row[kStateHash] = static_cast<int64_t>(s.xxh3);
}

}  // namespace

CheckpointStore::CheckpointStore(std::string root_dir, int keep_last, comm::Communicator& world)
    : root_(std::move(root_dir)), keep_last_(keep_last), world_(world) {
  OMNIBAL_CHECK(!root_.empty(), "checkpoint directory: empty path");
  OMNIBAL_CHECK(keep_last_ >= 0, "train.keep_checkpoints: expected >= 0 (0 keeps all), got ",
                keep_last_);
}

std::string CheckpointStore::step_dir(int64_t step) const {
  return (fs::path(root_) / ("step-" + std::to_string(step))).string();
}

void CheckpointStore::save(int64_t step, const Shard& shard,
                           const std::string& resolved_config_yaml) {
  OMNIBAL_CHECK(step >= 0, "checkpoint: step must be >= 0, got ", step);
  const int rank = world_.rank();
  const int size = world_.size();
  const std::string tmp = step_dir(step) + ".tmp";
  const std::string what = "checkpoint step " + std::to_string(step);

  // 1. Rank 0 makes a fresh step-N.tmp; the all-reduce doubles as the barrier before writing.
  std::string error;
  if (rank == 0) {
    try {
      fs::create_directories(root_);
      fs::remove_all(tmp);
      fs::create_directory(tmp);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (world_.all_reduce_int(error.empty() ? 0 : 1, comm::ReduceOp::kMax, what + ": prepare") != 0)
    OMNIBAL_FAIL(what, " not saved: rank 0 could not create ", tmp,
                 rank == 0 ? ": " + error : std::string(" (see rank 0's error)"));

  // 2. Every rank checks its tensors are finite, then writes, fsyncs and digests its own files.
  torch::Tensor table = torch::zeros({size, kColumns}, torch::kLong);
  int64_t* row = table.data_ptr<int64_t>() + static_cast<int64_t>(rank) * kColumns;
  const std::vector<std::string> nonfinite = nonfinite_tensors(shard.tensors);
  if (!nonfinite.empty()) {
    row[kNonFinite] = 1;
    error = nonfinite.front() + (nonfinite.size() > 1
                                     ? fmt::format(" (and {} more tensors)", nonfinite.size() - 1)
                                     : std::string());
  } else {
    try {
      write_shard(tmp, rank, step, shard, row);
    } catch (const std::exception& e) {
      error = e.what();
      row[kFailed] = 1;
    }
  }
  world_.all_reduce(table, comm::ReduceOp::kSum, what + ": shard digests");

  const std::string failed = ranks_with(table, kFailed);
  const std::string unfinite = ranks_with(table, kNonFinite);
  if (!failed.empty() || !unfinite.empty()) {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
    const std::string mine = error.empty() ? std::string() : " (this rank: " + error + ")";
    if (!unfinite.empty())
      OMNIBAL_FAIL(what, " refused: the tensors of rank(s) ", unfinite,
                   " are not all finite (NaN / Inf)", mine,
                   "; nothing was written and earlier checkpoints are untouched");
    OMNIBAL_FAIL(what, " not saved: writing the shard failed on rank(s) ", failed, mine,
                 "; earlier checkpoints are untouched");
  }

  // 3. Rank 0 publishes the checkpoint; everyone learns whether that worked.
  error.clear();
  if (rank == 0) {
    try {
      std::vector<uint64_t> digests(table.data_ptr<int64_t>(),
                                    table.data_ptr<int64_t>() + table.numel());
      finalize(step, digests, resolved_config_yaml);
    } catch (const std::exception& e) {
      error = e.what();
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  }
  if (world_.all_reduce_int(error.empty() ? 0 : 1, comm::ReduceOp::kMax, what + ": publish") != 0)
    OMNIBAL_FAIL(what, " not saved: rank 0 could not publish it",
                 rank == 0 ? ": " + error : std::string(" (see rank 0's error)"));
}

void CheckpointStore::finalize(int64_t step, const std::vector<uint64_t>& digests,
                               const std::string& config) const {
  const std::string tmp = step_dir(step) + ".tmp";
  const std::string final_dir = step_dir(step);
  const int size = world_.size();
  CheckpointManifest manifest;
  manifest.step = step;
  manifest.world_size = size;
  manifest.all_finite = true;  // save() refused any shard with a NaN / Inf
  for (int r = 0; r < size; ++r) {
    const uint64_t* row = digests.data() + static_cast<size_t>(r) * kColumns;
    manifest.files.push_back({shard_file(r), row[kTensorBytes], to_hex64(row[kTensorHash])});
    manifest.files.push_back({state_file(r), row[kStateBytes], to_hex64(row[kStateHash])});
    // The index comes from the headers on disk, in rank order (lowest rank wins a duplicate).
    const SafetensorsFile file((fs::path(tmp) / shard_file(r)).string());
    for (const auto& name : file.names()) manifest.tensors.emplace(name, shard_file(r));
  }
  const std::string config_path = (fs::path(tmp) / CheckpointManifest::kConfigFile).string();
  write_text_file_durable(config_path, config);
  const FileDigest c = digest_file(config_path);
  manifest.files.push_back({CheckpointManifest::kConfigFile, c.bytes, c.hex()});
  write_text_file_durable((fs::path(tmp) / CheckpointManifest::kFileName).string(),
                          manifest.to_json().dump(1) + "\n");
  fsync_directory(tmp);

  // Replacing an existing step-N: move it aside first (rename cannot replace a non-empty dir).
  const std::string old_dir = final_dir + ".old.tmp";
  const bool replacing = fs::exists(final_dir);
  if (replacing) {
    fs::remove_all(old_dir);
    fs::rename(final_dir, old_dir);
  }
  fs::rename(tmp, final_dir);
  fsync_directory(root_);
  if (replacing) fs::remove_all(old_dir);
  log_info("checkpoint: saved step {} ({} ranks, {} tensors) to {}", step, size,
           manifest.tensors.size(), final_dir);
  prune(step);
}

void CheckpointStore::prune(int64_t newest_step) const {
  // Pruning failures are logged, not thrown: the new checkpoint is already complete.
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    if (const auto step = checkpoint::parse_step_dir(name)) {
      steps.emplace_back(*step, entry.path());
    } else if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
               checkpoint::parse_step_dir(name.substr(0, name.find('.'))).value_or(newest_step) <
                   newest_step) {
      log_info("checkpoint: removing leftover {} of an interrupted save", entry.path().string());
      fs::remove_all(entry.path(), ec);
    }
  }
  if (keep_last_ == 0 || static_cast<int>(steps.size()) <= keep_last_) return;
  std::sort(steps.begin(), steps.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(keep_last_); i < steps.size(); ++i) {
    fs::remove_all(steps[i].second, ec);
    if (ec) log_info("checkpoint: could not remove {}: {}", steps[i].second.string(), ec.message());
  }
  fsync_directory(root_);
}

std::optional<std::string> CheckpointStore::find_latest() const {
  return find_latest_checkpoint(root_);
}

void CheckpointStore::verify(const std::string& dir) const { verify_checkpoint(dir); }

std::vector<std::string> CheckpointStore::tensor_names(const std::string& dir) const {
  return checkpoint_tensor_names(dir);
}

std::map<std::string, torch::Tensor> CheckpointStore::load_tensors(
    const std::string& dir, const std::vector<std::string>& names) const {
  return load_checkpoint_tensors(dir, names);
}

std::vector<nlohmann::json> CheckpointStore::load_states(const std::string& dir) const {
  return load_checkpoint_states(dir);
}

std::string CheckpointStore::load_config(const std::string& dir) const {
  return load_checkpoint_config(dir);
}

std::optional<int64_t> CheckpointStore::parse_step_dir(const std::string& path) {
  return checkpoint::parse_step_dir(path);
}

}  // namespace omnibal::checkpoint
