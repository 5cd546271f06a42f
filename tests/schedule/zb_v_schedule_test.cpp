#include "schedule/zb_v_schedule.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include "core/error.h"
#include "schedule/schedule_checker.h"
#include "schedule/schedules.h"

using namespace omnibal;
using namespace omnibal::schedule;

namespace {

/// [2P][m] V-layout costs: every F, B and W `t` seconds, transfers free, kept bytes 1.
PipelineStepCosts zb_v_costs(int P, int m, double t = 1.0) {
  auto c = PipelineStepCosts::zeros(2 * P, m);
  c.layout = ChunkLayout::kV;
  for (auto* mat : {&c.forward_s, &c.backward_input_s, &c.backward_weight_s, &c.kept_bytes,
                    &c.weight_kept_bytes})
    for (auto& row : *mat)
      std::fill(row.begin(), row.end(),
                mat == &c.kept_bytes || mat == &c.weight_kept_bytes ? 1.0 : t);
  return c;
}

double zb_v_makespan(const std::vector<StageTimeline>& t) {
  double end = 0;
  for (const auto& s : t) end = std::max(end, s.ready_for_reduce_s);
  return end;
}

}  // namespace

TEST_CASE("the V layout puts chunk 0 of rank s on s and chunk 1 on 2P-1-s", "[schedule]") {
  const int P = 4;
  for (int s = 0; s < P; ++s) {
    CHECK(virtual_stage(0, s, P, ChunkLayout::kV) == s);
    CHECK(virtual_stage(1, s, P, ChunkLayout::kV) == 2 * P - 1 - s);
    CHECK(virtual_stage(1, s, P) == P + s);  // the loop layout, unchanged
  }
  for (const auto layout : {ChunkLayout::kLoop, ChunkLayout::kV})
    for (int k = 0; k < 3 * P; ++k) {
      const int s = stage_of_virtual(k, P, layout), c = chunk_of_virtual(k, P);
      CHECK(virtual_stage(c, s, P, layout) == k);
    }
  // The hand-over P-1 -> P stays on rank P-1; the last chunk is on rank 0.
  CHECK(stage_of_virtual(P - 1, P, ChunkLayout::kV) == P - 1);
  CHECK(stage_of_virtual(P, P, ChunkLayout::kV) == P - 1);
  CHECK(stage_of_virtual(2 * P - 1, P, ChunkLayout::kV) == 0);
  CHECK(chunk_layout(PipelineSchedule::kZbV) == ChunkLayout::kV);
  CHECK(chunk_layout(PipelineSchedule::kInterleaved) == ChunkLayout::kLoop);
  CHECK(chunks_per_rank(PipelineSchedule::kZbV, 1) == 2);
}

TEST_CASE("ZB-V passes the checker for every P <= 8 and m <= 16 and hits its ideal bubble",
          "[schedule][checker][timeline]") {
  const int P = GENERATE(range(1, 9));
  const int m = GENERATE(range(1, 17));
  const auto lists = build_schedule(PipelineSchedule::kZbV, P, m);
  CHECK(lists == build_zb_v_schedule(P, m));
  const auto r = check_schedule(lists, m, 2, ChunkLayout::kV);
  INFO("P=" << P << " m=" << m << ": " << r.message);
  REQUIRE(r.ok);
  // The V on the loop layout is a different program: the checker must see it.
  if (P > 1) CHECK_FALSE(check_schedule(lists, m, 2).ok);
  const auto t = run_pipeline_timeline(lists, zb_v_costs(P, m));
  const double end = zb_v_makespan(t);
  // Lower bounds in chunk-times: the last rank starts P-1 late with 6m of work; rank P-1 runs
  // 2m F's from P-1, then the last micro-batch's P-1 F's, 2P B's and rank 0's W.
  CHECK(end >= std::max(6.0 * m + P - 1, 4.0 * P + 2 * m - 1) - 1e-9);
  if (m >= 2 * P - 1) CHECK(end == Approx(6.0 * m + P - 1));  // the ideal, reached
  CHECK(end <= std::max(6.0 * m + P - 1, 4.0 * P + 2 * m - 1) + 6);
  for (int s = 0; s < P; ++s) {
    INFO("rank " << s);
    const auto& st = t[s];
    const double busy = st.forward_busy_s + st.backward_busy_s + st.backward_weight_busy_s;
    CHECK(busy == Approx(6.0 * m));
    CHECK((end - busy) / end ==
          Approx(bubble_fraction(PipelineSchedule::kZbV, P, m)).margin(1e-12));
    CHECK(r.peak_held[s] <= 2 * P);  // 1F1B's activation memory: P micro-batches of 2 chunks
    CHECK(st.peak_activation_bytes == Approx(r.peak_held[s]));
  }
  if (m >= 2 * P - 1)
    CHECK(bubble_fraction(PipelineSchedule::kZbV, P, m) ==
          Approx((P - 1.0) / (6.0 * m + P - 1)).margin(1e-12));
}

TEST_CASE("ZB-V for P=2, m=1 by hand: the chain there and back, W's in the tail",
          "[schedule][timeline]") {
  // Rank 0 holds virtual stages 0 and 3, rank 1 stages 1 and 2 (the turn of the V on one rank).
  // F chain 0 [0,1] 1 [1,2] 2 [2,3] 3 [3,4]; B chain 3 [4,5] 2 [5,6] 1 [6,7] 0 [7,8]; W's fill in:
  // rank 0 W3 [5,6], W0 [8,9]; rank 1 W2 [7,8], W1 [8,9]. Makespan 9 = 4P + 2m - 1 (the bound).
  const auto lists = build_zb_v_schedule(2, 1);
  using I = Instruction;
  const std::vector<I> rank0 = {{Op::Forward, 0, 0},        {Op::SendActivation, 0, 0},
                                {Op::RecvActivation, 0, 1}, {Op::Forward, 0, 1},
                                {Op::BackwardInput, 0, 1},  {Op::SendGrad, 0, 1},
                                {Op::BackwardWeight, 0, 1}, {Op::RecvGrad, 0, 0},
                                {Op::BackwardInput, 0, 0},  {Op::BackwardWeight, 0, 0},
                                {Op::ReduceGrads, -1, 0},   {Op::OptimizerStep, -1, 0}};
  CHECK(lists[0] == rank0);
  const auto t = run_pipeline_timeline(lists, zb_v_costs(2, 1));
  CHECK(t[0].ready_for_reduce_s == Approx(9));
  CHECK(t[1].ready_for_reduce_s == Approx(9));
  CHECK(t[0].idle_s == Approx(3));  // waits [1,3] for stage 3's input, [6,7] for stage 0's grad
  CHECK(t[1].idle_s == Approx(3));  // waits [0,1] for its input, [3,5] for stage 2's grad
}

TEST_CASE("ZB-V for P=2, m=3: the ideal 6m + P - 1 = 19, rank 1 never idle after its start",
          "[schedule][timeline]") {
  const auto t = run_pipeline_timeline(build_zb_v_schedule(2, 3), zb_v_costs(2, 3));
  CHECK(zb_v_makespan(t) == Approx(19));
  CHECK(t[1].idle_s == Approx(1));  // only [0, 1], before its first input
  CHECK(t[0].idle_s + t[0].forward_busy_s + t[0].backward_busy_s + t[0].backward_weight_busy_s ==
        Approx(t[0].ready_for_reduce_s));
}

TEST_CASE("ZB-V on variable costs: valid lists, 1F1B's memory, replayed by the timeline",
          "[schedule][checker][timeline]") {
  const int P = GENERATE(1, 2, 3, 4, 8);
  const int m = GENERATE(1, 3, 8, 16);
  std::mt19937 rng(static_cast<unsigned>(P * 100 + m));
  std::uniform_real_distribution<double> u(0.3, 3.0), x(0.0, 0.2);
  auto costs = zb_v_costs(P, m);
  for (int i = 0; i < m; ++i) {
    const double scale = u(rng);  // one micro-batch is long on every chunk (its shape)
    for (int k = 0; k < 2 * P; ++k) {
      costs.forward_s[k][i] = scale * u(rng);
      costs.backward_input_s[k][i] = 1.2 * costs.forward_s[k][i];
      costs.backward_weight_s[k][i] = 0.8 * costs.forward_s[k][i];
      costs.send_activation_s[k][i] = costs.send_grad_s[k][i] = x(rng);
    }
  }
  const auto lists = build_zb_v_schedule(P, m, &costs);
  const auto r = check_schedule(lists, m, 2, ChunkLayout::kV);
  INFO("P=" << P << " m=" << m << ": " << r.message);
  REQUIRE(r.ok);
  for (int s = 0; s < P; ++s) CHECK(r.peak_held[s] <= 2 * P);
  // The step's own lists are no slower on its costs than the equal-cost lists.
  const double tuned = zb_v_makespan(run_pipeline_timeline(lists, costs));
  const double plain = zb_v_makespan(run_pipeline_timeline(build_zb_v_schedule(P, m), costs));
  CHECK(tuned <= plain * 1.02);
}

TEST_CASE("ZB-V refuses what it cannot build", "[schedule]") {
  CHECK_THROWS_AS(build_zb_v_schedule(0, 4), Error);
  CHECK_THROWS_AS(build_zb_v_schedule(2, 0), Error);
  ZbVOptions bad;
  bad.max_held = -1;
  CHECK_THROWS_AS(build_zb_v_schedule(2, 2, nullptr, bad), Error);
  auto loop = zb_v_costs(2, 2);
  loop.layout = ChunkLayout::kLoop;
  CHECK_THROWS_WITH(build_zb_v_schedule(2, 2, &loop), Catch::Contains("V"));
  auto short_rows = zb_v_costs(2, 2);
  short_rows.forward_s.pop_back();
  CHECK_THROWS_WITH(build_zb_v_schedule(2, 2, &short_rows), Catch::Contains("forward_s"));
  CHECK_THROWS_AS(build_schedule(PipelineSchedule::kZbV, 2, 4, 3), Error);
  CHECK(build_schedule(PipelineSchedule::kZbV, 2, 4, 2) == build_zb_v_schedule(2, 4));
}
