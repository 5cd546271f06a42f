// Pipeline instructions: the vocabulary of a per-stage schedule ("schedules are data", README.md).
// A schedule is, for each pipeline stage, an ordered list of Instruction values; the real stage
// executor (lib/pipeline) and the pipeline simulator (lib/partition/training_simulator.h) walk
// the same lists. This file only defines the instruction type; the builders are schedules.h
// (1F1B, interleaved 1F1B, ZB-H1) and the send/receive checker is schedule_checker.h.
//
// Virtual stages: under the interleaved schedule the model is cut into P x v chunks and rank s
// holds chunks c = 0..v-1 of virtual stages k = c * P + s (Megatron's loop layout); under ZB-V
// the 2P chunks lie in a V: rank s holds virtual stages s and 2P - 1 - s (ChunkLayout::kV). An
// instruction's `chunk` says which; virtual_stage / stage_of_virtual / chunk_of_virtual are the
// one mapping every walker uses. Activations flow k -> k + 1, gradients k -> k - 1. Without
// interleaving every instruction has chunk 0 and virtual stage == stage.
#pragma once

#include <string>
#include <vector>

namespace omnibal::schedule {

/// What one instruction does. Point-to-point instructions name the micro-batch whose activation
/// (forward direction, stage s -> s+1) or activation gradient (backward, s+1 -> s) moves.
enum class Op {
  RecvActivation,  ///< receive micro-batch mb's input activation from stage s-1
  Forward,         ///< run the forward of micro-batch mb through this stage's units
  SendActivation,  ///< send micro-batch mb's output activation to stage s+1 (non-blocking)
  RecvGrad,        ///< receive the gradient of mb's output activation from stage s+1
  Backward,        ///< run the whole backward of mb (recomputing checkpointed units first)
  /// ZB-H1's B: the input gradient of mb only (what stage s-1 waits for); the weight gradients
  /// are left for BackwardWeight{mb}, whose inputs (each linear's input and output gradient)
  /// stay alive until then.
  BackwardInput,
  BackwardWeight,  ///< ZB-H1's W: the weight gradients of mb deferred by its BackwardInput
  SendGrad,        ///< send the gradient of mb's input activation to stage s-1 (non-blocking)
  ReduceGrads,     ///< all-reduce (or reduce-scatter, ZeRO-1) this stage's gradients over DP
  OptimizerStep,   ///< apply the optimizer to this stage's parameters
};

/// One schedule entry. micro_batch is 0-based in [0, m) for per-micro-batch ops and -1 for
/// ReduceGrads / OptimizerStep; chunk in [0, v) is the model chunk (virtual stage) it runs on.
struct Instruction {
  Op op = Op::Forward;
  int micro_batch = -1;
  int chunk = 0;

  bool operator==(const Instruction& o) const {
    return op == o.op && micro_batch == o.micro_batch && chunk == o.chunk;
  }
  bool operator!=(const Instruction& o) const { return !(*this == o); }
};

/// The instruction lists of every stage: lists[s] is stage s's program, s in [0, P).
using StageSchedules = std::vector<std::vector<Instruction>>;

/// Short name of an op ("Forward", "SendActivation", ...).
const char* op_name(Op op);

/// "Forward{3}", "Forward{3 c1}" (chunk 1) or "ReduceGrads".
std::string to_string(const Instruction& instruction);

/// True for the four point-to-point ops.
bool is_communication(Op op);

/// How the P x v model chunks (virtual stages k in [0, P v)) lie on the P pipeline ranks.
/// kLoop (Megatron's interleaved 1F1B, and v = 1): rank s holds k = c P + s, so k + 1 is on the
/// next rank and the last chunk on rank P - 1. kV (ZB-V, Qi et al. 2024): the chunks zig-zag,
/// even chunks c hold k = c P + s and odd ones k = c P + P - 1 - s; with v = 2 rank s holds
/// k = s and k = 2P - 1 - s, the hand-over P - 1 -> P stays on rank P - 1 and the first and
/// last chunk (embedding, loss) are both on rank 0.
enum class ChunkLayout { kLoop, kV };

/// Virtual stage of `chunk` on pipeline rank `stage` of P under `layout` (see ChunkLayout).
inline int virtual_stage(int chunk, int stage, int stages,
                         ChunkLayout layout = ChunkLayout::kLoop) {
  const bool reversed = layout == ChunkLayout::kV && chunk % 2 == 1;
  return chunk * stages + (reversed ? stages - 1 - stage : stage);
}

/// Pipeline rank holding virtual stage k of P x v under `layout` (k >= 0).
inline int stage_of_virtual(int virtual_stage, int stages,
                            ChunkLayout layout = ChunkLayout::kLoop) {
  const int chunk = virtual_stage / stages, offset = virtual_stage % stages;
  return layout == ChunkLayout::kV && chunk % 2 == 1 ? stages - 1 - offset : offset;
}

/// The chunk index (on its rank) of virtual stage k: k / P under both layouts.
inline int chunk_of_virtual(int virtual_stage, int stages) { return virtual_stage / stages; }

}  // namespace omnibal::schedule
