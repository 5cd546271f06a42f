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
#include "partition/tensor_parallel.h"

namespace omnibal::train {

/// This rank's TensorParallel over comms.tp_group() (size 1, no group, when parallel.tp = 1).
models::TensorParallel tensor_parallel_of(comm::ParallelComms& comms);
/// TensorParallel over any communicator (rank and size are the group's); `group` must outlive
/// the units built with it.
models::TensorParallel tensor_parallel_over(comm::Communicator& group);

/// Wall seconds this rank spent in TP all-reduces so far (forward, backward, recomputation and
/// the vocab-parallel loss; waiting for the other TP ranks included). 0 without TP.
double tp_all_reduce_seconds(const models::TensorParallel& tp);

/// Collective over the world: the TP link as this run's TP groups see it, for the start-up
/// planner (partition::TpLink: latency from 8-byte all-reduces, bus bandwidth from 4 MiB ones
/// in the run's dtype on `device`, each TP group timing its own; the largest latency and the
/// smallest bandwidth over the world, so every rank plans with the same figures). A fraction
/// of a second. Without TP: an empty link (no bandwidth).
partition::TpLink measure_tp_link(comm::ParallelComms& comms, const torch::Device& device,
                                  torch::Dtype dtype);

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
  /// This rank's shard of the full tensor `full` of `name` (identity when replicated). Throws
  /// omnibal::Error naming `origin` (a checkpoint, model.init_from) when `full` does not have
  /// the unsharded size along the split dimension.
  torch::Tensor shard(const std::string& name, const torch::Tensor& full,
                      const std::string& origin) const;
  /// Gives `name` the spec of `same_as` (a tied head's copy held under the embedding's name).
  void alias(const std::string& name, const std::string& same_as);
  /// Names of the replicated parameters among `names`.
  std::set<std::string> replicated_names(const std::vector<std::string>& names) const;

 private:
  models::TensorParallel tp_;
  std::map<std::string, models::ShardSpec> specs_;
};

}  // namespace omnibal::train
