// Deferred weight gradients: the B / W split of zero-bubble pipeline schedules (Qi et al., "Zero
// Bubble Pipeline Parallelism", ICLR 2024, §2; ZB-H1 in lib/schedule/schedules.h).
//
// A backward pass computes, per linear layer y = x W^T + b, the input gradient dx = dy W (which
// the previous layer and stage wait for: "B") and the weight gradient dW = dy^T x (which nobody
// waits for until the optimizer: "W"). Every linear layer of the model goes through
// models::linear_layer(). While a WeightGradStore is recording (a Recording guard is alive) and grad
// mode is on, linear_layer() builds a node whose backward computes dx and db at once and files
// (x, dy, W) under the recording's key (the executor's chunk and micro-batch) instead of dW;
// WeightGradStore::run(key) later computes every filed dW = dy^T x and adds it to W.grad.
// Parameters of other ops (norms, embeddings, the ViT patch projection, layer scales) get their
// gradients in B as usual; the linear weights hold nearly all of W's FLOPs.
//
// Memory: between B and W each filed linear keeps its input x (which a plain backward frees at
// B) and its output gradient dy; the rest of the micro-batch's autograd graph is freed at B.
// Recomputed units (models/recompute.h) rebuild their graph inside B under the same recording,
// so their linears are deferred too (ZB-H1), unless the store is told not to
// (set_defer_recomputed(false), ZB-V): a recomputed unit's dW is then computed in its B, so no
// deferred W keeps the activations recomputation dropped (lib/schedule/README.md, "Deferred W and
// recomputation"). The store is shared with autograd's worker threads (CUDA
// backward runs there), hence the mutex. Gradients equal a plain backward's up to summation
// order (dW is the same product autograd computes).
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

namespace omnibal::models {

/// Deferred (x, dy, W) triples per key; see the file comment.
class WeightGradStore : public torch::CustomClassHolder {
 public:
  /// While alive (and grad mode is on), models::linear_layer() files its weight gradients in `store`
  /// under `key`. Not nestable across stores: one recording at a time per process.
  class Recording {
   public:
    Recording(const c10::intrusive_ptr<WeightGradStore>& store, int key);
    ~Recording();
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;

   private:
    c10::intrusive_ptr<WeightGradStore> previous_;
    int previous_key_;
  };

  /// Around a recomputed unit's rerun and backward (models/recompute.cpp): while alive, the
  /// recording in effect is paused when its store does not defer recomputed linears
  /// (set_defer_recomputed(false)), so their dW are computed in B; otherwise a no-op.
  class RecomputedBackward {
   public:
    RecomputedBackward();
    ~RecomputedBackward();
    RecomputedBackward(const RecomputedBackward&) = delete;
    RecomputedBackward& operator=(const RecomputedBackward&) = delete;

   private:
    c10::intrusive_ptr<WeightGradStore> paused_;
    int paused_key_ = 0;
  };

  /// Whether the linears a recomputed unit reruns inside a recorded backward are deferred like
  /// the others (true, the default: ZB-H1) or get their dW in B (false: ZB-V). Set between
  /// steps, read on autograd's threads.
  void set_defer_recomputed(bool defer) { defer_recomputed_ = defer; }
  bool defer_recomputed() const { return defer_recomputed_; }

  /// Adds dW = dy^T x of every triple filed under `key` to its weight's .grad (allocating it
  /// when undefined) and forgets them; after a weight's last triple of the key, runs its
  /// post-accumulate-grad hook, as autograd would (models/accumulate_grad_hook.h: an optimizer
  /// folds the gradient there). Returns how many were run.
  int run(int key);
  /// Triples filed under `key` and not yet run.
  int pending(int key) const;
  /// Bytes of x and dy held by all filed triples (a tensor filed by several linears counted once).
  int64_t held_bytes() const;
  /// Forgets every triple (an aborted step).
  void clear();

  /// Called from the linear node's backward (any thread).
  void file(int key, torch::Tensor input, torch::Tensor output_grad, torch::Tensor weight);

 private:
  struct Deferred {
    torch::Tensor input, output_grad, weight;
  };
  mutable std::mutex mutex_;
  std::map<int, std::vector<Deferred>> filed_;
  std::atomic<bool> defer_recomputed_{true};
};

/// y = x W^T + b for x [..., in], weight [out, in], bias [out] or undefined; returns [..., out].
/// Defers dW while a WeightGradStore records (file comment), else torch's linear.
torch::Tensor linear_layer(const torch::Tensor& x, const torch::Tensor& weight,
                           const torch::Tensor& bias = {});

}  // namespace omnibal::models
