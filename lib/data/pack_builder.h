// Pack materialisation (docs/paper.md): the samples of one pack (one micro-batch on one device)
// concatenated into a models::PackBatch, position ids restarting at 0 for every sample and
// cu_seqlens holding the sample boundaries, so packed attention never crosses samples. Only the
// parts a pipeline stage needs are built: decoding and tiling images is by far the most
// expensive part and only the first stage needs it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "data/bad_sample.h"
#include "data/conversation_dataset.h"
#include "data/sample_processor.h"
#include "models/pack_batch.h"

namespace omnibal::data {

/// Which tensors of a PackBatch to build. image_flags, position_ids, cu_seqlens and sample_ids
/// are always built (they are cheap and every stage needs the boundaries).
struct PackParts {
  bool pixels = true;     ///< pixel_values: decode + tile + normalise images (first stage)
  bool input_ids = true;  ///< input_ids (first stage; later stages get them with the activation)
  bool labels = true;     ///< labels (first stage, which sends them on; last stage: the loss)

  /// Everything (single-stage training, tests).
  static PackParts all() { return {true, true, true}; }
  /// Pipeline stage `stage` of `stages`. Stage 0 gets everything: its units start from the pack
  /// (models::UnitState::from_pack needs ids and labels) and the activation it sends carries
  /// ids, positions, labels and boundaries on to every later stage. The last stage gets labels
  /// too: it needs them before its activation arrives (the step's loss normaliser) and checks
  /// its pack against what arrives. A middle stage gets nothing (it loads no packs).
  static PackParts for_stage(int stage, int stages) {
    return {stage == 0, stage == 0, stage == 0 || stage == stages - 1};
  }
};

/// Builds PackBatches from global sample ids of a ConversationDataset. Thread-safe.
class PackBuilder {
 public:
  /// `dataset` and `processor` must outlive the builder.
  PackBuilder(const ConversationDataset& dataset, const SampleProcessor& processor,
              OnBadSample policy);

  /// The pack of `sample_ids` (global indices, in pack order). A bad sample throws its
  /// BadSampleError under OnBadSample::kError; under kSkip it is left out of the pack,
  /// counted in `counts` (required then) and absent from PackBatch::sample_ids. Under kSkip
  /// images are decoded even when `parts.pixels` is false, so that every pipeline stage skips
  /// the same samples. Tensors:
  /// pixel_values [tiles, 3, S, S] float32; image_flags [tiles], input_ids / labels /
  /// position_ids [T], cu_seqlens [n + 1], all int64. A pack whose every sample was skipped has
  /// n = 0, T = 0 and no tiles. A sample found bad while decoding is remembered (thread-safe)
  /// and not processed again by a decoding build: later packs (the next epoch, another loader
  /// worker) rethrow or count its first BadSampleError without reopening its images.
  models::PackBatch build(const std::vector<int64_t>& sample_ids, const PackParts& parts,
                          BadSampleCounts* counts = nullptr) const;

  /// Checks every built sample against the lengths the plan was made from (authors' code: "assert
  /// the stored lengths match the sample"), indexed by global sample id; a mismatch throws
  /// omnibal::Error naming the sample (stale length files: rerun `omnibal-plan scan`).
  void expect_lengths(std::vector<SampleLengths> lengths);

  /// The dataset packs refer to.
  const ConversationDataset& dataset() const { return dataset_; }

  /// Samples run through SampleProcessor::process so far (their images decoded when the parts
  /// need pixels or under kSkip); a sample remembered as bad is not run again.
  int64_t samples_processed() const { return processed_.load(); }

 private:
  void check_lengths(int64_t id, const ProcessedSample& sample) const;
  ProcessedSample process(int64_t id, const SampleParts& parts) const;

  const ConversationDataset& dataset_;
  const SampleProcessor& processor_;
  OnBadSample policy_;
  std::vector<SampleLengths> expected_;  ///< empty = no check
  mutable std::mutex bad_mutex_;
  /// By global id: samples found bad while decoding.
  mutable std::unordered_map<int64_t, BadSampleError> bad_;
  mutable std::atomic<int64_t> processed_{0};
};

/// The lengths listed by the meta file's token_lengths files, concatenated in dataset order
/// (global sample ids). Throws omnibal::Error when a dataset has no token_lengths or its file
/// does not hold one entry per annotation entry.
std::vector<SampleLengths> load_meta_lengths(const ConversationDataset& dataset);

}  // namespace omnibal::data
