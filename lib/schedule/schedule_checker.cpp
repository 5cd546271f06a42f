#include "schedule/schedule_checker.h"

#include <deque>
#include <sstream>

namespace omnibal::schedule {
namespace {

/// Per-stage walking state.
struct StageState {
  size_t pc = 0;
  std::vector<int> received_act, forwarded, received_grad, backwarded, sent_act, sent_grad;
  int in_flight = 0;
  int backwards_done = 0;
  bool reduced = false;
};

std::string where(size_t stage, size_t index, const Instruction& ins) {
  std::ostringstream os;
  os << "stage " << stage << " instruction " << index << " (" << to_string(ins) << ")";
  return os.str();
}

class Walker {
 public:
  Walker(const StageSchedules& lists, int m)
      : lists_(lists), m_(m), states_(lists.size()), fwd_(lists.size()), bwd_(lists.size()) {
    for (auto& st : states_) {
      for (auto* v : {&st.received_act, &st.forwarded, &st.received_grad, &st.backwarded,
                      &st.sent_act, &st.sent_grad})
        v->assign(static_cast<size_t>(m), 0);
    }
    report_.peak_in_flight.assign(lists.size(), 0);
  }

  ScheduleCheckReport run() {
    for (;;) {
      bool progressed = false, all_done = true;
      for (size_t s = 0; s < lists_.size(); ++s) {
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
  /// 1: executed, 0: blocked on a receive, -1: violation (message_ set).
  int step(size_t s) {
    auto& st = states_[s];
    const Instruction ins = lists_[s][st.pc];
    const int mb = ins.micro_batch;
    const bool per_mb = ins.op != Op::ReduceGrads && ins.op != Op::OptimizerStep;
    if (per_mb && (mb < 0 || mb >= m_)) return bad(s, ins, "micro-batch out of range");
    const size_t P = lists_.size();
    switch (ins.op) {
      case Op::RecvActivation:
        if (s == 0) return bad(s, ins, "the first stage has no upstream peer");
        if (fwd_[s - 1].empty()) return 0;
        if (fwd_[s - 1].front() != mb) return order(s, ins, fwd_[s - 1].front());
        fwd_[s - 1].pop_front();
        st.received_act[mb]++;
        break;
      case Op::Forward:
        if (s > 0 && st.received_act[mb] != 1) return bad(s, ins, "input activation not received");
        if (st.forwarded[mb]++ != 0) return bad(s, ins, "micro-batch forwarded twice");
        if (++st.in_flight > report_.peak_in_flight[s]) report_.peak_in_flight[s] = st.in_flight;
        break;
      case Op::SendActivation:
        if (s + 1 >= P) return bad(s, ins, "the last stage has no downstream peer");
        if (st.forwarded[mb] != 1 || st.sent_act[mb]++ != 0)
          return bad(s, ins, "send before the forward, or sent twice");
        fwd_[s].push_back(mb);
        break;
      case Op::RecvGrad:
        if (s + 1 >= P) return bad(s, ins, "the last stage has no downstream peer");
        if (bwd_[s + 1].empty()) return 0;
        if (bwd_[s + 1].front() != mb) return order(s, ins, bwd_[s + 1].front());
        bwd_[s + 1].pop_front();
        st.received_grad[mb]++;
        break;
      case Op::Backward:
        if (st.forwarded[mb] != 1) return bad(s, ins, "backward before the forward");
        if (s + 1 < P && st.received_grad[mb] != 1) return bad(s, ins, "output grad not received");
        if (st.backwarded[mb]++ != 0) return bad(s, ins, "micro-batch backwarded twice");
        st.in_flight--;
        st.backwards_done++;
        break;
      case Op::BackwardInput:
      case Op::BackwardWeight:
        return bad(s, ins, "split backward: not checked yet (WIP)");
      case Op::SendGrad:
        if (s == 0) return bad(s, ins, "the first stage has no upstream peer");
        if (st.backwarded[mb] != 1 || st.sent_grad[mb]++ != 0)
          return bad(s, ins, "send before the backward, or sent twice");
        bwd_[s].push_back(mb);
        break;
      case Op::ReduceGrads:
        if (st.backwards_done != m_) return bad(s, ins, "gradients reduced before every backward");
        st.reduced = true;
        break;
      case Op::OptimizerStep:
        if (!st.reduced) return bad(s, ins, "optimizer step before ReduceGrads");
        break;
    }
    st.pc++;
    return 1;
  }

  int bad(size_t s, const Instruction& ins, const char* what) {
    message_ = where(s, states_[s].pc, ins) + ": " + what;
    return -1;
  }
  int order(size_t s, const Instruction& ins, int head) {
    message_ = where(s, states_[s].pc, ins) + ": the channel delivers micro-batch " +
               std::to_string(head) + " first (send and receive orders differ)";
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
    for (size_t s = 0; s < lists_.size(); ++s)
      if (states_[s].pc < lists_[s].size())
        os << " " << where(s, states_[s].pc, lists_[s][states_[s].pc]) << " waits;";
    report_.ok = false;
    report_.message = os.str();
    return report_;
  }
  ScheduleCheckReport finish() {
    for (size_t s = 0; s < lists_.size(); ++s) {
      const auto& st = states_[s];
      if (!fwd_[s].empty() || !bwd_[s].empty()) {
        report_.message = "stage " + std::to_string(s) + " sent a message nobody received";
        return report_;
      }
      for (int mb = 0; mb < m_; ++mb)
        if (st.forwarded[mb] != 1 || st.backwarded[mb] != 1) {
          report_.message = "stage " + std::to_string(s) + " did not run forward and backward of" +
                            " micro-batch " + std::to_string(mb) + " exactly once";
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
  int m_;
  std::vector<StageState> states_;
  std::vector<std::deque<int>> fwd_;  ///< fwd_[s]: activations sent by s to s+1, in order
  std::vector<std::deque<int>> bwd_;  ///< bwd_[s]: gradients sent by s to s-1, in order
  ScheduleCheckReport report_;
  std::string message_;
};

}  // namespace

ScheduleCheckReport check_schedule(const StageSchedules& lists, int micro_batches) {
  if (lists.empty() || micro_batches < 1) {
    ScheduleCheckReport r;
    r.message = "expected at least one stage and one micro-batch";
    return r;
  }
  return Walker(lists, micro_batches).run();
}

}  // namespace omnibal::schedule
