#include "models/recompute.h"

#include <torch/csrc/autograd/custom_function.h>

#include "models/weight_grad_store.h"

namespace omnibal::models {

namespace {

/// What the backward needs to rerun the unit: the unit and its input state.
struct RecomputeContext : torch::CustomClassHolder {
  PipelineUnit* unit = nullptr;
  UnitState input;
};

/// Autograd node that hides the unit's graph; inputs (hidden, anchor), output the next hidden.
/// `anchor` is a scalar that requires grad, so backward also runs when the input hidden does
/// not require grad (the first unit sees pixels), and the parameters still get gradients.
struct RecomputeFunction : torch::autograd::Function<RecomputeFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor hidden,
                               torch::Tensor anchor, c10::intrusive_ptr<RecomputeContext> rc) {
    (void)anchor;
    torch::Tensor out;
    {
      torch::NoGradGuard no_grad;
      out = rc->unit->forward(rc->input.with_hidden(hidden, rc->input.phase)).hidden;
    }
    ctx->saved_data["rc"] = c10::IValue::make_capsule(rc);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto rc =
        c10::static_intrusive_pointer_cast<RecomputeContext>(ctx->saved_data["rc"].toCapsule());
    torch::Tensor input = rc->input.hidden.detach();
    const bool input_grad = input.is_floating_point() && rc->input.hidden.requires_grad();
    if (input_grad) input.requires_grad_(true);
    {
      torch::AutoGradMode enable(true);
      // ZB-V: the rerun's linears get their dW here, in B (weight_grad_store.h).
      WeightGradStore::RecomputedBackward in_b;
      const torch::Tensor out =
          rc->unit->forward(rc->input.with_hidden(input, rc->input.phase)).hidden;
      torch::autograd::backward({out}, {grad_out[0]});
    }
    return {input_grad ? input.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

namespace {

/// Whether anything of `unit`'s forward on `state` needs a gradient: its input or a parameter.
bool needs_grad(PipelineUnit& unit, const UnitState& state) {
  if (state.hidden.requires_grad()) return true;
  for (const auto& p : unit.parameters())
    if (p.requires_grad()) return true;
  return false;
}

UnitState run_unit_forward(PipelineUnit& unit, const UnitState& state) {
  // A frozen unit on an input without gradient (a frozen ViT) builds no graph: nothing to
  // recompute, and a backward through the anchor would find nothing that requires grad.
  if (!unit.recompute() || !torch::GradMode::is_enabled() || unit.kind() == UnitKind::kLlmHead ||
      !state.hidden.defined() || !needs_grad(unit, state))
    return unit.forward(state);
  auto rc = c10::make_intrusive<RecomputeContext>();
  rc->unit = &unit;
  rc->input = state;
  const torch::Tensor anchor = torch::zeros({}, torch::requires_grad());
  torch::Tensor out = RecomputeFunction::apply(state.hidden, anchor, rc);
  return state.with_hidden(out, unit.output_phase());
}

}  // namespace

UnitState run_unit(PipelineUnit& unit, const UnitState& state) {
  UnitParamHooks* hooks = unit.param_hooks();
  if (hooks == nullptr) return run_unit_forward(unit, state);
  hooks->before_forward(unit);
  UnitState out = run_unit_forward(unit, state);
  hooks->after_forward(unit, state, out);
  return out;
}

}  // namespace omnibal::models
