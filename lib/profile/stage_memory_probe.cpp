#include "profile/stage_memory_probe.h"

#include "core/error.h"
#include "profile/memory_meter.h"
#include "profile/unit_profiler.h"

namespace omnibal::profile {
namespace {

using models::UnitState;

/// A received activation (or a loaded pack) allocated inside the meter.
UnitState received(const UnitState& s, bool needs_grad) {
  UnitState in = s.with_hidden(s.hidden.detach().clone(), s.phase);
  if (needs_grad && in.hidden.is_floating_point()) in.hidden.requires_grad_(true);
  return in;
}

/// The tensor a stage backpropagates from: the loss on the last stage, else its output.
torch::Tensor root_of(const UnitState& out) {
  return out.phase == models::Phase::kLoss ? out.loss_sum : out.hidden;
}

void check_probe(const StageProbe& p, size_t units) {
  OMNIBAL_CHECK(p.begin >= 0 && p.begin < p.end && p.end <= static_cast<int64_t>(units),
                "stage probe: unit range [", p.begin, ", ", p.end, ") is empty or outside the ",
                units, " units");
  OMNIBAL_CHECK(p.recompute.size() == units, "stage probe: ", p.recompute.size(),
                " recompute flags for ", units, " units");
  OMNIBAL_CHECK(p.in_flight >= 1 && static_cast<int>(p.inputs.size()) >= p.in_flight,
                "stage probe: ", p.inputs.size(), " input states for ", p.in_flight,
                " micro-batches in flight");
}

}  // namespace

std::vector<UnitState> stage_inputs(const ModelPreset& preset, const models::VlmOptions& options,
                                    int64_t begin, const std::vector<models::PackBatch>& packs) {
  std::vector<UnitState> out;
  std::vector<models::UnitPtr> before;
  if (begin > 0) before = models::make_units(preset, options, 0, begin);
  torch::NoGradGuard no_grad;
  for (const auto& pack : packs) {
    UnitState s = UnitState::from_pack(pack, options.device, options.dtype);
    for (const auto& u : before) s = u->forward(s);
    out.push_back(s);
  }
  return out;
}

StageProbeResult probe_stage_memory(const StageProbe& p) {
  check_probe(p, omnibal::unit_names(p.preset).size());
  const auto trainable = trainable_units(p.preset, p.freeze);
  bool input_grad = false;
  for (int64_t u = 0; u < p.begin; ++u) input_grad = input_grad || trainable[u];
  StageProbeResult result;
  MemoryMeter meter(p.options.device);
  {
    const auto units = models::make_units(p.preset, p.options, p.begin, p.end);
    apply_freeze(units, p.freeze);
    for (int64_t u = p.begin; u < p.end; ++u) units[u - p.begin]->set_recompute(p.recompute[u]);
    if (p.on_built) p.on_built(units);
    {  // warm-up: gradients are allocated from here on
      const UnitState out = models::run_units(units, received(p.inputs[0], input_grad));
      const torch::Tensor root = root_of(out);
      if (root.requires_grad()) torch::autograd::backward({root}, {torch::ones_like(root)});
    }
    result.static_bytes = meter.current_bytes();
    meter.reset_peak();
    std::vector<UnitState> ins, outs;
    for (int k = 0; k < p.in_flight; ++k) {
      ins.push_back(received(p.inputs[k], input_grad));
      outs.push_back(models::run_units(units, ins.back()));
    }
    for (int k = 0; k < p.in_flight; ++k) {
      const torch::Tensor root = root_of(outs[k]);
      if (root.requires_grad()) torch::autograd::backward({root}, {torch::ones_like(root)});
      outs[k] = UnitState();
      ins[k] = UnitState();  // its gradient has been sent
    }
    result.peak_bytes = meter.peak_bytes();
  }
  return result;
}

}  // namespace omnibal::profile
