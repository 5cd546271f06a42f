// Activation recomputation per pipeline unit (OmniBal §4, memory balance: "adaptive
// recompute" chooses how many units of each stage to recompute). A unit run through
// run_unit() with recompute on keeps only its input state: its forward runs without autograd
// and is rerun with autograd inside the backward pass (reentrant, as PyTorch's
// torch.utils.checkpoint), trading one extra forward for the unit's activations.
// The unit's parameters receive exactly the gradients of a plain run, because the unit's forward
// is deterministic (no dropout). Not here: which units to recompute (lib/memory decides).
#pragma once

#include "models/pipeline_unit.h"

namespace omnibal::models {

/// Runs `unit` on `state`; when unit.recompute() is set, grad mode is on and the unit is not the
/// loss head, its activations are dropped after the forward and recomputed in the backward.
/// The returned state's hidden then hangs off one autograd node per unit. The unit's
/// param_hooks(), when set, run before and after (train/full_shard.h).
UnitState run_unit(PipelineUnit& unit, const UnitState& state);

}  // namespace omnibal::models
