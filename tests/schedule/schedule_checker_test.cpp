#include "schedule/schedule_checker.h"

#include <catch2/catch.hpp>

#include <algorithm>

#include "schedule/one_f_one_b.h"

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
