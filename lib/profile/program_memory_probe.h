// Counted peak memory of one pipeline rank walking its instruction list (any schedule of
// lib/schedule: 1F1B, interleaved, ZB-H1, ZB-V), emulated in one process: the memory-balance
// test's check of lib/memory's per-rank model under schedules with several chunks and deferred
// weight gradients (stage_memory_probe.h is 1F1B's, one chunk). The probe builds the rank's
// chunks inside a memory meter, runs one warm-up forward and backward per chunk (gradients exist
// from then on), then walks the rank's compute as the stage executor does (lib/pipeline): a
// Forward allocates the received activation (or the loaded pack's state) and keeps its output; a
// RecvGrad allocates the received gradient; a Backward or BackwardInput backpropagates it (ones)
// or the loss and frees the micro-batch's graph, input and output; under a split backward
// Forward and BackwardInput record the linears into a WeightGradStore and BackwardWeight runs
// them, with recomputed units' weight gradients deferred too or computed in B as
// `defer_recomputed` says (ZB-H1 / ZB-V, models/weight_grad_store.h). Counted: weights,
// gradients, activations and checkpoints in flight, deferred W inputs, recomputation, and what
// `on_built` allocates (the trainer's optimizer). Not counted: send buffers and communication.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/model_preset.h"
#include "models/unit_state.h"
#include "models/vlm.h"
#include "schedule/instruction.h"

namespace omnibal::profile {

/// One pipeline rank, its chunks and its list.
struct ProgramProbe {
  ModelPreset preset;
  models::VlmOptions options;  ///< device, seed, img_context_id, dtype
  /// Unit ranges [begin, end) of the rank's chunks, in chunk order (ascending, as
  /// models::make_chunk_units takes them).
  std::vector<models::UnitRange> chunks;
  std::vector<bool> recompute;  ///< per unit of the whole chain (size: all units)
  /// inputs[c][mb]: the input state of chunk c for micro-batch mb (detached; stage_inputs of the
  /// chunk's first unit), for every micro-batch the program names.
  std::vector<std::vector<models::UnitState>> inputs;
  std::vector<schedule::Instruction> program;  ///< this rank's list (schedules.h)
  /// Under a split backward: recomputed units' W deferred like the others (ZB-H1) or computed in
  /// their B (false: ZB-V).
  bool defer_recomputed = true;
  /// Called inside the meter once the units are built (all chunks, in order), before the
  /// warm-up; what it allocates must outlive probe_program_memory.
  std::function<void(const std::vector<models::UnitPtr>& units)> on_built;
};

/// What the meter counted (bytes).
struct ProgramProbeResult {
  int64_t static_bytes = 0;  ///< weights, gradients and on_built's after the warm-up
  int64_t peak_bytes = 0;    ///< peak of everything counted while the program ran
};

/// Runs the probe. Throws omnibal::Error when a chunk range is empty or outside the model, the
/// recompute flags have the wrong size, an instruction names a chunk or micro-batch without an
/// input, or the program computes out of order (a backward before its forward, a W before its B).
ProgramProbeResult probe_program_memory(const ProgramProbe& probe);

}  // namespace omnibal::profile
