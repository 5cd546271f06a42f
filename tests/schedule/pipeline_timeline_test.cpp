#include "schedule/pipeline_timeline.h"

#include <catch2/catch.hpp>

#include <algorithm>

#include "schedule/one_f_one_b.h"

using namespace omnibal::schedule;

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
