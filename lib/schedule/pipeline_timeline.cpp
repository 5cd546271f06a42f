#include "schedule/pipeline_timeline.h"

#include <algorithm>
#include <deque>

#include "core/error.h"

namespace omnibal::schedule {
namespace {

/// A message on a FIFO channel: which micro-batch and when it arrives.
struct Message {
  int micro_batch;
  double arrival_s;
};

void check_shape(const std::vector<std::vector<double>>& mat, size_t P, size_t m,
                 const char* name) {
  OMNIBAL_CHECK(mat.size() == P, "pipeline costs: ", name, " has ", mat.size(),
                " stages, expected ", P);
  for (size_t s = 0; s < P; ++s)
    OMNIBAL_CHECK(mat[s].size() == m, "pipeline costs: ", name, "[", s, "] has ", mat[s].size(),
                  " micro-batches, expected ", m);
}

}  // namespace

PipelineStepCosts PipelineStepCosts::zeros(int stages, int micro_batches) {
  PipelineStepCosts c;
  const std::vector<std::vector<double>> z(stages, std::vector<double>(micro_batches, 0.0));
  c.forward_s = c.backward_s = c.backward_input_s = c.backward_weight_s = z;
  c.send_activation_s = c.send_grad_s = z;
  c.kept_bytes = c.weight_kept_bytes = c.transient_bytes = z;
  return c;
}

std::vector<StageTimeline> run_pipeline_timeline(const StageSchedules& lists,
                                                 const PipelineStepCosts& costs) {
  const size_t P = lists.size();
  OMNIBAL_CHECK(P >= 1, "pipeline timeline: no stages");
  const size_t m = costs.forward_s.empty() ? 0 : costs.forward_s[0].size();
  for (auto* mat : {&costs.forward_s, &costs.backward_s, &costs.send_activation_s,
                    &costs.send_grad_s, &costs.kept_bytes, &costs.transient_bytes})
    check_shape(*mat, P, m, "cost matrix");

  std::vector<StageTimeline> out(P);
  std::vector<double> clock(P, 0.0), held(P, 0.0);
  std::vector<int> in_flight(P, 0);
  std::vector<size_t> pc(P, 0);
  std::vector<std::deque<Message>> down(P), up(P);  // down[s]: s -> s+1, up[s]: s -> s-1
  std::vector<double> down_free(P, 0.0), up_free(P, 0.0);

  auto receive = [&](std::deque<Message>& q, size_t s, int mb) {
    OMNIBAL_CHECK(q.front().micro_batch == mb, "pipeline timeline: stage ", s,
                  " expected micro-batch ", mb, " but the channel delivers ",
                  q.front().micro_batch);
    const double arrival = q.front().arrival_s;
    q.pop_front();
    if (arrival > clock[s]) {
      out[s].idle_s += arrival - clock[s];
      clock[s] = arrival;
    }
  };
  // Returns false when stage s is blocked on a receive.
  auto step = [&](size_t s) -> bool {
    const Instruction ins = lists[s][pc[s]];
    const int mb = ins.micro_batch;
    switch (ins.op) {
      case Op::RecvActivation:
        if (down[s - 1].empty()) return false;
        receive(down[s - 1], s, mb);
        break;
      case Op::RecvGrad:
        if (up[s + 1].empty()) return false;
        receive(up[s + 1], s, mb);
        break;
      case Op::Forward:
        clock[s] += costs.forward_s[s][mb];
        out[s].forward_busy_s += costs.forward_s[s][mb];
        held[s] += costs.kept_bytes[s][mb];
        out[s].peak_activation_bytes = std::max(out[s].peak_activation_bytes, held[s]);
        out[s].peak_in_flight = std::max(out[s].peak_in_flight, ++in_flight[s]);
        break;
      case Op::Backward:
        out[s].peak_activation_bytes =
            std::max(out[s].peak_activation_bytes, held[s] + costs.transient_bytes[s][mb]);
        clock[s] += costs.backward_s[s][mb];
        out[s].backward_busy_s += costs.backward_s[s][mb];
        held[s] -= costs.kept_bytes[s][mb];
        --in_flight[s];
        break;
      case Op::BackwardInput:
      case Op::BackwardWeight:
        OMNIBAL_FAIL("pipeline timeline: split backward not timed yet (WIP)");
      case Op::SendActivation: {
        const double start = std::max(clock[s], down_free[s]);
        down_free[s] = start + costs.send_activation_s[s][mb];
        down[s].push_back({mb, down_free[s]});
        break;
      }
      case Op::SendGrad: {
        const double start = std::max(clock[s], up_free[s]);
        up_free[s] = start + costs.send_grad_s[s][mb];
        up[s].push_back({mb, up_free[s]});
        break;
      }
      case Op::ReduceGrads:
        out[s].ready_for_reduce_s = clock[s];
        pc[s] = lists[s].size();  // the DP-level simulator takes over from here
        return true;
      case Op::OptimizerStep: break;
    }
    ++pc[s];
    return true;
  };

  for (;;) {
    bool progressed = false, done = true;
    for (size_t s = 0; s < P; ++s) {
      while (pc[s] < lists[s].size() && step(s)) progressed = true;
      if (pc[s] < lists[s].size()) done = false;
    }
    if (done) break;
    OMNIBAL_CHECK(progressed,
                  "pipeline timeline: the instruction lists deadlock (run "
                  "check_schedule for the blocked stages)");
  }
  return out;
}

}  // namespace omnibal::schedule
