#include "schedule/schedule_checker.h"

#include <algorithm>
#include <deque>
#include <sstream>

namespace omnibal::schedule {
namespace {

/// A posted send: what the receiver must name to match it.
struct PostedSend {
  Op op;  ///< SendActivation or SendGrad
  int micro_batch;
  int chunk;         ///< the sender's chunk
  size_t src_stage;  ///< the sender's rank
};

/// Per-stage walking state; the per-(micro-batch, chunk) counters are indexed chunk * m + mb.
struct StageState {
  size_t pc = 0;
  std::vector<int> received_act, forwarded, received_grad, sent_act, sent_grad;
  std::vector<int> fused, input_done, weight_done;  ///< Backward, BackwardInput, BackwardWeight
  std::vector<int> in_flight_per_chunk;
  int in_flight = 0, deferred = 0, held = 0;
  bool reduced = false;
};

std::string where(size_t stage, size_t index, const Instruction& ins) {
  std::ostringstream os;
  os << "stage " << stage << " instruction " << index << " (" << to_string(ins) << ")";
  return os.str();
}

class Walker {
 public:
  Walker(const StageSchedules& lists, int m, int v, ChunkLayout layout)
      : lists_(lists),
        P_(lists.size()),
        m_(m),
        v_(v),
        layout_(layout),
        states_(P_),
        channels_(P_ * P_) {
    const size_t n = static_cast<size_t>(m) * static_cast<size_t>(v);
    for (auto& st : states_) {
      for (auto* c : {&st.received_act, &st.forwarded, &st.received_grad, &st.sent_act,
                      &st.sent_grad, &st.fused, &st.input_done, &st.weight_done})
        c->assign(n, 0);
      st.in_flight_per_chunk.assign(static_cast<size_t>(v), 0);
    }
    report_.peak_in_flight.assign(P_, 0);
    report_.peak_deferred_weights.assign(P_, 0);
    report_.peak_held.assign(P_, 0);
    report_.peak_in_flight_per_chunk.assign(P_, std::vector<int>(static_cast<size_t>(v), 0));
  }

  ScheduleCheckReport run() {
    for (;;) {
      bool progressed = false, all_done = true;
      for (size_t s = 0; s < P_; ++s) {
        while (states_[s].pc < lists_[s].size()) {
          const int r = step(s);
          if (r < 0) return fail();
          if (r == 0) break;
          progressed = true;
        }
        if (states_[s].pc < lists_[s].size()) all_done = false;
      }
      if (all_done) return finish();
      if (!progressed) return deadlock();
    }
  }

 private:
  int V() const { return static_cast<int>(P_) * v_; }
  std::deque<PostedSend>& channel(size_t src, size_t dst) { return channels_[src * P_ + dst]; }

  /// 1: executed, 0: blocked on a receive, -1: violation (message_ set).
  int step(size_t s) {
    auto& st = states_[s];
    const Instruction ins = lists_[s][st.pc];
    const int mb = ins.micro_batch, c = ins.chunk;
    if (ins.op == Op::ReduceGrads) return reduce(s, ins);
    if (ins.op == Op::OptimizerStep) {
      if (!st.reduced) return bad(s, ins, "optimizer step before ReduceGrads");
      st.pc++;
      return 1;
    }
    if (mb < 0 || mb >= m_) return bad(s, ins, "micro-batch out of range");
    if (c < 0 || c >= v_) return bad(s, ins, "chunk out of range");
    const int k = virtual_stage(c, static_cast<int>(s), static_cast<int>(P_), layout_);
    const size_t i = static_cast<size_t>(c) * m_ + mb;
    switch (ins.op) {
      case Op::RecvActivation:
        if (k == 0) return bad(s, ins, "virtual stage 0 has no upstream peer");
        if (const int r = receive(s, ins, Op::SendActivation, k - 1); r != 1) return r;
        st.received_act[i]++;
        break;
      case Op::Forward:
        if (k > 0 && st.received_act[i] != 1) return bad(s, ins, "input activation not received");
        if (st.forwarded[i]++ != 0) return bad(s, ins, "micro-batch forwarded twice");
        st.in_flight++;
        st.held++;
        st.in_flight_per_chunk[c]++;
        break;
      case Op::SendActivation:
        if (k + 1 >= V()) return bad(s, ins, "the last virtual stage has no downstream peer");
        if (st.forwarded[i] != 1 || st.sent_act[i]++ != 0)
          return bad(s, ins, "send before the forward, or sent twice");
        send(s, ins, k + 1);
        break;
      case Op::RecvGrad:
        if (k + 1 >= V()) return bad(s, ins, "the last virtual stage has no downstream peer");
        if (const int r = receive(s, ins, Op::SendGrad, k + 1); r != 1) return r;
        st.received_grad[i]++;
        break;
      case Op::Backward:
      case Op::BackwardInput:
        if (st.forwarded[i] != 1) return bad(s, ins, "backward before the forward");
        if (k + 1 < V() && st.received_grad[i] != 1) return bad(s, ins, "output grad not received");
        if (st.fused[i] + st.input_done[i] != 0)
          return bad(s, ins,
                     "micro-batch backwarded twice (Backward and BackwardInput are "
                     "exclusive, each runs once)");
        if (st.weight_done[i] != 0) return bad(s, ins, "backward after its BackwardWeight");
        (ins.op == Op::Backward ? st.fused : st.input_done)[i] = 1;
        st.in_flight--;
        st.in_flight_per_chunk[c]--;
        if (ins.op == Op::Backward) st.held--;
        else st.deferred++;
        break;
      case Op::BackwardWeight:
        if (st.fused[i] != 0)
          return bad(s, ins, "BackwardWeight after a fused Backward (never both kinds)");
        if (st.input_done[i] != 1) return bad(s, ins, "BackwardWeight before BackwardInput");
        if (st.weight_done[i]++ != 0) return bad(s, ins, "BackwardWeight run twice");
        st.deferred--;
        st.held--;
        break;
      case Op::SendGrad:
        if (k == 0) return bad(s, ins, "virtual stage 0 has no upstream peer");
        if (st.fused[i] + st.input_done[i] != 1 || st.sent_grad[i]++ != 0)
          return bad(s, ins, "send before the backward, or sent twice");
        send(s, ins, k - 1);
        break;
      case Op::ReduceGrads:
      case Op::OptimizerStep: break;  // handled above
    }
    auto& r = report_;
    r.peak_in_flight[s] = std::max(r.peak_in_flight[s], st.in_flight);
    r.peak_deferred_weights[s] = std::max(r.peak_deferred_weights[s], st.deferred);
    r.peak_held[s] = std::max(r.peak_held[s], st.held);
    r.peak_in_flight_per_chunk[s][c] =
        std::max(r.peak_in_flight_per_chunk[s][c], st.in_flight_per_chunk[c]);
    st.pc++;
    return 1;
  }

  void send(size_t s, const Instruction& ins, int to_virtual) {
    channel(s, static_cast<size_t>(stage_of_virtual(to_virtual, static_cast<int>(P_), layout_)))
        .push_back({ins.op, ins.micro_batch, ins.chunk, s});
  }

  /// Receives from virtual stage `from` the message `kind` of ins.micro_batch; NCCL's per rank
  /// pair order: the next message from that rank must be this one.
  int receive(size_t s, const Instruction& ins, Op kind, int from) {
    const size_t src = static_cast<size_t>(stage_of_virtual(from, static_cast<int>(P_), layout_));
    auto& q = channel(src, s);
    if (q.empty()) return 0;
    const PostedSend& head = q.front();
    if (head.op != kind || head.micro_batch != ins.micro_batch ||
        head.chunk != chunk_of_virtual(from, static_cast<int>(P_))) {
      std::ostringstream os;
      os << where(s, states_[s].pc, ins) << ": rank pair " << src << " -> " << s << " delivers "
         << to_string({head.op, head.micro_batch, head.chunk}) << " of stage " << src
         << " first (send and receive orders differ; NCCL matches "
         << "point-to-point calls in order per rank pair)";
      message_ = os.str();
      return -1;
    }
    q.pop_front();
    return 1;
  }

  int reduce(size_t s, const Instruction& ins) {
    auto& st = states_[s];
    for (int c = 0; c < v_; ++c)
      for (int mb = 0; mb < m_; ++mb) {
        const size_t i = static_cast<size_t>(c) * m_ + mb;
        if (st.fused[i] + st.weight_done[i] == 1) continue;
        const Op missing = st.input_done[i] ? Op::BackwardWeight : Op::Backward;
        message_ = where(s, st.pc, ins) + ": gradients reduced before every backward (" +
                   to_string({missing, mb, c}) + " not run yet)";
        return -1;
      }
    st.reduced = true;
    st.pc++;
    return 1;
  }

  int bad(size_t s, const Instruction& ins, const char* what) {
    message_ = where(s, states_[s].pc, ins) + ": " + what;
    return -1;
  }
  ScheduleCheckReport fail() {
    report_.ok = false;
    report_.message = message_;
    return report_;
  }
  ScheduleCheckReport deadlock() {
    std::ostringstream os;
    os << "deadlock: no stage can advance;";
    for (size_t s = 0; s < P_; ++s)
      if (states_[s].pc < lists_[s].size())
        os << " " << where(s, states_[s].pc, lists_[s][states_[s].pc]) << " waits;";
    report_.ok = false;
    report_.message = os.str();
    return report_;
  }
  ScheduleCheckReport finish() {
    for (size_t src = 0; src < P_; ++src)
      for (size_t dst = 0; dst < P_; ++dst)
        if (const auto& q = channel(src, dst); !q.empty()) {
          const PostedSend& h = q.front();
          report_.message = "stage " + std::to_string(src) + " sent a message nobody received (" +
                            to_string({h.op, h.micro_batch, h.chunk}) + " to stage " +
                            std::to_string(dst) + ")";
          return report_;
        }
    for (size_t s = 0; s < P_; ++s) {
      const auto& st = states_[s];
      for (int c = 0; c < v_; ++c)
        for (int mb = 0; mb < m_; ++mb) {
          const size_t i = static_cast<size_t>(c) * m_ + mb;
          if (st.forwarded[i] == 1 && st.fused[i] + st.weight_done[i] == 1) continue;
          report_.message = "stage " + std::to_string(s) + " did not run forward and backward " +
                            "of micro-batch " + std::to_string(mb) + " chunk " + std::to_string(c) +
                            " exactly once";
          return report_;
        }
      if (!st.reduced) {
        report_.message = "stage " + std::to_string(s) + " never reduced its gradients";
        return report_;
      }
    }
    report_.ok = true;
    return report_;
  }

  const StageSchedules& lists_;
  size_t P_;
  int m_, v_;
  ChunkLayout layout_;
  std::vector<StageState> states_;
  std::vector<std::deque<PostedSend>> channels_;  ///< [src * P + dst]: sends in posting order
  ScheduleCheckReport report_;
  std::string message_;
};

}  // namespace

ScheduleCheckReport check_schedule(const StageSchedules& lists, int micro_batches,
                                   int virtual_stages, ChunkLayout layout) {
  ScheduleCheckReport r;
  if (lists.empty() || micro_batches < 1 || virtual_stages < 0) {
    r.message = "expected at least one stage, one micro-batch and v >= 0 chunks per rank";
    return r;
  }
  int v = virtual_stages;
  if (v == 0) {
    v = 1;
    for (const auto& list : lists)
      for (const auto& ins : list) v = std::max(v, ins.chunk + 1);
  }
  if (v > 4096) {  // a corrupt chunk index; do not size the walk by it
    r.message = "chunk index " + std::to_string(v - 1) + " is implausible (more than 4096 chunks)";
    return r;
  }
  return Walker(lists, micro_batches, v, layout).run();
}

}  // namespace omnibal::schedule
