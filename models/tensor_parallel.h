// Megatron-style tensor parallelism (Shoeybi et al. 2019, §3) as the model sees it: which slice
// of a parameter a TP rank holds (ShardSpec), the conjugate collectives as autograd functions,
// and the vocab-parallel cross-entropy that never gathers full logits.
//   copy_to_tp      "f": identity forward, all-reduce (sum) of the gradient in backward; in
//                   front of column-parallel layers that read a replicated activation.
//   reduce_from_tp  "g": all-reduce (sum) forward, identity backward; after row-parallel layers,
//                   whose output is replicated again.
//   sum_over_tp     all-reduce in both directions: a partial sum whose total is read by sharded
//                   code (InternViT's qk-norm: the mean square over all heads, see vit.h).
// Every rank of a TP group runs the same units on the same micro-batch in the same order, so
// the collectives of the forward, of the backward and of a recomputed forward (recompute.h)
// match up. The group itself is abstract (TpCollectives); lib/train adapts a comm::Communicator
// to it, so models/ stays free of MPI. With size 1 every function here is the identity and the
// units take their unsharded code path (bitwise the same as before TP existed).
// Not here: sequence parallelism, async all-reduce overlap, fused column+gelu kernels.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "core/model_preset.h"

namespace omnibal::models {

/// Collectives of one TP group, in place on contiguous tensors. Implementations must give every
/// rank bitwise the same result (so replicated parameters stay identical across TP ranks).
class TpCollectives : public torch::CustomClassHolder {
 public:
  enum class Op { kSum, kMax, kMin };
  /// In-place all-reduce of `t` over the group.
  virtual void all_reduce(torch::Tensor& t, Op op) = 0;
  /// All-gather: returns [size * n] from each rank's contiguous [n] `local`, rank order.
  virtual torch::Tensor all_gather(const torch::Tensor& local) = 0;
};

/// This rank's place in its tensor-parallel group. size 1 (the default): no TP.
/// `group` may be null with size > 1 only for single-process profiling of one TP rank's
/// shard (for_profiling()): collectives are then skipped (right shapes and costs, not values).
struct TensorParallel {
  int rank = 0;
  int size = 1;
  c10::intrusive_ptr<TpCollectives> group;

  bool active() const { return size > 1; }
  /// A stand-in for TP rank `rank` of `size` without a group: the units hold and compute the
  /// shard, collectives are no-ops (the start-up profiler times a TP rank's compute alone).
  static TensorParallel for_profiling(int rank, int size) { return {rank, size, {}}; }
};

/// Which slice of a parameter a TP rank holds. dim < 0: replicated (every rank has the whole
/// tensor). Otherwise the tensor is padded with zeros along `dim` to `padded` rows (0: no
/// padding; the vocabulary of embedding and head), viewed as `groups` equal chunks along `dim`
/// (3 for a fused q/k/v weight), and rank r holds part r of each chunk, concatenated.
struct ShardSpec {
  int dim = -1;
  int groups = 1;
  int64_t padded = 0;
  int64_t rows = 0;  ///< the full tensor's size along dim (set by make_units when sharding)
  bool sharded() const { return dim >= 0; }
};

/// Vocabulary rows per TP rank: padded_vocab_size(vocab, tp) / tp (core/model_preset.h);
/// padded rows never win and never count. check_tensor_parallel is in core/model_preset.h too.
int64_t vocab_per_rank(int64_t vocab, int tp);

/// Rank r's slice of the full (unsharded, unpadded) tensor `full` under `spec`; a contiguous
/// copy. Returns `full` itself when replicated or tp.size == 1. Throws omnibal::Error when the
/// dimension does not divide into groups * tp.size parts.
torch::Tensor shard_of(const torch::Tensor& full, const ShardSpec& spec, const TensorParallel& tp);

/// Collective over the TP group: the full tensor from every rank's shard `local` (the inverse
/// of shard_of: padding removed, spec.rows rows along spec.dim). Returns `local` when
/// replicated or tp.size == 1.
torch::Tensor gather_full(const torch::Tensor& local, const ShardSpec& spec,
                          const TensorParallel& tp);

/// "f": identity forward, gradient all-reduced over the TP group in backward.
torch::Tensor copy_to_tp(const torch::Tensor& x, const TensorParallel& tp);
/// "g": all-reduced (sum) forward, identity backward.
torch::Tensor reduce_from_tp(const torch::Tensor& x, const TensorParallel& tp);
/// All-reduce (sum) forward and backward: each rank's partial of a total that every rank then
/// uses on its own shard.
torch::Tensor sum_over_tp(const torch::Tensor& x, const TensorParallel& tp);

/// Row-parallel linear: x [..., in/tp] times this rank's weight [out, in/tp], reduced over TP,
/// plus the replicated bias (once, after the reduction). x @ weight^T + bias at size 1.
torch::Tensor row_parallel_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                  const torch::Tensor& bias, const TensorParallel& tp);

/// Vocab-parallel token cross-entropy (Megatron's _VocabParallelCrossEntropy).
/// logits [K, V/tp] fp32: this rank's columns, global ids [vocab_start, vocab_start + V/tp);
/// columns at or past `vocab` (padding) are excluded. targets [K] int64 global ids in [0, vocab).
/// Returns the per-token loss [K] fp32 (logsumexp - target logit), equal on every TP rank; the
/// backward gives softmax - onehot on this rank's columns (zero on padding). Three all-reduces
/// of [K] (max, sum of exp, target logit); full logits are never formed.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits,
                                           const torch::Tensor& targets, int64_t vocab_start,
                                           int64_t vocab, const TensorParallel& tp);

/// Argmax over the whole vocabulary from this rank's logits [K, V/tp] (padding excluded):
/// [K] int64 global ids, the lowest id among equal maxima (as torch::argmax). Two all-reduces.
torch::Tensor vocab_parallel_argmax(const torch::Tensor& logits, int64_t vocab_start, int64_t vocab,
                                    const TensorParallel& tp);

}  // namespace omnibal::models
