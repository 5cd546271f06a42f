// Whether the floating-point tensors of a checkpoint are finite. CheckpointStore::save refuses a
// shard holding a NaN / Inf (on every rank, nothing written, earlier checkpoints untouched) and
// then marks the manifest "all_finite": true; checkpoints without the mark (written before the
// check existed) are scanned by find_latest_checkpoint / verify_checkpoint
// (checkpoint_reader.h), so `--resume auto` never continues from a diverged run's weights.
// Integer and bool tensors (counters, ids) are finite by construction and not looked at.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace omnibal::checkpoint {

/// Counts of one tensor's non-finite elements.
struct NonFiniteCount {
  int64_t nan = 0;
  int64_t inf = 0;    ///< +Inf and -Inf
  int64_t total = 0;  ///< elements of the tensor
};

/// The counts of `t` (any device, any floating dtype); all zero but `total` when finite or when
/// `t` is not floating-point.
NonFiniteCount count_nonfinite(const torch::Tensor& t);

/// One line per non-finite floating tensor of `tensors`, in name order:
/// "'llm_head.output.weight' holds 12 nan and 0 inf of 3072 values"; empty when all are finite.
std::vector<std::string> nonfinite_tensors(const std::map<std::string, torch::Tensor>& tensors);

/// The same for every tensor stored in checkpoint `dir`, each line prefixed with its file
/// ("rank-1.safetensors: '...' holds ..."); empty without looking at the data when the manifest
/// says "all_finite" (the store checked them at save). Reads every shard of an older checkpoint
/// (memory-mapped). Throws omnibal::Error when the manifest or a shard header is unreadable.
std::vector<std::string> checkpoint_nonfinite_tensors(const std::string& dir);

}  // namespace omnibal::checkpoint
