#include "schedule/one_f_one_b.h"

#include <catch2/catch.hpp>

#include "core/error.h"

using namespace omnibal::schedule;

TEST_CASE("1F1B for P=2, m=3 is the textbook order", "[schedule]") {
  const auto lists = build_1f1b_schedule(2, 3);
  REQUIRE(lists.size() == 2);
  const std::vector<Instruction> stage0 = {
      {Op::Forward, 0},      {Op::SendActivation, 0},  // warm-up
      {Op::Forward, 1},      {Op::SendActivation, 1}, {Op::RecvGrad, 0}, {Op::Backward, 0},  // 1F1B
      {Op::Forward, 2},      {Op::SendActivation, 2}, {Op::RecvGrad, 1}, {Op::Backward, 1},
      {Op::RecvGrad, 2},     {Op::Backward, 2},  // drain
      {Op::ReduceGrads, -1}, {Op::OptimizerStep, -1}};
  CHECK(lists[0] == stage0);
  const std::vector<Instruction> stage1 = {{Op::RecvActivation, 0}, {Op::Forward, 0},
                                           {Op::Backward, 0},       {Op::SendGrad, 0},
                                           {Op::RecvActivation, 1}, {Op::Forward, 1},
                                           {Op::Backward, 1},       {Op::SendGrad, 1},
                                           {Op::RecvActivation, 2}, {Op::Forward, 2},
                                           {Op::Backward, 2},       {Op::SendGrad, 2},
                                           {Op::ReduceGrads, -1},   {Op::OptimizerStep, -1}};
  CHECK(lists[1] == stage1);
  CHECK(to_string(stage0[2]) == "Forward{1}");
  CHECK(to_string(stage0.back()) == "OptimizerStep");
}

TEST_CASE("1F1B bubble fraction and in-flight counts", "[schedule]") {
  CHECK(bubble_fraction_1f1b(8, 8) == Approx(7.0 / 15.0));
  CHECK(bubble_fraction_1f1b(1, 5) == 0.0);
  CHECK(in_flight_micro_batches(0, 8, 4) == 4);
  CHECK(in_flight_micro_batches(5, 8, 4) == 3);
  CHECK(in_flight_micro_batches(7, 8, 16) == 1);
  CHECK_THROWS_AS(build_1f1b_schedule(0, 4), omnibal::Error);
  CHECK_THROWS_AS(build_1f1b_schedule(2, 0), omnibal::Error);
  CHECK_THROWS_AS(in_flight_micro_batches(3, 3, 4), omnibal::Error);
}
