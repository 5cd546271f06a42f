// Post-accumulate-grad hooks from C++ (the LibTorch side of Python's
// Tensor.register_post_accumulate_grad_hook, PyTorch >= 2.1): a function autograd calls with a
// leaf tensor right after its AccumulateGrad node has written the tensor's .grad. An optimizer
// uses it to fold each gradient into its own buffer as soon as it is produced and to release it
// (train/distributed_optimizer.h: bf16 gradients into the fp32 main gradient).
//
// LibTorch has no public C++ registration; torch::autograd::impl::set_post_acc_grad_hooks (the
// slot Python's hooks use, one per tensor, exported by libtorch) takes any
// PostAccumulateGradHook. AccumulateGrad calls the hook once per backward that reaches the
// tensor, after all of that backward's contributions have been summed (the engine's input
// buffer), also when the incoming gradient is undefined. Code that writes .grad outside
// autograd (models/weight_grad_store.h, the deferred W) calls run_post_accumulate_grad_hook()
// to do the same.
//
// Version-specific, like models/torch_compat.h: before LibTorch 2.1 there is no such slot;
// set_post_accumulate_grad_hook() then sets nothing and returns false, and callers keep
// folding after the backward.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <functional>
#include <utility>

/// 1 when LibTorch has post-accumulate-grad hooks (>= 2.1).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define OMNIBAL_TORCH_HAS_POST_ACC_GRAD_HOOK 1
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#else
#define OMNIBAL_TORCH_HAS_POST_ACC_GRAD_HOOK 0
#endif

namespace omnibal::models::compat {

/// Called with the parameter whose .grad autograd has just accumulated into.
using PostAccumulateGradFn = std::function<void(const torch::Tensor& param)>;

#if OMNIBAL_TORCH_HAS_POST_ACC_GRAD_HOOK
namespace detail {
/// The hook object in the tensor's slot: the function and the owner that set it.
struct OwnedPostAccumulateGradHook : torch::autograd::PostAccumulateGradHook {
  OwnedPostAccumulateGradHook(PostAccumulateGradFn f, const void* o) : fn(std::move(f)), owner(o) {}
  void operator()(const torch::autograd::Variable& param) override { fn(param); }
  PostAccumulateGradFn fn;
  const void* owner;
};
}  // namespace detail
#endif

/// True when this LibTorch has post-accumulate-grad hooks.
constexpr bool has_post_accumulate_grad_hook() { return OMNIBAL_TORCH_HAS_POST_ACC_GRAD_HOOK != 0; }

/// Sets `fn` as the post-accumulate-grad hook of leaf tensor `param` (replacing any earlier one;
/// a tensor has one slot), tagged with `owner` for clear_post_accumulate_grad_hook(). Returns
/// false and sets nothing on LibTorch < 2.1.
inline bool set_post_accumulate_grad_hook(const torch::Tensor& param, PostAccumulateGradFn fn,
                                          const void* owner) {
#if OMNIBAL_TORCH_HAS_POST_ACC_GRAD_HOOK
  torch::autograd::impl::set_post_acc_grad_hooks(
      param, std::make_unique<detail::OwnedPostAccumulateGradHook>(std::move(fn), owner));
  return true;
#else
  (void)param, (void)fn, (void)owner;
  return false;
#endif
}

/// Removes `param`'s post-accumulate-grad hook if `owner` set it (another owner's stays).
inline void clear_post_accumulate_grad_hook(const torch::Tensor& param, const void* owner) {
#if OMNIBAL_TORCH_HAS_POST_ACC_GRAD_HOOK
  auto& hook = torch::autograd::impl::post_acc_grad_hooks(param);
  const auto* ours = dynamic_cast<const detail::OwnedPostAccumulateGradHook*>(hook.get());
  if (ours != nullptr && ours->owner == owner) hook.reset();
#else
  (void)param, (void)owner;
#endif
}

/// Runs `param`'s post-accumulate-grad hook, if it has one, as AccumulateGrad does after
/// writing .grad: for code that writes .grad itself. No-op on LibTorch < 2.1.
inline void run_post_accumulate_grad_hook(const torch::Tensor& param) {
#if OMNIBAL_TORCH_HAS_POST_ACC_GRAD_HOOK
  const auto& hook = torch::autograd::impl::post_acc_grad_hooks(param);
  if (hook != nullptr) (*hook)(param);
#else
  (void)param;
#endif
}

}  // namespace omnibal::models::compat
