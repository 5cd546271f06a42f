// The non-finite guard's decision without processes: the encoding every rank all-reduces, stop
// (the error names the step, the quantity, its value and the rank's stage / dp / tp), skip up to
// train.max_nonfinite_skips in a row, the run of skips reset by a finite step. The agreement over
// two ranks is in optimizer_mpi_test.cpp, the trainer end to end in tests/integration
// (train_nonfinite).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "train/nonfinite_guard.h"

using omnibal::OnNonFinite;
using omnibal::comm::GridShape;
using omnibal::comm::ProcessGrid;
using omnibal::train::decode_findings;
using omnibal::train::encode_observation;
using omnibal::train::Finiteness;
using omnibal::train::NonFiniteGuard;
using omnibal::train::StepFindings;
using omnibal::train::StepObservation;
using omnibal::train::StepVerdict;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// PP 2 x DP 2: world rank 3 is stage 1, dp rank 1.
ProcessGrid pp2_dp2() { return ProcessGrid(GridShape{2, 2, 1}, 4); }

/// The findings of a step where `rank` saw a NaN gradient part (norm NaN everywhere).
StepFindings nan_gradients(int rank) {
  StepFindings f;
  f.grad_rank = rank;
  f.grad = Finiteness::kNan;
  f.grad_norm = kNan;
  return f;
}

StepFindings finite_step() {
  StepFindings f;
  f.grad_norm = 1.5;
  return f;
}

}  // namespace

TEST_CASE("non-finite guard: each rank's observation encodes to a min-reducible pair", "[train]") {
  // 4 ranks: rank 3 (a last stage) has a NaN loss, ranks 1 and 2 an infinite gradient part.
  const double grad_sq[4] = {1.0, kInf, kInf, 2.0};
  std::array<int64_t, 2> reduced{INT64_MAX, INT64_MAX};
  for (int r = 0; r < 4; ++r) {
    StepObservation o;
    o.has_loss = r >= 2;
    o.loss = r == 3 ? kNan : (r == 0 ? kNan : 2.0);  // rank 0 is no last stage: not counted
    o.local_grad_sq = grad_sq[r];
    o.grad_norm = kInf;
    const auto code = encode_observation(o, r, 4);
    for (int k = 0; k < 2; ++k) reduced[k] = std::min(reduced[k], code[k]);
  }
  const StepFindings f = decode_findings(reduced, 4, kInf);
  CHECK(f.loss_rank == 3);
  CHECK(f.loss == Finiteness::kNan);
  CHECK(f.grad_rank == 1);  // the lowest rank that saw it
  CHECK(f.grad == Finiteness::kPosInf);
  CHECK(f.nonfinite());
  // Every rank finite: nothing found.
  StepObservation fine;
  fine.has_loss = true;
  fine.loss = 3.0;
  fine.local_grad_sq = 4.0;
  fine.grad_norm = 2.0;
  const StepFindings none = decode_findings(encode_observation(fine, 0, 4), 4, 2.0);
  CHECK(none.loss_rank == -1);
  CHECK(none.grad_rank == -1);
  CHECK_FALSE(none.nonfinite());
  CHECK(omnibal::train::finiteness(-kInf) == Finiteness::kNegInf);
}

TEST_CASE("non-finite guard: stop names the step, the quantity, its value and the rank",
          "[train]") {
  NonFiniteGuard guard(OnNonFinite::kStop, 3, 10, pp2_dp2());
  CHECK(guard.decide(0, finite_step()) == StepVerdict::kApply);
  CHECK_THROWS_WITH(guard.decide(2, nan_gradients(3)),
                    Catch::Contains(
                        "step 2 (progress line 3/10): the gradient norm is nan (non-finite "
                        "gradients first on stage 1, dp rank 1, tp rank 0, world rank 3)") &&
                        Catch::Contains("nothing of the step was applied") &&
                        Catch::Contains("train.on_nonfinite=skip") && Catch::Contains("train.lr"));
  StepFindings loss;  // a last stage's loss alone (the norm finite)
  loss.loss_rank = 2;
  loss.loss = Finiteness::kPosInf;
  loss.grad_norm = 0.5;
  CHECK_THROWS_WITH(guard.decide(5, loss),
                    Catch::Contains("step 5 (progress line 6/10): the loss is inf (on stage 1, "
                                    "dp rank 0, tp rank 0, world rank 2)") &&
                        !Catch::Contains("gradient norm is"));
  StepFindings both = nan_gradients(0);
  both.loss_rank = 2;
  both.loss = Finiteness::kNan;
  CHECK(guard.describe(both) ==
        "the loss is nan (on stage 1, dp rank 0, tp rank 0, world rank 2) and the gradient norm "
        "is nan (non-finite gradients first on stage 0, dp rank 0, tp rank 0, world rank 0)");
  CHECK(guard.skipped() == 0);
}

TEST_CASE("non-finite guard: skip up to max_nonfinite_skips in a row, reset by a finite step",
          "[train]") {
  NonFiniteGuard guard(OnNonFinite::kSkip, 2, 10, pp2_dp2());
  CHECK(guard.decide(0, nan_gradients(1)) == StepVerdict::kSkip);
  CHECK(guard.decide(1, nan_gradients(1)) == StepVerdict::kSkip);
  CHECK(guard.consecutive_skips() == 2);
  CHECK(guard.decide(2, finite_step()) == StepVerdict::kApply);  // resets the run
  CHECK(guard.consecutive_skips() == 0);
  CHECK(guard.decide(3, nan_gradients(0)) == StepVerdict::kSkip);
  CHECK(guard.decide(4, nan_gradients(0)) == StepVerdict::kSkip);
  CHECK(guard.skipped() == 4);
  // A third in a row is one too many: the error says so, and the step is not counted as skipped.
  CHECK_THROWS_WITH(guard.decide(5, nan_gradients(0)),
                    Catch::Contains("step 5 (progress line 6/10): the gradient norm is nan") &&
                        Catch::Contains("the 2 steps before it were skipped") &&
                        Catch::Contains("train.max_nonfinite_skips is 2: stopping") &&
                        Catch::Contains("raise train.max_nonfinite_skips"));
  CHECK(guard.skipped() == 4);
  // An infinite norm with no rank's part flagged (not reachable with fp64 sums, but decided
  // alike): still skipped, named without a rank.
  NonFiniteGuard one(OnNonFinite::kSkip, 1, 10, pp2_dp2());
  StepFindings norm_only;
  norm_only.grad_norm = kInf;
  CHECK(one.decide(0, norm_only) == StepVerdict::kSkip);
  CHECK(one.describe(norm_only) == "the gradient norm is inf");
  CHECK_THROWS_AS(NonFiniteGuard(OnNonFinite::kSkip, 0, 10, pp2_dp2()), omnibal::Error);
}
