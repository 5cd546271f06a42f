#include "models/weight_grad_store.h"

#include <torch/csrc/autograd/custom_function.h>

#include <set>

#include "core/error.h"
#include "models/accumulate_grad_hook.h"

namespace omnibal::models {
namespace {

/// The recording in effect: set by WeightGradStore::Recording on the executor's thread and read
/// when a linear layer runs its forward (also on that thread, recomputation included).
struct ActiveRecording {
  c10::intrusive_ptr<WeightGradStore> store;
  int key = 0;
};
ActiveRecording& active() {
  static ActiveRecording a;
  return a;
}

/// The deferred linear node's backward: dx = dy W (when x needs it), (x, dy, W) filed for dW.
torch::Tensor input_grad_and_file(torch::autograd::AutogradContext* ctx, const torch::Tensor& dy) {
  const torch::Tensor x = ctx->get_saved_variables()[0];
  const torch::Tensor weight = ctx->saved_data["weight"].toTensor();
  torch::Tensor dx;
  if (ctx->needs_input_grad(0)) dx = dy.matmul(weight);
  auto store =
      c10::static_intrusive_pointer_cast<WeightGradStore>(ctx->saved_data["store"].toCapsule());
  // Detached: x comes back with its grad_fn, which would keep the upstream graph (and the
  // checkpoints of recomputed units) alive until W.
  store->file(static_cast<int>(ctx->saved_data["key"].toInt()), x.detach(), dy.detach(), weight);
  return dx;
}

void save_for_deferred(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                       const torch::Tensor& weight, c10::intrusive_ptr<WeightGradStore> store,
                       int64_t key) {
  ctx->save_for_backward({x});
  ctx->saved_data["weight"] = weight;  // the parameter itself: dW is added to its .grad
  ctx->saved_data["store"] = c10::IValue::make_capsule(std::move(store));
  ctx->saved_data["key"] = key;
}

/// y = x W^T whose backward returns dx and files (x, dy, W) for the deferred dW.
struct DeferredLinear : torch::autograd::Function<DeferredLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor weight, c10::intrusive_ptr<WeightGradStore> store,
                               int64_t key) {
    save_for_deferred(ctx, x, weight, std::move(store), key);
    return torch::nn::functional::linear(x, weight);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    return {input_grad_and_file(ctx, grad_out[0]), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

/// y = x W^T + b: as DeferredLinear, and db = sum of dy over the leading dims in B.
/// (Two nodes because LibTorch 1.13 refuses an undefined tensor as a custom function's input.)
struct DeferredLinearBias : torch::autograd::Function<DeferredLinearBias> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor weight, torch::Tensor bias,
                               c10::intrusive_ptr<WeightGradStore> store, int64_t key) {
    save_for_deferred(ctx, x, weight, std::move(store), key);
    return torch::nn::functional::linear(x, weight, bias);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const torch::Tensor& dy = grad_out[0];
    torch::Tensor db;
    if (ctx->needs_input_grad(2)) db = dy.reshape({-1, dy.size(-1)}).sum(0);
    return {input_grad_and_file(ctx, dy), torch::Tensor(), db, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

WeightGradStore::Recording::Recording(const c10::intrusive_ptr<WeightGradStore>& store, int key)
    : previous_(active().store), previous_key_(active().key) {
  active().store = store;
  active().key = key;
}

WeightGradStore::Recording::~Recording() {
  active().store = previous_;
  active().key = previous_key_;
}

WeightGradStore::RecomputedBackward::RecomputedBackward() {
  if (!active().store || active().store->defer_recomputed()) return;
  paused_ = active().store;
  paused_key_ = active().key;
  active().store.reset();
}

WeightGradStore::RecomputedBackward::~RecomputedBackward() {
  if (!paused_) return;
  active().store = paused_;
  active().key = paused_key_;
}

void WeightGradStore::file(int key, torch::Tensor input, torch::Tensor output_grad,
                           torch::Tensor weight) {
  std::lock_guard<std::mutex> lock(mutex_);
  filed_[key].push_back({std::move(input), std::move(output_grad), std::move(weight)});
}

int WeightGradStore::run(int key) {
  std::vector<Deferred> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = filed_.find(key);
    if (it == filed_.end()) return 0;
    work = std::move(it->second);
    filed_.erase(it);
  }
  // As AccumulateGrad: a weight's post-accumulate-grad hook runs once its dW of this key are
  // all in (after its last triple), with their sum in .grad.
  std::map<const void*, size_t> last;
  for (size_t i = 0; i < work.size(); ++i) last[work[i].weight.unsafeGetTensorImpl()] = i;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < work.size(); ++i) {
    Deferred& d = work[i];
    const torch::Tensor dy = d.output_grad.reshape({-1, d.output_grad.size(-1)});
    const torch::Tensor x = d.input.reshape({-1, d.input.size(-1)});
    torch::Tensor dw = dy.t().mm(x);  // [out, in], as autograd's linear backward
    torch::Tensor& grad = d.weight.mutable_grad();
    if (grad.defined()) grad.add_(dw);
    else grad = std::move(dw);
    if (last.at(d.weight.unsafeGetTensorImpl()) == i)
      compat::run_post_accumulate_grad_hook(d.weight);
  }
  return static_cast<int>(work.size());
}

int WeightGradStore::pending(int key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = filed_.find(key);
  return it == filed_.end() ? 0 : static_cast<int>(it->second.size());
}

int64_t WeightGradStore::held_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t bytes = 0;
  std::set<const void*> seen;  // q, k and v (w1 and w3) share their input: count it once
  auto add = [&](const torch::Tensor& t) {
    if (seen.insert(t.data_ptr()).second) bytes += t.numel() * t.element_size();
  };
  for (const auto& [key, list] : filed_)
    for (const auto& d : list) {
      add(d.input);
      add(d.output_grad);
    }
  return bytes;
}

void WeightGradStore::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  filed_.clear();
}

torch::Tensor linear_layer(const torch::Tensor& x, const torch::Tensor& weight,
                           const torch::Tensor& bias) {
  const ActiveRecording& a = active();
  if (!a.store || !torch::GradMode::is_enabled() || !weight.requires_grad())
    return torch::nn::functional::linear(x, weight, bias);
  if (!bias.defined())
    return DeferredLinear::apply(x, weight, a.store, static_cast<int64_t>(a.key));
  return DeferredLinearBias::apply(x, weight, bias, a.store, static_cast<int64_t>(a.key));
}

}  // namespace omnibal::models
