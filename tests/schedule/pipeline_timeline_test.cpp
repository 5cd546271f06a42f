#include "schedule/pipeline_timeline.h"

#include <catch2/catch.hpp>

#include <algorithm>

#include "core/error.h"
#include "schedule/one_f_one_b.h"
#include "schedule/schedule_checker.h"
#include "schedule/schedules.h"

using namespace omnibal::schedule;
using omnibal::PipelineSchedule;

namespace {
PipelineStepCosts uniform_costs(int P, int m, double f, double b) {
  auto c = PipelineStepCosts::zeros(P, m);
  for (int s = 0; s < P; ++s)
    for (int i = 0; i < m; ++i) {
      c.forward_s[s][i] = f;
      c.backward_s[s][i] = b;
      c.kept_bytes[s][i] = 10;
    }
  return c;
}
double makespan(const std::vector<StageTimeline>& t) {
  double end = 0;
  for (const auto& s : t) end = std::max(end, s.ready_for_reduce_s);
  return end;
}
}  // namespace

TEST_CASE("P=2, m=2, f=1, b=2 gives the textbook 1F1B time", "[schedule][timeline]") {
  const auto t = run_pipeline_timeline(build_1f1b_schedule(2, 2), uniform_costs(2, 2, 1, 2));
  // Stage 0: F0 [0,1] F1 [1,2] wait B0 [4,6] wait B1 [7,9]; stage 1: F0 [1,2] B0 [2,4] F1 [4,5]
  // B1 [5,7]. Makespan (m + P - 1)(f + b) = 9.
  CHECK(t[0].ready_for_reduce_s == Approx(9));
  CHECK(t[1].ready_for_reduce_s == Approx(7));
  CHECK(t[0].idle_s == Approx(3));
  CHECK(t[1].idle_s == Approx(1));
  CHECK(t[0].peak_activation_bytes == Approx(20));
  CHECK(t[1].peak_activation_bytes == Approx(10));
}

TEST_CASE("background work shares the rank's core and runs alone while the rank waits",
          "[schedule][timeline]") {
  auto c = uniform_costs(2, 1, 1, 2);
  // P=2, m=1 alone: stage 0 F [0,1]; stage 1 waits [0,1], F [1,2] B [2,4]; stage 0 B [4,6].
  CHECK(makespan(run_pipeline_timeline(build_1f1b_schedule(2, 1), c)) == Approx(6));
  // 0.5 s on stage 1 runs during its wait: nothing moves.
  c.background_s = {0, 0.5};
  auto t = run_pipeline_timeline(build_1f1b_schedule(2, 1), c);
  CHECK(makespan(t) == Approx(6));
  CHECK(t[1].forward_busy_s == Approx(1));
  // 2 s on stage 1: 1 s in the wait, the other second halves F's speed: F [1,3] B [3,5];
  // stage 0 waits [1,5], B [5,7].
  c.background_s = {0, 2};
  t = run_pipeline_timeline(build_1f1b_schedule(2, 1), c);
  CHECK(makespan(t) == Approx(7));
  CHECK(t[1].forward_busy_s == Approx(2));
  CHECK(t[1].idle_s == Approx(1));
  // 1.5 s on stage 0: F at half speed [0,2] (0.5 s left), stage 1 F [2,3] B [3,5]; the rest runs
  // in stage 0's wait [2,5]; B [5,7].
  c.background_s = {1.5, 0};
  t = run_pipeline_timeline(build_1f1b_schedule(2, 1), c);
  CHECK(makespan(t) == Approx(7));
  CHECK(t[0].forward_busy_s == Approx(2));
  CHECK(t[0].backward_busy_s == Approx(2));
  // One rank alone (no wait): the work outlasts F and B (3 s of compute), the 1 s left
  // delays ReduceGrads: F [0,2] B [2,6] then 1 s: 7.
  auto one = uniform_costs(1, 1, 1, 2);
  one.background_s = {4};
  CHECK(makespan(run_pipeline_timeline(build_1f1b_schedule(1, 1), one)) == Approx(7));
  c.background_s = {1};
  CHECK_THROWS_WITH(run_pipeline_timeline(build_1f1b_schedule(2, 1), c),
                    Catch::Contains("background work for 1 ranks"));
  c.background_s = {-1, 0};
  CHECK_THROWS_WITH(run_pipeline_timeline(build_1f1b_schedule(2, 1), c),
                    Catch::Contains("expected >= 0"));
}

TEST_CASE("uniform micro-batches: makespan (m+P-1)(f+b), bubble (P-1)/(m+P-1)",
          "[schedule][timeline]") {
  const int P = GENERATE(1, 2, 3, 5, 8);
  const int m = GENERATE(1, 2, 4, 7, 16);
  const double f = 0.7, b = 1.9;
  const auto t = run_pipeline_timeline(build_1f1b_schedule(P, m), uniform_costs(P, m, f, b));
  const double end = makespan(t);
  CHECK(end == Approx((m + P - 1) * (f + b)));
  for (int s = 0; s < P; ++s) {
    const double busy = t[s].forward_busy_s + t[s].backward_busy_s;
    CHECK((end - busy) / end == Approx(bubble_fraction_1f1b(P, m)).margin(1e-12));
    CHECK(t[s].peak_in_flight == std::min(m, P - s));
  }
}

TEST_CASE("transfers delay the receiver and a slow micro-batch stretches the step",
          "[schedule][timeline]") {
  auto c = uniform_costs(2, 1, 1, 2);
  c.send_activation_s[0][0] = 0.5;
  c.send_grad_s[1][0] = 0.25;
  c.transient_bytes[0][0] = 5;
  auto t = run_pipeline_timeline(build_1f1b_schedule(2, 1), c);
  // F0 on stage 0 [0,1], arrives 1.5, stage 1 F [1.5,2.5] B [2.5,4.5], grad arrives 4.75,
  // stage 0 B [4.75, 6.75].
  CHECK(t[0].ready_for_reduce_s == Approx(6.75));
  CHECK(t[1].idle_s == Approx(1.5));
  CHECK(t[0].peak_activation_bytes == Approx(15));
  auto d = uniform_costs(2, 3, 1, 2);
  d.forward_s[1][1] = 3;  // one heavy micro-batch on the last stage
  t = run_pipeline_timeline(build_1f1b_schedule(2, 3), d);
  CHECK(makespan(t) > (3 + 1) * 3.0);
}

namespace {
/// T_F = T_B = T_W = 1 (fused Backward 2) per stage, each of the v chunks 1/v of that; free
/// transfers; kept 1 per graph, all of it read by W (weight_kept 1).
PipelineStepCosts unit_costs(int P, int m, int v) {
  auto c = PipelineStepCosts::zeros(P * v, m);
  for (int k = 0; k < P * v; ++k)
    for (int i = 0; i < m; ++i) {
      c.forward_s[k][i] = c.backward_input_s[k][i] = c.backward_weight_s[k][i] = 1.0 / v;
      c.backward_s[k][i] = 2.0 / v;
      c.kept_bytes[k][i] = c.weight_kept_bytes[k][i] = 1;
    }
  return c;
}
}  // namespace

TEST_CASE("equal micro-batches: every schedule's makespan and bubble in closed form",
          "[schedule][timeline]") {
  const int P = GENERATE(range(1, 9));
  const int m = GENERATE(range(1, 17));
  const int v = GENERATE(1, 2, 3, 4);
  std::vector<PipelineSchedule> kinds;
  if (v == 1) kinds = {PipelineSchedule::k1F1B, PipelineSchedule::kZbH1};
  if (v > 1 && m % P == 0) kinds = {PipelineSchedule::kInterleaved};
  for (const auto kind : kinds) {
    INFO(omnibal::choice_name(kind) << " P=" << P << " m=" << m << " v=" << v);
    const auto lists = build_schedule(kind, P, m, v);
    const auto t = run_pipeline_timeline(lists, unit_costs(P, m, v));
    const double end = makespan(t);
    if (kind == PipelineSchedule::k1F1B) CHECK(end == Approx(3.0 * (m + P - 1)));
    if (kind == PipelineSchedule::kZbH1) {
      CHECK(end == Approx(std::max(3.0 * m + P - 1, 2.0 * m + 2 * P - 1)));
      if (m >= P) CHECK(end == Approx(3.0 * m + P - 1));
    }
    if (kind == PipelineSchedule::kInterleaved) CHECK(end == Approx(3.0 * m + 3.0 * (P - 1) / v));
    const auto report = check_schedule(lists, m, v);
    REQUIRE(report.ok);
    for (int s = 0; s < P; ++s) {
      const auto& st = t[s];
      const double busy = st.forward_busy_s + st.backward_busy_s + st.backward_weight_busy_s;
      CHECK(busy == Approx(3.0 * m));
      CHECK(st.backward_weight_busy_s == (kind == PipelineSchedule::kZbH1 ? Approx(m) : Approx(0)));
      CHECK((end - busy) / end == Approx(bubble_fraction(kind, P, m, v)).margin(1e-12));
      // The timeline's counts are the checker's: graphs alive, and (weight_kept = kept) held.
      CHECK(st.peak_in_flight == report.peak_in_flight[s]);
      CHECK(st.peak_activation_bytes == Approx(report.peak_held[s]));
    }
  }
}

TEST_CASE("P=2, m=2 unequal micro-batches, one hand-computed case per schedule",
          "[schedule][timeline]") {
  SECTION("1F1B") {
    auto c = PipelineStepCosts::zeros(2, 2);
    c.forward_s = {{1, 2}, {1, 1}};
    c.backward_s = {{2, 3}, {3, 2}};
    // Stage 0: F0 [0,1] F1 [1,3], waits for g0, B0 [5,7], waits for g1, B1 [8,11].
    // Stage 1: waits for a0, F0 [1,2] B0 [2,5] (g0 at 5), F1 [5,6] B1 [6,8] (g1 at 8).
    // ready_for_reduce 11 and 8, idle 3 (3 -> 5, 7 -> 8) and 1 (0 -> 1).
    const auto t = run_pipeline_timeline(build_1f1b_schedule(2, 2), c);
    CHECK(t[0].ready_for_reduce_s == Approx(11));
    CHECK(t[1].ready_for_reduce_s == Approx(8));
    CHECK(t[0].idle_s == Approx(3));
    CHECK(t[1].idle_s == Approx(1));
  }
  SECTION("ZB-H1, with the split backward's bytes") {
    auto c = PipelineStepCosts::zeros(2, 2);
    c.forward_s = {{1, 2}, {1, 1}};
    c.backward_input_s = {{1, 1}, {2, 1}};
    c.backward_weight_s = {{1, 2}, {1, 1}};
    c.kept_bytes = {{10, 10}, {10, 10}};
    c.weight_kept_bytes = {{4, 4}, {4, 4}};
    c.transient_bytes = {{1, 1}, {1, 1}};
    // Stage 0: F0 [0,1] F1 [1,3], waits for g0, B0 [4,5] W0 [5,6], g1 at 6, B1 [6,7] W1 [7,9].
    // Stage 1: waits for a0, F0 [1,2] B0 [2,4] (g0 at 4), F1 [4,5] B1 [5,6] (g1 at 6), then the
    // deferred W0 [6,7] W1 [7,8]. ready_for_reduce 9 and 8, idle 1 (3 -> 4) and 1 (0 -> 1).
    // Bytes, stage 0: 10, 20, B0 at 20 + 1, then 14, W0 15, 10, B1 11, 4, W1 5: peak 21.
    // Stage 1: 10, B0 11, 4, F1 14, B1 15, 8, W0 9, 4, W1 5: peak 15.
    const auto t = run_pipeline_timeline(build_zb_h1_schedule(2, 2), c);
    CHECK(t[0].ready_for_reduce_s == Approx(9));
    CHECK(t[1].ready_for_reduce_s == Approx(8));
    CHECK(t[0].idle_s == Approx(1));
    CHECK(t[1].idle_s == Approx(1));
    CHECK(t[0].backward_busy_s == Approx(2));
    CHECK(t[0].backward_weight_busy_s == Approx(3));
    CHECK(t[0].peak_activation_bytes == Approx(21));
    CHECK(t[1].peak_activation_bytes == Approx(15));
    CHECK(t[0].peak_in_flight == 2);
    CHECK(t[1].peak_in_flight == 1);
  }
  SECTION("interleaved, v = 2") {
    auto c = PipelineStepCosts::zeros(4, 2);  // rows: virtual stages 0 (rank 0), 1, 2 (rank 0), 3
    c.forward_s = {{1, 2}, {1, 1}, {1, 1}, {1, 1}};
    c.backward_s = {{2, 2}, {2, 2}, {2, 2}, {2, 1}};
    // Rank 0 runs all four forwards first (warm-up 4): F{0} [0,1] F{1} [1,3] F{0 c1} [3,4]
    // F{1 c1} [4,5]; waits for g{0 c1}, B{0 c1} [7,9] B{1 c1} [9,11] B{0} [11,13] B{1} [13,15].
    // Rank 1 (warm-up 2): waits, F{0} [1,2], waits, F{1} [3,4]; F{0 c1} [4,5] B{0 c1} [5,7]
    // F{1 c1} [7,8] B{1 c1} [8,9]; B{0} [9,11] B{1} [11,13].
    // ready_for_reduce 15 and 13, idle 2 (5 -> 7) and 2 (0 -> 1, 2 -> 3).
    const auto t = run_pipeline_timeline(build_interleaved_schedule(2, 2, 2), c);
    CHECK(t[0].ready_for_reduce_s == Approx(15));
    CHECK(t[1].ready_for_reduce_s == Approx(13));
    CHECK(t[0].idle_s == Approx(2));
    CHECK(t[1].idle_s == Approx(2));
    CHECK(t[0].peak_in_flight == 4);
    CHECK(t[1].peak_in_flight == 3);
  }
}

TEST_CASE("a same-rank hand-over is free and chunks share one link per rank pair",
          "[schedule][timeline]") {
  // P = 1, v = 2: the hand-overs between virtual stages 0 and 1 cost nothing.
  auto c = unit_costs(1, 2, 2);
  for (auto* mat : {&c.send_activation_s, &c.send_grad_s})
    for (auto& row : *mat) std::fill(row.begin(), row.end(), 5.0);
  auto t = run_pipeline_timeline(build_interleaved_schedule(1, 2, 2), c);
  CHECK(t[0].ready_for_reduce_s == Approx(6));
  CHECK(t[0].idle_s == 0);
  // P = 2, v = 2, m = 2, free compute, 1 s per message. Rank 0 posts SendActivation{1}
  // (virtual stage 0 -> 1) at 2 and SendActivation{0 c1} (2 -> 3) right after: both use the
  // rank 0 -> 1 link, so {0 c1} goes out [3,4], not [2,3] as on a link of its own.
  using I = Instruction;
  StageSchedules lists(2);
  lists[0] = {I{Op::Forward, 0},           I{Op::SendActivation, 0},    I{Op::RecvActivation, 0, 1},
              I{Op::Forward, 0, 1},        I{Op::Forward, 1},           I{Op::SendActivation, 1},
              I{Op::SendActivation, 0, 1}, I{Op::RecvActivation, 1, 1}, I{Op::Forward, 1, 1},
              I{Op::SendActivation, 1, 1}, I{Op::RecvGrad, 0, 1},       I{Op::Backward, 0, 1},
              I{Op::SendGrad, 0, 1},       I{Op::RecvGrad, 1, 1},       I{Op::Backward, 1, 1},
              I{Op::SendGrad, 1, 1},       I{Op::RecvGrad, 0},          I{Op::Backward, 0},
              I{Op::RecvGrad, 1},          I{Op::Backward, 1},          I{Op::ReduceGrads, -1}};
  lists[1] = build_interleaved_schedule(2, 2, 2)[1];
  REQUIRE(check_schedule(lists, 2).ok);
  auto e = PipelineStepCosts::zeros(4, 2);
  e.send_activation_s = e.send_grad_s = std::vector<std::vector<double>>(4, {1.0, 1.0});
  t = run_pipeline_timeline(lists, e);
  // Rank 0 -> 1: {0} [0,1], {1} [2,3], {0 c1} [3,4], {1 c1} [4,5], g{0 c1} [5,6], g{1 c1} [6,7].
  // Rank 1 -> 0: {0} [1,2], {1} [3,4], g{0 c1} [4,5], g{1 c1} [5,6], g{0} [6,7], g{1} [7,8].
  CHECK(t[0].ready_for_reduce_s == Approx(8));
  CHECK(t[1].ready_for_reduce_s == Approx(7));
  CHECK(t[1].idle_s == Approx(7));
}

TEST_CASE("the timeline checks the nine cost matrices and the lists' chunks",
          "[schedule][timeline]") {
  using Catch::Contains;
  const auto lists = build_interleaved_schedule(2, 2, 2);
  auto c = PipelineStepCosts::zeros(4, 2);
  CHECK_NOTHROW(run_pipeline_timeline(lists, c));
  c.backward_weight_s.pop_back();
  CHECK_THROWS_WITH(run_pipeline_timeline(lists, c),
                    Contains("backward_weight_s has 3 virtual stages, expected 4"));
  c = PipelineStepCosts::zeros(4, 2);
  c.weight_kept_bytes[2].push_back(0);
  CHECK_THROWS_WITH(run_pipeline_timeline(lists, c), Contains("weight_kept_bytes[2] has 3"));
  CHECK_THROWS_WITH(run_pipeline_timeline(lists, PipelineStepCosts::zeros(3, 2)),
                    Contains("expected a positive multiple of the 2 stages"));
  CHECK_THROWS_WITH(run_pipeline_timeline(lists, PipelineStepCosts::zeros(2, 2)),
                    Contains("outside the costs' 2 micro-batches x 1 chunks"));
  CHECK_THROWS_AS(PipelineStepCosts::zeros(-1, 2), omnibal::Error);
}
