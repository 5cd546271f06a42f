#include "train/partition_trials.h"

#include <catch2/catch.hpp>

#include "core/error.h"

using namespace omnibal;

TEST_CASE("partition trials: the simulator's pick stands unless beaten beyond the noise",
          "[train][trials]") {
  // Candidate 1 is 10 ms faster; spreads 4 ms and 6 ms: the noise is 6 ms, so it wins.
  auto o = train::decide_trials({{0.100, 0.098, 0.102}, {0.090, 0.087, 0.093}});
  CHECK(o.chosen == 1);
  CHECK(o.median_s[0] == Approx(0.100));
  CHECK(o.median_s[1] == Approx(0.090));
  CHECK(o.spread_s[0] == Approx(0.004));
  CHECK(o.spread_s[1] == Approx(0.006));
  // 3 ms faster but spreads up to 8 ms: within the noise, the pick stands.
  o = train::decide_trials({{0.100, 0.096, 0.104}, {0.097, 0.093, 0.101}, {0.099, 0.099, 0.099}});
  CHECK(o.chosen == 0);
  // Two candidates beat the pick beyond the noise: the lowest median wins (even-sized repeats:
  // median = mean of the middle two).
  o = train::decide_trials(
      {{0.2, 0.2, 0.2, 0.2}, {0.15, 0.16, 0.15, 0.16}, {0.12, 0.13, 0.12, 0.13}});
  CHECK(o.chosen == 2);
  CHECK(o.median_s[2] == Approx(0.125));
  CHECK_THROWS_AS(train::decide_trials({{0.1}, {}}), Error);
}
