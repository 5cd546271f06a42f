#include "schedule/pipeline_timeline.h"

#include <algorithm>
#include <deque>

#include "core/error.h"

namespace omnibal::schedule {
namespace {

/// A message on the FIFO of one ordered rank pair: what was sent and when it arrives.
struct Message {
  Op op;  ///< SendActivation or SendGrad
  int micro_batch;
  int chunk;  ///< the sender's chunk
  double arrival_s;
};

void check_shape(const std::vector<std::vector<double>>& mat, size_t V, size_t m,
                 const char* name) {
  OMNIBAL_CHECK(mat.size() == V, "pipeline costs: ", name, " has ", mat.size(),
                " virtual stages, expected ", V, " (the rows of forward_s)");
  for (size_t k = 0; k < V; ++k)
    OMNIBAL_CHECK(mat[k].size() == m, "pipeline costs: ", name, "[", k, "] has ", mat[k].size(),
                  " micro-batches, expected ", m);
}

}  // namespace

PipelineStepCosts PipelineStepCosts::zeros(int virtual_stages, int micro_batches) {
  OMNIBAL_CHECK(virtual_stages >= 0 && micro_batches >= 0, "pipeline costs: expected V, m >= 0, ",
                "got V=", virtual_stages, " m=", micro_batches);
  PipelineStepCosts c;
  const std::vector<std::vector<double>> z(virtual_stages, std::vector<double>(micro_batches, 0.0));
  c.forward_s = c.backward_s = c.backward_input_s = c.backward_weight_s = z;
  c.send_activation_s = c.send_grad_s = z;
  c.kept_bytes = c.weight_kept_bytes = c.transient_bytes = z;
  return c;
}

std::vector<StageTimeline> run_pipeline_timeline(const StageSchedules& lists,
                                                 const PipelineStepCosts& costs) {
  return run_pipeline_timeline(lists, costs, nullptr);
}

std::vector<StageTimeline> run_pipeline_timeline(const StageSchedules& lists,
                                                 const PipelineStepCosts& costs,
                                                 std::vector<TimelineEvent>* events) {
  const size_t P = lists.size();
  OMNIBAL_CHECK(P >= 1, "pipeline timeline: no stages");
  const size_t V = costs.forward_s.size();
  OMNIBAL_CHECK(V >= P && V % P == 0, "pipeline timeline: costs have ", V, " virtual stages, ",
                "expected a positive multiple of the ", P, " stages (V = P x v)");
  const size_t m = costs.forward_s[0].size();
  const std::pair<const std::vector<std::vector<double>>*, const char*> mats[] = {
      {&costs.forward_s, "forward_s"},
      {&costs.backward_s, "backward_s"},
      {&costs.backward_input_s, "backward_input_s"},
      {&costs.backward_weight_s, "backward_weight_s"},
      {&costs.send_activation_s, "send_activation_s"},
      {&costs.send_grad_s, "send_grad_s"},
      {&costs.kept_bytes, "kept_bytes"},
      {&costs.weight_kept_bytes, "weight_kept_bytes"},
      {&costs.transient_bytes, "transient_bytes"}};
  for (const auto& [mat, name] : mats) check_shape(*mat, V, m, name);
  const int v = static_cast<int>(V / P), Pi = static_cast<int>(P), Vi = static_cast<int>(V);
  std::vector<double> background = costs.background_s;
  if (background.empty()) background.assign(P, 0.0);
  OMNIBAL_CHECK(background.size() == P, "pipeline timeline: background work for ",
                background.size(), " ranks, expected ", P, " (or none)");
  for (size_t s = 0; s < P; ++s)
    OMNIBAL_CHECK(background[s] >= 0, "pipeline timeline: background work of rank ", s, " is ",
                  background[s], " s, expected >= 0");

  std::vector<StageTimeline> out(P);
  std::vector<double> clock(P, 0.0), held(P, 0.0);
  std::vector<int> in_flight(P, 0);
  std::vector<size_t> pc(P, 0);
  std::vector<std::deque<Message>> channel(P * P);  // [src * P + dst], in posting order
  std::vector<double> link_free(P * P, 0.0);        // when the src -> dst link is next free

  // Compute of c seconds on rank s while its background work runs: both at half speed until one
  // is done, so the op lasts 2c when the background outlasts it, else c + what was left.
  auto compute = [&](size_t s, double c) -> double {
    const double d = background[s] >= c ? 2 * c : c + background[s];
    background[s] = std::max(0.0, background[s] - c);
    clock[s] += d;
    return d;
  };
  auto bump_peak = [&](size_t s, double extra) {
    out[s].peak_activation_bytes = std::max(out[s].peak_activation_bytes, held[s] + extra);
  };
  auto send = [&](size_t s, const Instruction& ins, int to_virtual, double transfer_s) -> double {
    const size_t dst = static_cast<size_t>(to_virtual % Pi);
    double arrival = clock[s];  // a same-rank hand-over is free and takes no link
    if (dst != s) {
      double& free = link_free[s * P + dst];
      arrival = free = std::max(clock[s], free) + transfer_s;
    }
    channel[s * P + dst].push_back({ins.op, ins.micro_batch, ins.chunk, arrival});
    return arrival;
  };
  // Returns false when rank s is blocked: nothing from the sender's rank has been posted yet.
  auto receive = [&](size_t s, const Instruction& ins, Op kind, int from_virtual) -> bool {
    auto& q = channel[static_cast<size_t>(from_virtual % Pi) * P + s];
    if (q.empty()) return false;
    const Message& head = q.front();
    OMNIBAL_CHECK(head.op == kind && head.micro_batch == ins.micro_batch &&
                      head.chunk == from_virtual / Pi,
                  "pipeline timeline: stage ", s, " ", to_string(ins), " meets ",
                  to_string({head.op, head.micro_batch, head.chunk}),
                  " (send and receive orders differ; run check_schedule)");
    if (head.arrival_s > clock[s]) {
      out[s].idle_s += head.arrival_s - clock[s];
      background[s] = std::max(0.0, background[s] - (head.arrival_s - clock[s]));
      clock[s] = head.arrival_s;
    }
    q.pop_front();
    return true;
  };
  auto step = [&](size_t s) -> bool {
    const Instruction ins = lists[s][pc[s]];
    if (ins.op == Op::ReduceGrads) {
      clock[s] += background[s];
      background[s] = 0;
      out[s].ready_for_reduce_s = clock[s];
      pc[s] = lists[s].size();  // the DP-level simulator takes over from here
      return true;
    }
    if (ins.op == Op::OptimizerStep) {
      ++pc[s];
      return true;
    }
    const int mb = ins.micro_batch;
    OMNIBAL_CHECK(mb >= 0 && static_cast<size_t>(mb) < m && ins.chunk >= 0 && ins.chunk < v,
                  "pipeline timeline: stage ", s, " instruction ", pc[s], " (", to_string(ins),
                  ") is outside the costs' ", m, " micro-batches x ", v, " chunks");
    const int k = virtual_stage(ins.chunk, static_cast<int>(s), Pi);
    const size_t r = static_cast<size_t>(k);
    const double start = clock[s];
    double arrival = start;
    switch (ins.op) {
      case Op::RecvActivation:
        OMNIBAL_CHECK(k > 0, "pipeline timeline: virtual stage 0 has no upstream peer");
        if (!receive(s, ins, Op::SendActivation, k - 1)) return false;
        break;
      case Op::RecvGrad:
        OMNIBAL_CHECK(k + 1 < Vi, "pipeline timeline: the last virtual stage has no downstream");
        if (!receive(s, ins, Op::SendGrad, k + 1)) return false;
        break;
      case Op::Forward:
        out[s].forward_busy_s += compute(s, costs.forward_s[r][mb]);
        held[s] += costs.kept_bytes[r][mb];
        bump_peak(s, 0);
        out[s].peak_in_flight = std::max(out[s].peak_in_flight, ++in_flight[s]);
        break;
      case Op::Backward:
        bump_peak(s, costs.transient_bytes[r][mb]);
        out[s].backward_busy_s += compute(s, costs.backward_s[r][mb]);
        held[s] -= costs.kept_bytes[r][mb];
        --in_flight[s];
        break;
      case Op::BackwardInput:  // frees all but what the deferred weight gradient reads
        bump_peak(s, costs.transient_bytes[r][mb]);
        out[s].backward_busy_s += compute(s, costs.backward_input_s[r][mb]);
        held[s] -= costs.kept_bytes[r][mb] - costs.weight_kept_bytes[r][mb];
        --in_flight[s];
        break;
      case Op::BackwardWeight:
        bump_peak(s, costs.transient_bytes[r][mb]);
        out[s].backward_weight_busy_s += compute(s, costs.backward_weight_s[r][mb]);
        held[s] -= costs.weight_kept_bytes[r][mb];
        break;
      case Op::SendActivation:
        OMNIBAL_CHECK(k + 1 < Vi, "pipeline timeline: the last virtual stage has no downstream");
        arrival = send(s, ins, k + 1, costs.send_activation_s[r][mb]);
        break;
      case Op::SendGrad:
        OMNIBAL_CHECK(k > 0, "pipeline timeline: virtual stage 0 has no upstream peer");
        arrival = send(s, ins, k - 1, costs.send_grad_s[r][mb]);
        break;
      case Op::ReduceGrads:
      case Op::OptimizerStep: break;  // handled above
    }
    if (events) events->push_back({static_cast<int>(s), ins, start, clock[s], arrival});
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
