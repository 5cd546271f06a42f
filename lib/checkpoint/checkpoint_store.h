// The trainer's checkpoint directory: atomic, multi-rank saves of per-rank shards, discovery of
// the newest complete checkpoint, verification and loading by tensor name (README.md here).
//
// Layout of <root>/step-<N>/ (N = the optimizer step, no zero padding):
//   rank-<R>.safetensors  rank R's tensors (parameters and optimizer state by stable names)
//   rank-<R>.json         rank R's state (RNGs, data position, scheduler...; any JSON)
//   config.yaml           the resolved config of the run
//   manifest.json         step, world size, size + XXH3-64 of every file above, and the index
//                         tensor name -> file (checkpoint_manifest.h)
//
// save() protocol (collective over `world`): rank 0 creates <root>/step-N.tmp/ (removing a
// stale one); every rank checks that its floating tensors are finite (tensor_finiteness.h; a
// NaN / Inf is not written), writes and fsyncs its two files; every rank computes the size and
// checksum of its own files; an all-reduce tells every rank whether all checks and writes
// succeeded (a failure anywhere aborts the save everywhere: the .tmp is removed, earlier
// checkpoints stay as they were, and every rank throws naming the failed ranks, and the
// tensor on its own); rank 0 writes config.yaml and manifest.json ("all_finite": true), fsyncs
// them and the directory, renames step-N.tmp -> step-N, fsyncs <root>,
// and prunes to the `keep_last` newest step-* directories (and removes older *.tmp leftovers);
// a last all-reduce makes rank 0's failure everyone's failure.
// A crash at any point leaves either no step-N or a complete one (rename is atomic on POSIX
// file systems); step-N.tmp leftovers are ignored by find_latest().
// Assumes <root> is on a file system every rank sees (NFS/Lustre/local disk for one node).
// Names written by several ranks (e.g. DP replicas) are indexed to the lowest rank.
// The read-only methods forward to checkpoint_reader.h (usable without a communicator).
// Not here: what goes into a shard (the trainer decides: per-unit parameters and optimizer
// state, so a checkpoint loads under any partition, PP or DP size), asynchronous saves.
#pragma once

#include "comm/communicator.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace omnibal::checkpoint {

/// One rank's part of a checkpoint: tensors by globally unique name (any device; written as
/// they are: bf16, fp16, fp32, fp64, int64, int32, ...) and free-form JSON state.
struct Shard {
  std::map<std::string, torch::Tensor> tensors;
  nlohmann::json state;
};

/// A directory of checkpoints step-N/ under `root_dir` (see the header comment).
class CheckpointStore {
 public:
  /// `keep_last` >= 1: newest checkpoints kept after each save; 0 keeps all. `world` is the
  /// communicator of every rank that writes shards; only save() is collective.
  CheckpointStore(std::string root_dir, int keep_last, comm::Communicator& world);

  /// Collective: saves this rank's `shard` as part of checkpoint `step` (>= 0), with the resolved
  /// config (rank 0's copy is written). Replaces an existing step-N only once the new one is
  /// complete. Throws omnibal::Error on every rank when any rank failed, or held a NaN / Inf in
  /// a floating tensor ("checkpoint step N refused: ...", the tensor named on its rank); then
  /// no step-N is created and earlier checkpoints are untouched.
  void save(int64_t step, const Shard& shard, const std::string& resolved_config_yaml);

  /// Path of the newest step-N whose manifest verifies (sizes and checksums) and whose tensors
  /// are finite (checkpoint_reader.h), or nullopt. Damaged, incomplete or non-finite
  /// directories and *.tmp leftovers are skipped with a log line saying why. Not collective; reads every file of the candidates it checks.
  std::optional<std::string> find_latest() const;

  /// Throws omnibal::Error listing everything in `dir` that differs from its manifest (missing
  /// file, size, checksum), or that the manifest itself is missing or malformed.
  void verify(const std::string& dir) const;

  /// The tensors `names` from whichever shard files of `dir` hold them (CPU, zero-copy views of
  /// the memory-mapped files, see safetensors.h). Throws one omnibal::Error listing every
  /// missing name. Does not verify checksums (call verify() or use find_latest()).
  std::map<std::string, torch::Tensor> load_tensors(const std::string& dir,
                                                    const std::vector<std::string>& names) const;
  /// Every tensor name stored in `dir` (from the manifest index), sorted.
  std::vector<std::string> tensor_names(const std::string& dir) const;

  /// Each saving rank's state, indexed by the rank that wrote it (size = world size at save).
  std::vector<nlohmann::json> load_states(const std::string& dir) const;

  /// The resolved config saved with the checkpoint.
  std::string load_config(const std::string& dir) const;

  /// Step number of a directory named step-N (path or name), or nullopt for anything else
  /// (including step-N.tmp).
  static std::optional<int64_t> parse_step_dir(const std::string& path);

  const std::string& root_dir() const { return root_; }

 private:
  std::string step_dir(int64_t step) const;
  /// Rank 0 after all shards are on disk: config, manifest, rename, fsync, prune.
  void finalize(int64_t step, const std::vector<uint64_t>& digests,
                const std::string& config) const;
  void prune(int64_t newest_step) const;

  std::string root_;
  int keep_last_;
  comm::Communicator& world_;
};

}  // namespace omnibal::checkpoint
