#include "schedule/schedules.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"
#include "schedule/schedule_checker.h"

using namespace omnibal;
using namespace omnibal::schedule;

namespace {

/// How often each (op, micro-batch, chunk) occurs in stage s's list.
std::map<std::tuple<Op, int, int>, int> counts(const std::vector<Instruction>& list) {
  std::map<std::tuple<Op, int, int>, int> n;
  for (const auto& i : list) n[{i.op, i.micro_batch, i.chunk}]++;
  return n;
}

/// Every (micro-batch, chunk) is forwarded once and backwarded once (fused, or B then W), with the
/// point-to-point ops the virtual stage's neighbours need.
void check_counts(const StageSchedules& lists, int m, int v, bool split) {
  const int P = static_cast<int>(lists.size()), V = P * v;
  for (int s = 0; s < P; ++s) {
    auto n = counts(lists[s]);
    for (int c = 0; c < v; ++c)
      for (int mb = 0; mb < m; ++mb) {
        const int k = virtual_stage(c, s, P);
        INFO("stage " << s << " chunk " << c << " mb " << mb);
        CHECK(n[{Op::Forward, mb, c}] == 1);
        CHECK(n[{Op::Backward, mb, c}] == (split ? 0 : 1));
        CHECK(n[{Op::BackwardInput, mb, c}] == (split ? 1 : 0));
        CHECK(n[{Op::BackwardWeight, mb, c}] == (split ? 1 : 0));
        CHECK(n[{Op::RecvActivation, mb, c}] == (k > 0 ? 1 : 0));
        CHECK(n[{Op::SendGrad, mb, c}] == (k > 0 ? 1 : 0));
        CHECK(n[{Op::SendActivation, mb, c}] == (k + 1 < V ? 1 : 0));
        CHECK(n[{Op::RecvGrad, mb, c}] == (k + 1 < V ? 1 : 0));
      }
    // Nothing else: compute, the four point-to-point ops (none before virtual stage 0 or
    // after the last), ReduceGrads and OptimizerStep.
    const int compute = m * v * (split ? 3 : 2);
    const int p2p = m * (4 * v - 2 * (s == 0) - 2 * (s == P - 1));
    CHECK(lists[s].size() == static_cast<size_t>(compute + p2p + 2));
    CHECK(n[{Op::ReduceGrads, -1, 0}] == 1);
    CHECK(n[{Op::OptimizerStep, -1, 0}] == 1);
  }
}

}  // namespace

TEST_CASE("ZB-H1 passes the checker for every P <= 8 and m <= 16, with exact peaks",
          "[schedule][checker]") {
  const int P = GENERATE(range(1, 9));
  const int m = GENERATE(range(1, 17));
  const auto lists = build_schedule(PipelineSchedule::kZbH1, P, m);
  const auto r = check_schedule(lists, m);
  INFO("P=" << P << " m=" << m << ": " << r.message);
  REQUIRE(r.ok);
  check_counts(lists, m, 1, /*split=*/true);
  for (int s = 0; s < P; ++s) {
    INFO("stage " << s);
    CHECK(r.peak_in_flight[s] == std::min(m, P - s));         // 1F1B's autograd graphs
    CHECK(r.peak_deferred_weights[s] == std::min(m, s + 1));  // s, and s+1 right after a B
    CHECK(r.peak_held[s] == std::min(m, P));                  // 1F1B's stage 0, on every stage
    CHECK(r.peak_in_flight_per_chunk[s] == std::vector<int>{r.peak_in_flight[s]});
  }
}

TEST_CASE("interleaved 1F1B passes the checker for P <= 8, m <= 16, v <= 4, m % P == 0",
          "[schedule][checker]") {
  const int P = GENERATE(range(1, 9));
  const int m = GENERATE(range(1, 17));
  const int v = GENERATE(2, 3, 4);
  if (m % P != 0) return;
  const auto lists = build_schedule(PipelineSchedule::kInterleaved, P, m, v);
  const auto r = check_schedule(lists, m, v);
  INFO("P=" << P << " m=" << m << " v=" << v << ": " << r.message);
  REQUIRE(r.ok);
  CHECK(check_schedule(lists, m).ok);  // v inferred from the lists
  check_counts(lists, m, v, /*split=*/false);
  for (int s = 0; s < P; ++s) {
    INFO("stage " << s);
    // Megatron's warm-up forwards, plus the steady state's first forward, capped at all v m.
    CHECK(r.peak_in_flight[s] == std::min((P - s - 1) * 2 + (v - 1) * P + 1, m * v));
    CHECK(r.peak_deferred_weights[s] == 0);
    CHECK(r.peak_held[s] == r.peak_in_flight[s]);
    const auto& per_chunk = r.peak_in_flight_per_chunk[s];
    REQUIRE(per_chunk.size() == static_cast<size_t>(v));
    int sum = 0;
    for (int c = 0; c < v; ++c) {
      CHECK(per_chunk[c] >= 1);
      CHECK(per_chunk[c] <= std::min(m, r.peak_in_flight[s]));
      sum += per_chunk[c];
    }
    CHECK(sum >= r.peak_in_flight[s]);
  }
  CHECK(r.peak_in_flight_per_chunk[P - 1][v - 1] == 1);  // the last virtual stage: F then B
}

TEST_CASE("interleaved per-chunk peaks for P=2, m=4, v=2", "[schedule][checker]") {
  const auto r = check_schedule(build_interleaved_schedule(2, 4, 2), 4);
  REQUIRE(r.ok);
  // Rank 0 forwards mb 0-1 on chunk 0, 0-1 on chunk 1, mb 2-3 on chunk 0 (warm-up 4), then F/B.
  CHECK(r.peak_in_flight_per_chunk[0] == std::vector<int>{4, 2});
  CHECK(r.peak_in_flight_per_chunk[1] == std::vector<int>{3, 1});
  CHECK(r.peak_in_flight == std::vector<int>{5, 3});
}

TEST_CASE("interleaved with one chunk per rank is exactly 1F1B", "[schedule]") {
  const int P = GENERATE(range(1, 9));
  const int m = GENERATE(1, 2, 3, 5, 8, 16);
  CHECK(build_interleaved_schedule(P, m, 1) == build_1f1b_schedule(P, m));
  CHECK(build_schedule(PipelineSchedule::k1F1B, P, m) == build_1f1b_schedule(P, m));
}

TEST_CASE("ZB-H1 for P=2, m=2 defers stage 1's weight gradients to the cool-down", "[schedule]") {
  const auto lists = build_zb_h1_schedule(2, 2);
  const std::vector<Instruction> stage0 = {{Op::Forward, 0},        {Op::SendActivation, 0},
                                           {Op::Forward, 1},        {Op::SendActivation, 1},
                                           {Op::RecvGrad, 0},       {Op::BackwardInput, 0},
                                           {Op::BackwardWeight, 0}, {Op::RecvGrad, 1},
                                           {Op::BackwardInput, 1},  {Op::BackwardWeight, 1},
                                           {Op::ReduceGrads, -1},   {Op::OptimizerStep, -1}};
  const std::vector<Instruction> stage1 = {{Op::RecvActivation, 0}, {Op::Forward, 0},
                                           {Op::BackwardInput, 0},  {Op::SendGrad, 0},
                                           {Op::RecvActivation, 1}, {Op::Forward, 1},
                                           {Op::BackwardInput, 1},  {Op::SendGrad, 1},
                                           {Op::BackwardWeight, 0}, {Op::BackwardWeight, 1},
                                           {Op::ReduceGrads, -1},   {Op::OptimizerStep, -1}};
  CHECK(lists[0] == stage0);
  CHECK(lists[1] == stage1);
}

TEST_CASE("build_schedule refuses what it cannot build, naming the constraint", "[schedule]") {
  using Catch::Contains;
  CHECK_THROWS_WITH(build_schedule(PipelineSchedule::kInterleaved, 4, 6, 2),
                    Contains("micro-batches (6) must be a multiple of the pipeline stages (4)"));
  CHECK_THROWS_WITH(build_schedule(PipelineSchedule::kZbH1, 4, 8, 2),
                    Contains("expected 1 model chunk per rank, got 2"));
  CHECK_THROWS_WITH(build_schedule(PipelineSchedule::k1F1B, 4, 8, 3),
                    Contains("virtual stages need the interleaved schedule"));
  CHECK_THROWS_WITH(build_schedule(PipelineSchedule::kInterleaved, 4, 8, 1),
                    Contains("at least 2 model chunks per rank"));
  CHECK_THROWS_WITH(build_schedule(PipelineSchedule::kAuto, 4, 8),
                    Contains("'auto' is resolved by the start-up planner"));
  CHECK_THROWS_AS(build_schedule(PipelineSchedule::kZbH1, 0, 8), omnibal::Error);
  CHECK_THROWS_AS(build_interleaved_schedule(2, 4, 0), omnibal::Error);
  CHECK_THROWS_AS(bubble_fraction(PipelineSchedule::kAuto, 4, 8), omnibal::Error);
  CHECK(chunks_per_rank(PipelineSchedule::kInterleaved, 3) == 3);
  CHECK(chunks_per_rank(PipelineSchedule::kZbH1, 3) == 1);
}

TEST_CASE("bubble fractions in closed form", "[schedule]") {
  CHECK(bubble_fraction(PipelineSchedule::k1F1B, 8, 8) == Approx(7.0 / 15.0));
  CHECK(bubble_fraction(PipelineSchedule::kInterleaved, 4, 8, 2) == Approx(3.0 / 19.0));
  CHECK(bubble_fraction(PipelineSchedule::kZbH1, 4, 8) == Approx(3.0 / 27.0));
  // m < P: the step is 2m + 2P - 1, not 3m + P - 1 (schedules.h).
  CHECK(bubble_fraction(PipelineSchedule::kZbH1, 8, 1) == Approx(14.0 / 17.0));
  CHECK(bubble_fraction(PipelineSchedule::kZbH1, 4, 4) == Approx(3.0 / 15.0));
  CHECK(bubble_fraction(PipelineSchedule::kZbH1, 1, 3) == 0.0);
}
