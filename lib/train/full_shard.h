// FullShard: fully sharded data parallelism over one stage's units (train.shard full; DeepSpeed
// ZeRO-3, PyTorch FSDP). Each unit's parameters live as one flat buffer padded to a multiple of
// the DP size, of which every DP rank keeps 1/DP (`shard`, in the parameters' dtype) with its fp32
// master weights, AdamW moments and gradient accumulator. The unit's parameters are views of its
// full buffer, whose memory exists only while the unit computes:
//   before its forward (run_unit calls before_forward)  all-gather the shards into the buffer;
//   after its forward                                    release the memory (models/
//                                                        param_storage.h: autograd keeps its
//                                                        saved views, now without data);
//   before its backward (a hook on the unit's output)   all-gather again into the same memory;
//   when every trainable parameter of the unit has its gradient of this micro-batch
//   (post-accumulate-grad hooks), or at end_backward()  reduce-scatter the gradients into this
//                                                        rank's accumulator, drop them, release.
// A recomputed unit gathers once more for its rerun forward (the backward hook covers it). The
// optimizer steps each rank's shard (AdamW per parameter segment, decay on matrices as in
// adamw.h) and casts it to the parameters' dtype for the next gather. Frozen units (train.freeze)
// are sharded and gathered alike but have no gradient, master weights or moments. A parameter
// two units use (a tied head on the embedding's stage) belongs to the first unit's buffer; the
// second unit gathers that buffer too.
// Per micro-batch reduce-scatter (as FSDP outside no_sync) sums the same gradients as plain DP's
// one all-reduce of the accumulated gradient, within float reordering.
// As a StageOptimizer (stage_optimizer.h) it is train.shard full's optimizer: StageRuntime
// attaches it and calls end_backward() after each backward.
// Prefetch (OptimizerOptions::overlap: comm.overlap, DP > 1): before a unit's forward the next
// unit's all-gather is launched non-blocking, and when a unit's backward begins the previous
// unit's (FSDP's forward and backward prefetch); the next gather() waits for it. Every DP rank
// prefetches the same units in the same order (the collectives match by order); a prefetch no
// gather used is waited for and released at end_backward(). On MPI it progresses inside the next
// MPI call; NCCL runs it on its communicator's stream.
// Not here yet: CUDA side streams of our own, PP > 1 and ZB-H1 (a
// deferred W would need the weights after the backward released them): the config refuses them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "models/pipeline_unit.h"
#include "train/stage_optimizer.h"

namespace omnibal::train {

/// One stage's units fully sharded over a DP group (see the file comment). Install with
/// attach(); the units then run through models::run_unit as usual.
class FullShard : public StageOptimizer, public models::UnitParamHooks {
 public:
  using NamedParams = std::vector<std::pair<std::string, torch::Tensor>>;

  /// Shards `units` (initialised, identical on every DP rank) over `dp` (null: DP 1) as rank
  /// `shard.rank` of `shard.size`; parameters named "<unit>.<local name>". Options used:
  /// adam, precision (the units' dtype), reduce_dtype. Throws omnibal::Error when a unit mixes
  /// trainable and frozen parameters or the dtype differs from options.precision.
  FullShard(const std::vector<models::UnitPtr>& units, OptimizerOptions options,
            comm::Communicator* dp, DpShard shard);
  /// An empty FullShard: units come one by one through add_unit().
  FullShard(OptimizerOptions options, comm::Communicator* dp, DpShard shard);
  ~FullShard() override;
  FullShard(const FullShard&) = delete;
  FullShard& operator=(const FullShard&) = delete;

  /// Shards one more unit (the next in forward order; its values identical on every DP rank)
  /// and frees its whole parameters: a stage built unit by unit (models::make_chunk_units'
  /// on_unit) never holds more than one unit whole. Same errors as the constructor.
  void add_unit(const models::UnitPtr& unit);
  /// Takes the values of `unit`'s gathered parameters (written in place, e.g. by
  /// model.init_from) into this rank's shards and master weights. Throws omnibal::Error when the
  /// unit is not gathered (before_forward).
  void store_gathered(models::PipelineUnit& unit);
  /// Sets this object as every unit's param hooks (models::PipelineUnit::set_param_hooks).
  void attach();
  /// Gathers `unit`'s parameters (collective over DP) until after_forward() or release_unit().
  void before_forward(models::PipelineUnit& unit) override;
  /// Releases what before_forward gathered; in grad mode sets a hook on the output's gradient
  /// that gathers again for the backward and, for a unit without trainable parameters (frozen:
  /// no gradient releases it), a hook on the input's gradient that releases it once the unit's
  /// backward is done.
  void after_forward(models::PipelineUnit& unit, const models::UnitState& in,
                     const models::UnitState& out) override;
  /// Releases what before_forward(unit) gathered (outside a forward: to read a unit whole).
  void release_unit(models::PipelineUnit& unit);
  /// After each micro-batch's backward: reduce-scatters the gradients the hooks have not, then
  /// releases every gathered buffer. Collective over DP.
  void end_backward();

  ShardMode shard_mode() const override { return ShardMode::kFull; }
  const OptimizerOptions& options() const override { return options_; }
  /// Zeroes this rank's gradient accumulators.
  void zero_grad() override;
  /// Collective over DP and `scope`'s groups: the global L2 norm of the gradient (each element
  /// counted on the rank that holds its shard; names in scope.exclude left out).
  double grad_norm(const GradNormScope& scope = {}) override;
  double local_grad_sq() const override { return local_grad_sq_; }
  /// Scales the accumulators by min(1, max_norm / (norm + 1e-6)); returns the factor. No-op when
  /// max_norm <= 0; throws omnibal::Error on a non-finite norm.
  double clip(double norm, double max_norm) override;
  /// AdamW at `lr` on this rank's shards, then the shards in the parameters' dtype.
  void step(double lr) override;
  /// A step left out (train.on_nonfinite skip): the accumulators zeroed, nothing else changed.
  void skip_step() override { zero_grad(); }
  int64_t steps() const override { return steps_; }
  void set_steps(int64_t steps) override { steps_ = steps; }
  /// Nothing is in flight between steps: the gathers happen around each unit's compute.
  void wait_params(int /*chunk*/ = -1) override {}
  bool params_resident() const override { return false; }

  /// Collective over DP: every trainable parameter's whole fp32 master weight and moments by
  /// name ("<name>", "<name>#exp_avg", "<name>#exp_avg_sq"), as DistributedOptimizer's, and
  /// every frozen parameter's value as fp32 under "<name>"; gathered one unit at a time.
  std::map<std::string, torch::Tensor> state_tensors(bool keep = true) override;
  std::vector<std::string> state_names() const override;
  /// Takes whole master weights and moments by name into this rank's shards (and the
  /// parameters), frozen parameters by "<name>". Throws omnibal::Error naming a missing name or
  /// a size mismatch.
  void load_state_tensors(const std::map<std::string, torch::Tensor>& state) override;
  int64_t state_bytes() const override { return resident_bytes().optimizer; }
  int64_t main_grad_bytes() const override { return resident_bytes().grads; }

  /// Collective over DP: gathers every unit's parameters (to read them whole) until
  /// release_all().
  void gather_all();
  void release_all();
  /// Most bytes of whole (gathered or prefetched) unit buffers held at once so far.
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  /// Gathers launched ahead by prefetch() so far.
  int64_t prefetches() const { return prefetches_; }
  /// What this rank holds now (see ShardBytes).
  ShardBytes resident_bytes() const;

 private:
  struct Group;
  void gather(Group& g);
  void release(Group& g);
  void reduce_scatter(Group& g);
  /// Lays `g` out flat, keeps this rank's shard (and state when trainable), frees the rest.
  void shard_group(Group& g);
  /// comm.overlap: launches the all-gather of `unit`'s groups not held (non-blocking), for the
  /// next gather() to wait on. No-op for null, without overlap or at DP 1.
  void prefetch(const models::PipelineUnit* unit);
  /// Adds `bytes` (negative: freed) to the whole buffers held now and their peak.
  void count_gathered(int64_t bytes);
  /// Waits for a prefetch never used, then releases every hold of `g`.
  void settle(Group& g);
  /// The unit `step` places after `unit` in forward order (-1: before), or null.
  const models::PipelineUnit* neighbour(const models::PipelineUnit& unit, int step) const;
  /// (name suffix, this rank's tensor) of what a group stores: master weight and moments, or a
  /// frozen group's shard alone.
  static std::vector<std::pair<const char*, torch::Tensor*>> parts_of(Group& g);
  const std::vector<Group*>& groups_of(const models::PipelineUnit& unit) const;

  OptimizerOptions options_;
  comm::Communicator* dp_ = nullptr;
  DpShard shard_;
  std::vector<models::UnitPtr> units_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::map<const models::PipelineUnit*, std::vector<Group*>> unit_groups_;
  std::map<const models::PipelineUnit*, size_t> position_;  ///< index in units_ (forward order)
  std::map<const void*, Group*> owner_;  ///< by TensorImpl: a parameter two units use
  int64_t steps_ = 0;
  int64_t prefetches_ = 0;
  int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;  ///< see peak_gathered_bytes()
  double local_grad_sq_ = 0;
};

}  // namespace omnibal::train
