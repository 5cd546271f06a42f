#include <catch2/catch.hpp>

#include <cmath>

#include "train/lr_schedule.h"

using omnibal::train::learning_rate;

TEST_CASE("LR: linear warm-up, then cosine to lr * min_lr_ratio", "[train]") {
  omnibal::TrainConfig t;
  t.lr = 1e-3;
  t.steps = 110;
  t.warmup_steps = 10;
  t.min_lr_ratio = 0.1;
  CHECK(learning_rate(t, 0) == Approx(1e-4));
  CHECK(learning_rate(t, 9) == Approx(1e-3));
  CHECK(learning_rate(t, 10) == Approx(1e-3));
  // Half-way through the decay: the mean of lr and the floor.
  CHECK(learning_rate(t, 60) == Approx(0.55e-3));
  CHECK(learning_rate(t, 110) == Approx(1e-4));
  CHECK(learning_rate(t, 500) == Approx(1e-4));
  for (int s = 11; s < 110; ++s) CHECK(learning_rate(t, s) < learning_rate(t, s - 1));
  t.warmup_steps = 0;
  CHECK(learning_rate(t, 0) == Approx(1e-3));
}
