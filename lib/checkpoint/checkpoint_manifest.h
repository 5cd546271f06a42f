// manifest.json of a checkpoint directory: what a complete checkpoint step-N/ contains and how
// to check it. Rank 0 writes it last, after every rank's shard is on disk, and the directory is
// renamed from step-N.tmp only afterwards, so a manifest that verifies means a complete
// checkpoint (checkpoint_store.h has the protocol).
//
//   {"format": "omnibal-checkpoint", "version": 2, "step": 120, "world_size": 4,
//    "files": [{"name": "rank-0.safetensors", "bytes": 123, "xxh3_64": "0f1e..."}, ...],
//    "tensors": {"llm_block_3.attention.wq.weight": "rank-1.safetensors", ...},
//    "config_file": "config.yaml", "all_finite": true, "manifest_xxh3_64": "9a0b..."}
//
// manifest_xxh3_64 checks the manifest itself: the XXH3-64 of the compact JSON of every other
// field (nlohmann's dump(), keys sorted), so an edited or damaged manifest is refused before
// its file list is trusted (`--resume auto` then skips the checkpoint). Version 1 manifests,
// written before the field existed, are read without that check.
// all_finite: every floating tensor of every shard was checked finite at save (the store refuses
// a NaN / Inf, tensor_finiteness.h); absent in checkpoints written before that check, whose
// tensors readers scan instead.
//
// Not here: writing shards, renaming, pruning (checkpoint_store.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace omnibal::checkpoint {

/// One file of a checkpoint: name relative to the directory, size and XXH3-64 (16 hex digits).
struct ManifestFile {
  std::string name;
  uint64_t bytes = 0;
  std::string xxh3_64;
};

/// The parsed manifest.json of a checkpoint directory.
struct CheckpointManifest {
  static constexpr const char* kFormat = "omnibal-checkpoint";
  static constexpr int kVersion = 2;
  static constexpr const char* kFileName = "manifest.json";
  static constexpr const char* kConfigFile = "config.yaml";

  int64_t step = 0;
  int world_size = 0;                          ///< ranks that wrote shards
  std::vector<ManifestFile> files;             ///< every file but manifest.json
  std::map<std::string, std::string> tensors;  ///< tensor name -> file holding it
  /// The store checked every floating tensor finite at save (written only when true; false for
  /// checkpoints from before the check).
  bool all_finite = false;

  /// The manifest with its own checksum (manifest_xxh3_64).
  nlohmann::json to_json() const;
  /// Parses and checks the fields and (version 2) the manifest's own checksum; `origin` (the
  /// file path) is named in errors.
  static CheckpointManifest from_json(const nlohmann::json& j, const std::string& origin);
  /// Reads <dir>/manifest.json. Throws omnibal::Error naming the file when it is missing,
  /// unreadable, not JSON, lacks a field, or does not match its own checksum.
  static CheckpointManifest read(const std::string& dir);
};

/// Every way `dir` differs from its manifest: one line per problem ("rank-1.safetensors: size
/// 1000 bytes, manifest says 1024", "... checksum ..., manifest says ...", "... missing").
/// Empty when the directory verifies. Throws omnibal::Error when the manifest itself is
/// missing or malformed.
std::vector<std::string> checkpoint_differences(const std::string& dir);

}  // namespace omnibal::checkpoint
