#include "train/partition_trials.h"

#include <catch2/catch.hpp>

#include <cmath>

#include "core/error.h"

using namespace omnibal;

TEST_CASE("partition trials: the t test's critical value is Student's 87.5 % quantile",
          "[train][trials]") {
  CHECK(train::trial_t_critical(2) == Approx(1 + std::sqrt(2.0)).epsilon(1e-5));  // 1 dof: Cauchy
  // 2 dof: t = (2p - 1) / sqrt(2 p (1 - p)).
  CHECK(train::trial_t_critical(3) == Approx(0.75 / std::sqrt(2 * 0.875 * 0.125)).epsilon(1e-5));
  CHECK(train::trial_t_critical(7) == Approx(1.2733).epsilon(1e-4));    // tables: t(0.875, 6)
  CHECK(train::trial_t_critical(400) == Approx(1.1503).epsilon(2e-3));  // the normal's
  for (int n = 3; n < 30; ++n) CHECK(train::trial_t_critical(n + 1) < train::trial_t_critical(n));
  CHECK_THROWS_WITH(train::trial_t_critical(1), Catch::Contains(">= 2 rounds"));
}

TEST_CASE("partition trials: a candidate replaces the pick when it is faster round by round",
          "[train][trials]") {
  // The host drifts by 8 ms between rounds; candidate 1 is 3 % faster within every round.
  auto o = train::decide_trials({{0.100, 0.096, 0.104}, {0.097, 0.093, 0.101}});
  CHECK(o.chosen == 1);
  CHECK(o.rounds == 3);
  CHECK(o.t_critical == Approx(1.6036).epsilon(1e-4));
  CHECK(o.wins == std::vector<int>{0, 3});
  CHECK(o.median_s[0] == Approx(0.100));
  CHECK(o.spread_s[0] == Approx(0.008));
  CHECK(o.ratio[0] == Approx(1.0));
  const double g = std::cbrt(0.97 * (0.093 / 0.096) * (0.101 / 0.104));  // geometric mean
  CHECK(o.ratio[1] == Approx(g));
  CHECK(o.t_stat[1] < -10);
  // Faster on average (log ratios -5, -10 and +1 %) but too noisy: t = -1.55 > -1.60.
  o = train::decide_trials(
      {{0.100, 0.100, 0.100},
       {0.100 * std::exp(-0.05), 0.100 * std::exp(-0.10), 0.100 * std::exp(0.01)}});
  const double mean = (-0.05 - 0.10 + 0.01) / 3;
  const double sd = std::sqrt(
      (std::pow(-0.05 - mean, 2) + std::pow(-0.10 - mean, 2) + std::pow(0.01 - mean, 2)) / 2);
  CHECK(o.t_stat[1] == Approx(mean / (sd / std::sqrt(3.0))));
  CHECK(o.t_stat[1] > -o.t_critical);
  CHECK(o.chosen == 0);
  // A slower candidate never replaces it, however consistent.
  o = train::decide_trials({{0.1, 0.1, 0.1, 0.1}, {0.11, 0.12, 0.11, 0.12}});
  CHECK(o.t_stat[1] > 0);
  CHECK(o.chosen == 0);
  // Identical ratios every round: sd 0, faster -> t = -inf, passes.
  o = train::decide_trials({{0.2, 0.2, 0.2}, {0.18, 0.18, 0.18}});
  CHECK(std::isinf(o.t_stat[1]));
  CHECK(o.chosen == 1);
  // Two candidates pass: the lower mean log ratio wins, not the lower median time.
  o = train::decide_trials({{0.10, 0.40, 0.10, 0.40},
                            {0.09, 0.36, 0.09, 0.35},      // about 0.89x
                            {0.097, 0.33, 0.097, 0.33}});  // 0.97x and 0.825x: about 0.895x
  CHECK(o.median_s[2] < o.median_s[1]);
  CHECK(o.ratio[1] < o.ratio[2]);
  CHECK(o.t_stat[2] < -o.t_critical);
  CHECK(o.chosen == 1);
  // One round cannot decide: the pick stands whatever the times.
  o = train::decide_trials({{0.2}, {0.1}});
  CHECK(o.t_critical == 0);
  CHECK(o.chosen == 0);
  CHECK_THROWS_AS(train::decide_trials({{0.1}, {}}), Error);
  CHECK_THROWS_WITH(train::decide_trials({{0.1, 0.1, 0.1}, {0.1, 0.1}}),
                    Catch::Contains("candidate 1 has 2 rounds"));
}

TEST_CASE("partition trials: the summary names the ratio, t, the wins and the decision",
          "[train][trials]") {
  const std::vector<partition::Partition> splits{partition::Partition{{6, 4}},
                                                 partition::Partition{{7, 3}}};
  auto o = train::decide_trials({{0.100, 0.100, 0.100}, {0.097, 0.097, 0.097}});
  train::summarise_trials(splits, o);
  CHECK_THAT(o.summary, Catch::Contains("0.970x the pick (t -inf), faster in 3 of 3 rounds"));
  CHECK_THAT(o.summary, Catch::Contains("-> [7, 3] beats it (t -inf < -1.604)"));
  o = train::decide_trials({{0.100, 0.100, 0.100}, {0.095, 0.090, 0.101}});
  train::summarise_trials(splits, o);
  CHECK_THAT(o.summary, Catch::Contains("pick stands (a replacement needs t < -1.604)"));
}
