// Pipeline instructions: the vocabulary of a per-stage schedule ("schedules are data", README.md).
// A schedule is, for each pipeline stage, an ordered list of Instruction values; the real stage
// executor (lib/pipeline) and the pipeline simulator (lib/partition/training_simulator.h) walk
// the same lists. This file only defines the instruction type; the 1F1B builder is
// one_f_one_b.h and the send/receive checker is schedule_checker.h.
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
  Backward,        ///< run the backward of mb (recomputing checkpointed units first)
  SendGrad,        ///< send the gradient of mb's input activation to stage s-1 (non-blocking)
  ReduceGrads,     ///< all-reduce (or reduce-scatter, ZeRO-1) this stage's gradients over DP
  OptimizerStep,   ///< apply the optimizer to this stage's parameters
};

/// One schedule entry. micro_batch is 0-based in [0, m) for per-micro-batch ops and -1 for
/// ReduceGrads / OptimizerStep.
struct Instruction {
  Op op = Op::Forward;
  int micro_batch = -1;

  bool operator==(const Instruction& o) const { return op == o.op && micro_batch == o.micro_batch; }
  bool operator!=(const Instruction& o) const { return !(*this == o); }
};

/// The instruction lists of every stage: lists[s] is stage s's program, s in [0, P).
using StageSchedules = std::vector<std::vector<Instruction>>;

/// Short name of an op ("Forward", "SendActivation", ...).
const char* op_name(Op op);

/// "Forward{3}" or "ReduceGrads".
std::string to_string(const Instruction& instruction);

/// True for the four point-to-point ops.
bool is_communication(Op op);

}  // namespace omnibal::schedule
