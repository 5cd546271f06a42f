// Counted peak memory of one pipeline stage under 1F1B, emulated in one process (README's
// memory-balance test): stage s of P with m micro-batches holds min(m, P - s) micro-batches
// in flight, and its peak is reached when the last of them has run its forward and the oldest
// runs its backward. The probe builds the stage's units inside a memory meter (so weights are
// counted), runs one warm-up forward + backward (gradients exist from then on, as in training),
// then forwards `in_flight` micro-batches, keeping each one's input and output as a pipeline
// stage does (received activation, activation to send), and backpropagates them oldest first
// with a received gradient of ones. Counted: weights, gradients, in-flight activations,
// recomputation, buffers, and whatever `on_built` allocates (the tests give it the trainer's
// optimizer: main gradient, master weights, moments); no optimizer step is taken here.
// Not here: communication, the real multi-process pipeline (lib/pipeline).
#pragma once

#include "core/choices.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/model_preset.h"
#include "models/unit_state.h"
#include "models/vlm.h"

namespace omnibal::profile {

/// One stage and its micro-batches.
struct StageProbe {
  ModelPreset preset;
  models::VlmOptions options;     ///< device, seed, img_context_id
  int64_t begin = 0, end = 0;     ///< units [begin, end) of the chain
  std::vector<bool> recompute;    ///< per unit of the whole chain (size: all units)
  std::vector<UnitGroup> freeze;  ///< train.freeze groups
  /// Input state of the stage for each micro-batch (detached; the probe clones them inside the
  /// meter, as a received activation or a loaded pack would be allocated).
  std::vector<models::UnitState> inputs;
  int in_flight = 1;  ///< micro-batches forwarded before the first backward
  /// Called inside the meter once the units are built, before the warm-up: allocate what
  /// training keeps besides the model (the optimizer's gradient buffer and state) so that it
  /// is counted; whatever it allocates must outlive probe_stage_memory.
  std::function<void(const std::vector<models::UnitPtr>& units)> on_built;
};

/// What the meter counted (bytes).
struct StageProbeResult {
  int64_t static_bytes = 0;  ///< weights + gradients after the warm-up, before the in-flight phase
  int64_t peak_bytes = 0;    ///< peak of everything counted during the in-flight phase
};

/// Runs the probe. Throws omnibal::Error when inputs has fewer than in_flight states, the unit
/// range is empty or out of range, or recompute has the wrong size.
StageProbeResult probe_stage_memory(const StageProbe& probe);

/// The input state of a stage starting at unit `begin`, for each pack: units [0, begin) run
/// without autograd (the previous stages' forward). States are detached.
std::vector<models::UnitState> stage_inputs(const ModelPreset& preset,
                                            const models::VlmOptions& options, int64_t begin,
                                            const std::vector<models::PackBatch>& packs);

}  // namespace omnibal::profile
