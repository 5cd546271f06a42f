#include "schedule/one_f_one_b.h"

#include <algorithm>

#include "core/error.h"

namespace omnibal::schedule {
namespace {

void add_forward(std::vector<Instruction>& list, int stage, int stages, int mb) {
  if (stage > 0) list.push_back({Op::RecvActivation, mb});
  list.push_back({Op::Forward, mb});
  if (stage < stages - 1) list.push_back({Op::SendActivation, mb});
}

void add_backward(std::vector<Instruction>& list, int stage, int stages, int mb) {
  if (stage < stages - 1) list.push_back({Op::RecvGrad, mb});
  list.push_back({Op::Backward, mb});
  if (stage > 0) list.push_back({Op::SendGrad, mb});
}

}  // namespace

StageSchedules build_1f1b_schedule(int stages, int micro_batches) {
  OMNIBAL_CHECK(stages >= 1, "1F1B: expected at least one pipeline stage, got ", stages);
  OMNIBAL_CHECK(micro_batches >= 1, "1F1B: expected at least one micro-batch, got ", micro_batches);
  StageSchedules lists(stages);
  for (int s = 0; s < stages; ++s) {
    auto& list = lists[s];
    const int warmup = std::min(stages - s - 1, micro_batches);
    int next_forward = 0;
    int next_backward = 0;
    for (int i = 0; i < warmup; ++i) add_forward(list, s, stages, next_forward++);
    // Steady state: one forward, then the backward of the oldest micro-batch in flight.
    while (next_forward < micro_batches) {
      add_forward(list, s, stages, next_forward++);
      add_backward(list, s, stages, next_backward++);
    }
    while (next_backward < micro_batches) add_backward(list, s, stages, next_backward++);
    list.push_back({Op::ReduceGrads, -1});
    list.push_back({Op::OptimizerStep, -1});
  }
  return lists;
}

int in_flight_micro_batches(int stage, int stages, int micro_batches) {
  OMNIBAL_CHECK(stage >= 0 && stage < stages, "stage ", stage, " out of range [0, ", stages, ")");
  return std::min(micro_batches, stages - stage);
}

double bubble_fraction_1f1b(int stages, int micro_batches) {
  OMNIBAL_CHECK(stages >= 1 && micro_batches >= 1,
                "bubble: expected P >= 1 and m >= 1, got P=", stages, " m=", micro_batches);
  return static_cast<double>(stages - 1) / (micro_batches + stages - 1);
}

}  // namespace omnibal::schedule
