#include "schedule/pipeline_timeline.h"

#include <algorithm>
#include <deque>
#include <optional>

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

/// Checks that `costs` fit P stages (every matrix [V][m], V a positive multiple of P); returns
/// m, the micro-batches.
size_t check_costs(const PipelineStepCosts& costs, size_t P) {
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
  return m;
}

/// costs.background_s checked for P ranks (none: no background work on any rank).
std::vector<double> background_work(const PipelineStepCosts& costs, size_t P) {
  std::vector<double> background = costs.background_s;
  if (background.empty()) background.assign(P, 0.0);
  OMNIBAL_CHECK(background.size() == P, "pipeline timeline: background work for ",
                background.size(), " ranks, expected ", P, " (or none)");
  for (size_t s = 0; s < P; ++s)
    OMNIBAL_CHECK(background[s] >= 0, "pipeline timeline: background work of rank ", s, " is ",
                  background[s], " s, expected >= 0");
  return background;
}

/// The state of one walk of run_pipeline_timeline: each rank's clock, program counter, held
/// activation bytes and remaining background work, and the messages in flight between ranks.
class TimelineWalker {
 public:
  /// `lists`, `costs` and `events` (may be null) must outlive the walker; costs are checked.
  TimelineWalker(const StageSchedules& lists, const PipelineStepCosts& costs,
                 std::vector<TimelineEvent>* events)
      : lists_(lists),
        costs_(costs),
        events_(events),
        P_(lists.size()),
        m_(check_costs(costs, P_)),
        Pi_(static_cast<int>(P_)),
        Vi_(static_cast<int>(costs.forward_s.size())),
        v_(Vi_ / Pi_),
        background_(background_work(costs, P_)),
        out_(P_),
        clock_(P_, 0.0),
        held_(P_, 0.0),
        in_flight_(P_, 0),
        pc_(P_, 0),
        channel_(P_ * P_),
        link_free_(P_ * P_, 0.0) {}

  /// Steps every rank as far as it can, round-robin, until all reach the end of their lists;
  /// throws when a round makes no progress (a deadlock).
  std::vector<StageTimeline> run() {
    for (;;) {
      bool progressed = false, done = true;
      for (size_t s = 0; s < P_; ++s) {
        while (pc_[s] < lists_[s].size() && step(s)) progressed = true;
        if (pc_[s] < lists_[s].size()) done = false;
      }
      if (done) break;
      OMNIBAL_CHECK(progressed,
                    "pipeline timeline: the instruction lists deadlock (run "
                    "check_schedule for the blocked stages)");
    }
    return out_;
  }

 private:
  /// Compute of c seconds on rank s while its background work runs: both at half speed until
  /// one is done, so the op lasts 2c when the background outlasts it, else c + what was left.
  double compute(size_t s, double c) {
    const double d = background_[s] >= c ? 2 * c : c + background_[s];
    background_[s] = std::max(0.0, background_[s] - c);
    clock_[s] += d;
    return d;
  }

  void bump_peak(size_t s, double extra) {
    out_[s].peak_activation_bytes = std::max(out_[s].peak_activation_bytes, held_[s] + extra);
  }

  /// Posts `ins` from rank s to virtual stage `to_virtual`; returns the message's arrival time.
  double send(size_t s, const Instruction& ins, int to_virtual, double transfer_s) {
    const size_t dst = static_cast<size_t>(stage_of_virtual(to_virtual, Pi_, costs_.layout));
    double arrival = clock_[s];  // a same-rank hand-over is free and takes no link
    if (dst != s) {
      double& free = link_free_[s * P_ + dst];
      arrival = free = std::max(clock_[s], free) + transfer_s;
    }
    channel_[s * P_ + dst].push_back({ins.op, ins.micro_batch, ins.chunk, arrival});
    return arrival;
  }

  /// Takes the message `ins` waits for from virtual stage `from_virtual`, idling rank s until it
  /// arrives. Returns false when rank s is blocked: nothing from the sender's rank has been
  /// posted yet.
  bool receive(size_t s, const Instruction& ins, Op kind, int from_virtual) {
    const int src = stage_of_virtual(from_virtual, Pi_, costs_.layout);
    auto& q = channel_[static_cast<size_t>(src) * P_ + s];
    if (q.empty()) return false;
    const Message& head = q.front();
    OMNIBAL_CHECK(head.op == kind && head.micro_batch == ins.micro_batch &&
                      head.chunk == chunk_of_virtual(from_virtual, Pi_),
                  "pipeline timeline: stage ", s, " ", to_string(ins), " meets ",
                  to_string({head.op, head.micro_batch, head.chunk}),
                  " (send and receive orders differ; run check_schedule)");
    if (head.arrival_s > clock_[s]) {
      out_[s].idle_s += head.arrival_s - clock_[s];
      background_[s] = std::max(0.0, background_[s] - (head.arrival_s - clock_[s]));
      clock_[s] = head.arrival_s;
    }
    q.pop_front();
    return true;
  }

  /// Executes rank s's next instruction; returns false when it is a receive that must wait.
  bool step(size_t s) {
    const Instruction ins = lists_[s][pc_[s]];
    if (ins.op == Op::ReduceGrads) {
      clock_[s] += background_[s];
      background_[s] = 0;
      out_[s].ready_for_reduce_s = clock_[s];
      pc_[s] = lists_[s].size();  // the DP-level simulator takes over from here
      return true;
    }
    if (ins.op == Op::OptimizerStep) {
      ++pc_[s];
      return true;
    }
    const int mb = ins.micro_batch;
    OMNIBAL_CHECK(mb >= 0 && static_cast<size_t>(mb) < m_ && ins.chunk >= 0 && ins.chunk < v_,
                  "pipeline timeline: stage ", s, " instruction ", pc_[s], " (", to_string(ins),
                  ") is outside the costs' ", m_, " micro-batches x ", v_, " chunks");
    const double start = clock_[s];
    const std::optional<double> arrival = execute(s, ins);
    if (!arrival) return false;
    if (events_) events_->push_back({static_cast<int>(s), ins, start, clock_[s], *arrival});
    ++pc_[s];
    return true;
  }

  /// Runs data op `ins` (micro-batch and chunk in range) on rank s: advances its clock and
  /// held bytes, posts or takes its message. Returns the message's arrival time for a send, the
  /// op's start otherwise; nullopt when a receive must wait.
  std::optional<double> execute(size_t s, const Instruction& ins) {
    const int mb = ins.micro_batch;
    const int k = virtual_stage(ins.chunk, static_cast<int>(s), Pi_, costs_.layout);
    const size_t r = static_cast<size_t>(k);
    const auto& c = costs_;
    double arrival = clock_[s];
    switch (ins.op) {
      case Op::RecvActivation:
        OMNIBAL_CHECK(k > 0, "pipeline timeline: virtual stage 0 has no upstream peer");
        if (!receive(s, ins, Op::SendActivation, k - 1)) return std::nullopt;
        break;
      case Op::RecvGrad:
        OMNIBAL_CHECK(k + 1 < Vi_, "pipeline timeline: the last virtual stage has no downstream");
        if (!receive(s, ins, Op::SendGrad, k + 1)) return std::nullopt;
        break;
      case Op::Forward:
        out_[s].forward_busy_s += compute(s, c.forward_s[r][mb]);
        held_[s] += c.kept_bytes[r][mb];
        bump_peak(s, 0);
        out_[s].peak_in_flight = std::max(out_[s].peak_in_flight, ++in_flight_[s]);
        break;
      case Op::Backward:
        bump_peak(s, c.transient_bytes[r][mb]);
        out_[s].backward_busy_s += compute(s, c.backward_s[r][mb]);
        held_[s] -= c.kept_bytes[r][mb];
        --in_flight_[s];
        break;
      case Op::BackwardInput:  // frees all but what the deferred weight gradient reads
        bump_peak(s, c.transient_bytes[r][mb]);
        out_[s].backward_busy_s += compute(s, c.backward_input_s[r][mb]);
        held_[s] -= c.kept_bytes[r][mb] - c.weight_kept_bytes[r][mb];
        --in_flight_[s];
        break;
      case Op::BackwardWeight:
        bump_peak(s, c.transient_bytes[r][mb]);
        out_[s].backward_weight_busy_s += compute(s, c.backward_weight_s[r][mb]);
        held_[s] -= c.weight_kept_bytes[r][mb];
        break;
      case Op::SendActivation:
        OMNIBAL_CHECK(k + 1 < Vi_, "pipeline timeline: the last virtual stage has no downstream");
        arrival = send(s, ins, k + 1, c.send_activation_s[r][mb]);
        break;
      case Op::SendGrad:
        OMNIBAL_CHECK(k > 0, "pipeline timeline: virtual stage 0 has no upstream peer");
        arrival = send(s, ins, k - 1, c.send_grad_s[r][mb]);
        break;
      case Op::ReduceGrads:
      case Op::OptimizerStep: break;  // handled in step()
    }
    return arrival;
  }

  const StageSchedules& lists_;
  const PipelineStepCosts& costs_;
  std::vector<TimelineEvent>* events_;
  const size_t P_, m_;              ///< ranks, micro-batches
  const int Pi_, Vi_, v_;           ///< ranks, virtual stages, chunks per rank
  std::vector<double> background_;  ///< [rank] background work left, seconds
  std::vector<StageTimeline> out_;
  std::vector<double> clock_, held_;          ///< [rank] seconds, held activation bytes
  std::vector<int> in_flight_;                ///< [rank] autograd graphs alive
  std::vector<size_t> pc_;                    ///< [rank] next instruction
  std::vector<std::deque<Message>> channel_;  ///< [src * P + dst], in posting order
  std::vector<double> link_free_;             ///< [src * P + dst] when the link is next free
};

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
  return TimelineWalker(lists, costs, events).run();
}

}  // namespace omnibal::schedule
