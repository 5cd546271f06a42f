// The trainer's side of tensor parallelism: the model's TP collectives (models/tensor_parallel.h)
// over this rank's TP communicator (comm/parallel_comms.h, MPI or NCCL), and the per-parameter
// shard layout the optimizer, checkpoints and parameter hash need to see a TP rank's shards as
// the unsharded tensors of one process (gather on save, shard on load).
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/parallel_comms.h"
#include "models/pipeline_unit.h"

namespace omnibal::train {

/// This rank's TensorParallel over comms.tp_group() (size 1, no group, when parallel.tp = 1).
models::TensorParallel tensor_parallel_of(comm::ParallelComms& comms);

/// Wall seconds this rank spent in TP all-reduces so far (forward, backward, recomputation and
/// the vocab-parallel loss; waiting for the other TP ranks included). 0 without TP.
double tp_all_reduce_seconds(const models::TensorParallel& tp);

/// The shard layout of one stage's parameters, by full name ("llm_block_0.attention.wq.weight").
class TpLayout {
 public:
  TpLayout() = default;
  TpLayout(const std::vector<models::UnitPtr>& units, models::TensorParallel tp);

  bool active() const { return tp_.active(); }
  const models::TensorParallel& tp() const { return tp_; }
  /// The spec of `name` (parameter or "name#exp_avg"-style state: the part before '#');
  /// replicated when unknown.
  models::ShardSpec spec(const std::string& name) const;
  /// Whether `name` is held whole by every TP rank (counted once in norms and hashes).
  bool replicated(const std::string& name) const { return !spec(name).sharded(); }
  /// Collective over TP: the full tensor of `name` from this rank's shard (identity when
  /// replicated or TP is off). Every TP rank must call it for the same names in the same order.
  torch::Tensor gather(const std::string& name, const torch::Tensor& local) const;
  /// This rank's shard of the full tensor `full` of `name` (identity when replicated).
  torch::Tensor shard(const std::string& name, const torch::Tensor& full) const;
  /// Names of the replicated parameters among `names`.
  std::set<std::string> replicated_names(const std::vector<std::string>& names) const;

 private:
  models::TensorParallel tp_;
  std::map<std::string, models::ShardSpec> specs_;
};

}  // namespace omnibal::train
