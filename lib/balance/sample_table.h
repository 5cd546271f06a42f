// SampleTable: the per-sample loads of a training set, held as struct-of-arrays so the packers
// walk only the 8-byte load array. A load is a small fixed vector, (ViT tiles, LLM tokens) today;
// a further encoder adds one dimension (kLoadDims) and every packer, metric and budget follows.
// Each sample keeps the dataset it came from and its index in that dataset's length file, which
// is what a plan hands to the trainer. Reading files lives in length_reader.h; this file does
// no I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace omnibal::balance {

/// Number of load dimensions of a sample (ViT tiles, LLM tokens).
inline constexpr int kLoadDims = 2;
/// Index of the ViT tile count in a Load.
inline constexpr int kTiles = 0;
/// Index of the LLM token count in a Load.
inline constexpr int kTokens = 1;
/// Human names of the load dimensions, for messages, tables and JSON.
inline constexpr std::array<const char*, kLoadDims> kLoadDimNames = {"tiles", "tokens"};

/// One sample's load: tiles into the ViT (thumbnail and dummy tiles included, docs/paper.md) and
/// the final LLM sequence length in tokens (image tokens included).
struct Load {
  std::array<int32_t, kLoadDims> v{};
  int32_t tiles() const { return v[kTiles]; }
  int32_t tokens() const { return v[kTokens]; }
};

/// Where a group of samples came from: one length file (or one meta-file entry).
struct DatasetInfo {
  std::string name;          ///< meta-file key, or the length file's stem
  std::string path;          ///< length file the records were read from
  int64_t records = 0;       ///< records in the file (before repeat_time)
  int64_t failed_stats = 0;  ///< records with vit_num = -1 (statistics failed), never packed
  double repeat_time = 1.0;  ///< InternVL repeat_time applied when reading
};

/// Per-sample loads plus provenance, indexed by a dense sample id in [0, size()).
struct SampleTable {
  std::vector<Load> load;             ///< [samples] tiles and tokens
  std::vector<int32_t> image_flags;   ///< [samples] real (non-dummy) tiles
  std::vector<uint32_t> dataset;      ///< [samples] index into datasets
  std::vector<uint32_t> index;        ///< [samples] element index in the dataset's length file
  std::vector<DatasetInfo> datasets;  ///< one entry per source

  /// Number of samples that can be packed (failed-statistics records are not counted).
  size_t size() const { return load.size(); }
  /// Records skipped at read time because their statistics failed (vit_num = -1), all datasets.
  int64_t failed_stats() const;
  /// Registers a dataset and returns its id.
  uint32_t add_dataset(DatasetInfo info);
  /// Appends one sample of dataset `ds` read from element `element` of its file.
  void add(uint32_t ds, uint32_t element, Load l, int32_t flags);
  /// Mean load per dimension over all samples (0 for an empty table).
  std::array<double, kLoadDims> mean_load() const;
  /// Largest load per dimension over all samples.
  std::array<int32_t, kLoadDims> max_load() const;
  /// "sample 17 of dataset 'ai2d' (path)": how messages name a sample.
  std::string describe(uint32_t sample) const;
};

/// The samples of `table` listed in `ids`, in that order, with the same datasets (ids refer to
/// `table`). Used for per-source packing and search subsamples.
SampleTable subset(const SampleTable& table, const std::vector<uint32_t>& ids);

/// `n` samples drawn uniformly with replacement from `table` (omnibal::Rng seeded with `seed`),
/// keeping each draw's dataset and file index: how the benchmark builds a 1.27M-sample set from
/// the 40,941 shared records (the paper's 1.2M mixture, docs/paper.md#experimental-setup).
SampleTable resample(const SampleTable& table, size_t n, uint64_t seed);

}  // namespace omnibal::balance
