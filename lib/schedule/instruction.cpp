#include "schedule/instruction.h"

namespace omnibal::schedule {

const char* op_name(Op op) {
  switch (op) {
    case Op::RecvActivation: return "RecvActivation";
    case Op::Forward: return "Forward";
    case Op::SendActivation: return "SendActivation";
    case Op::RecvGrad: return "RecvGrad";
    case Op::Backward: return "Backward";
    case Op::BackwardInput: return "BackwardInput";
    case Op::BackwardWeight: return "BackwardWeight";
    case Op::SendGrad: return "SendGrad";
    case Op::ReduceGrads: return "ReduceGrads";
    case Op::OptimizerStep: return "OptimizerStep";
  }
  return "?";
}

std::string to_string(const Instruction& instruction) {
  std::string s = op_name(instruction.op);
  if (instruction.micro_batch >= 0) {
    s += "{" + std::to_string(instruction.micro_batch);
    if (instruction.chunk != 0) s += " c" + std::to_string(instruction.chunk);
    s += "}";
  }
  return s;
}

bool is_communication(Op op) {
  return op == Op::RecvActivation || op == Op::SendActivation || op == Op::RecvGrad ||
         op == Op::SendGrad;
}

}  // namespace omnibal::schedule
