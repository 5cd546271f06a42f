#include "schedule/schedule_checker.h"

#include <catch2/catch.hpp>

#include <algorithm>

#include "schedule/one_f_one_b.h"
#include "schedule/schedules.h"

using namespace omnibal::schedule;

TEST_CASE("1F1B passes the checker for every P <= 8 and m <= 16", "[schedule][checker]") {
  const int P = GENERATE(range(1, 9));
  const int m = GENERATE(range(1, 17));
  const auto lists = build_1f1b_schedule(P, m);
  const auto report = check_schedule(lists, m);
  INFO("P=" << P << " m=" << m << ": " << report.message);
  REQUIRE(report.ok);
  for (int s = 0; s < P; ++s) CHECK(report.peak_in_flight[s] == std::min(m, P - s));
  // Every stage runs m forwards and m backwards; inner stages send and receive in both directions.
  for (int s = 0; s < P; ++s) {
    const auto count = [&](Op op) {
      return std::count_if(lists[s].begin(), lists[s].end(),
                           [op](const Instruction& i) { return i.op == op; });
    };
    CHECK(count(Op::Forward) == m);
    CHECK(count(Op::Backward) == m);
    CHECK(count(Op::SendActivation) == (s + 1 < P ? m : 0));
    CHECK(count(Op::RecvGrad) == (s + 1 < P ? m : 0));
    CHECK(count(Op::RecvActivation) == (s > 0 ? m : 0));
    CHECK(count(Op::SendGrad) == (s > 0 ? m : 0));
  }
}

TEST_CASE("the checker finds swapped sends, deadlocks and lost messages", "[schedule][checker]") {
  SECTION("receive order differs from send order") {
    auto lists = build_1f1b_schedule(2, 3);
    std::swap(lists[1][0], lists[1][4]);  // stage 1 receives micro-batch 1 first
    const auto r = check_schedule(lists, 3);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.message, Catch::Contains("send and receive orders differ"));
  }
  SECTION("both stages receive first: deadlock") {
    StageSchedules lists(2);
    lists[0] = {{Op::RecvGrad, 0}, {Op::Forward, 0}, {Op::SendActivation, 0}, {Op::Backward, 0}};
    lists[1] = {{Op::RecvActivation, 0}, {Op::Forward, 0}, {Op::Backward, 0}, {Op::SendGrad, 0}};
    const auto r = check_schedule(lists, 1);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.message, Catch::Contains("deadlock"));
    CHECK_THAT(r.message, Catch::Contains("stage 0 instruction 0 (RecvGrad{0})"));
  }
  SECTION("a missing send: its receiver sees the wrong micro-batch or waits forever") {
    auto lists = build_1f1b_schedule(2, 2);
    lists[1].erase(lists[1].begin() + 3);  // drop stage 1's SendGrad{0}
    auto r = check_schedule(lists, 2);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.message, Catch::Contains("RecvGrad{0}") && Catch::Contains("orders differ"));
    lists = build_1f1b_schedule(2, 2);
    lists[1].erase(lists[1].begin() + 7);  // drop stage 1's SendGrad{1}
    r = check_schedule(lists, 2);
    CHECK_THAT(r.message, Catch::Contains("deadlock") && Catch::Contains("RecvGrad{1}"));
  }
  SECTION("a send nobody receives") {
    StageSchedules lists(2);
    lists[0] = {{Op::Forward, 0}, {Op::SendActivation, 0}};
    lists[1] = {};
    const auto r = check_schedule(lists, 1);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.message, Catch::Contains("stage 0 sent a message nobody received"));
  }
  SECTION("backward before forward and reduce before the last backward") {
    StageSchedules lists(1);
    lists[0] = {{Op::Backward, 0}, {Op::Forward, 0}};
    CHECK_THAT(check_schedule(lists, 1).message, Catch::Contains("backward before the forward"));
    lists[0] = {{Op::Forward, 0}, {Op::ReduceGrads, -1}, {Op::Backward, 0}};
    CHECK_THAT(check_schedule(lists, 1).message, Catch::Contains("reduced before every backward"));
  }
}

TEST_CASE("the checker enforces NCCL's per rank-pair call order across chunks",
          "[schedule][checker]") {
  // Interleaved P=2, m=2, v=2: rank 0 posts to rank 1 SendActivation{1} (virtual stage 0 -> 1)
  // before SendActivation{0 c1} (2 -> 3). Rank 1 receiving {0 c1} first is fine per edge (each
  // edge's channel is in order) but NCCL would hand {0 c1}'s receive the {1} message.
  auto lists = build_interleaved_schedule(2, 2, 2);
  REQUIRE(check_schedule(lists, 2).ok);
  auto& r1 = lists[1];
  REQUIRE(r1[3] == (Instruction{Op::RecvActivation, 1, 0}));
  REQUIRE(r1[6] == (Instruction{Op::RecvActivation, 0, 1}));
  std::rotate(r1.begin() + 3, r1.begin() + 6, r1.begin() + 10);  // block {0 c1} before block {1}
  const auto r = check_schedule(lists, 2);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("stage 1 instruction 3 (RecvActivation{0 c1})") &&
                            Catch::Contains("rank pair 0 -> 1 delivers SendActivation{1}") &&
                            Catch::Contains("NCCL matches point-to-point calls in order"));
}

TEST_CASE("a same-rank hand-over (P=1, v>1) is matched in order too", "[schedule][checker]") {
  auto lists = build_interleaved_schedule(1, 3, 2);
  auto r = check_schedule(lists, 3);
  REQUIRE(r.ok);
  CHECK(r.peak_in_flight == std::vector<int>{2});
  StageSchedules bad(1);
  bad[0] = {{Op::Forward, 0},
            {Op::SendActivation, 0},
            {Op::Forward, 1},
            {Op::SendActivation, 1},
            {Op::RecvActivation, 1, 1}};
  r = check_schedule(bad, 2, 2);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("rank pair 0 -> 0 delivers SendActivation{0}"));
}

TEST_CASE("the checker's split-backward rules", "[schedule][checker]") {
  using Catch::Contains;
  StageSchedules lists(1);
  SECTION("BackwardWeight before BackwardInput") {
    lists[0] = {{Op::Forward, 0}, {Op::BackwardWeight, 0}, {Op::BackwardInput, 0}};
    CHECK_THAT(check_schedule(lists, 1).message,
               Contains("instruction 1 (BackwardWeight{0}): BackwardWeight before BackwardInput"));
  }
  SECTION("ReduceGrads before the last BackwardWeight") {
    auto zb = build_zb_h1_schedule(2, 2);
    auto& s1 = zb[1];
    REQUIRE(s1[9] == (Instruction{Op::BackwardWeight, 1}));
    std::swap(s1[9], s1[10]);  // ReduceGrads, then W{1}
    const auto r = check_schedule(zb, 2);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.message, Contains("stage 1 instruction 9 (ReduceGrads)") &&
                              Contains("BackwardWeight{1} not run yet"));
  }
  SECTION("never both kinds, never twice") {
    lists[0] = {{Op::Forward, 0}, {Op::Backward, 0}, {Op::BackwardWeight, 0}};
    CHECK_THAT(check_schedule(lists, 1).message, Contains("after a fused Backward"));
    lists[0] = {{Op::Forward, 0}, {Op::BackwardInput, 0}, {Op::Backward, 0}};
    CHECK_THAT(check_schedule(lists, 1).message, Contains("backwarded twice"));
    lists[0] = {{Op::Forward, 0},
                {Op::BackwardInput, 0},
                {Op::BackwardWeight, 0},
                {Op::BackwardWeight, 0}};
    CHECK_THAT(check_schedule(lists, 1).message, Contains("BackwardWeight run twice"));
  }
  SECTION("a BackwardInput without its W is not a finished backward") {
    lists[0] = {{Op::Forward, 0}, {Op::BackwardInput, 0}};
    CHECK_THAT(check_schedule(lists, 1).message,
               Contains("did not run forward and backward of micro-batch 0 chunk 0"));
  }
  SECTION("SendGrad waits for the input gradient, chunks are range-checked") {
    StageSchedules two(2);
    two[0] = {{Op::Forward, 0}, {Op::SendActivation, 0}};
    two[1] = {{Op::RecvActivation, 0}, {Op::Forward, 0}, {Op::SendGrad, 0}};
    CHECK_THAT(check_schedule(two, 1).message, Contains("send before the backward"));
    lists[0] = {{Op::Forward, 0, 2}};
    CHECK_THAT(check_schedule(lists, 1, 2).message, Contains("chunk out of range"));
  }
  SECTION("peaks of a hand-written split list") {
    lists[0] = {{Op::Forward, 0},       {Op::Forward, 1},        {Op::BackwardInput, 0},
                {Op::BackwardInput, 1}, {Op::BackwardWeight, 0}, {Op::BackwardWeight, 1},
                {Op::ReduceGrads, -1},  {Op::OptimizerStep, -1}};
    const auto r = check_schedule(lists, 2);
    REQUIRE(r.ok);
    CHECK(r.peak_in_flight == std::vector<int>{2});
    CHECK(r.peak_deferred_weights == std::vector<int>{2});
    CHECK(r.peak_held == std::vector<int>{2});
  }
}
