#include "partition/stage_partition.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <limits>

#include "core/error.h"
#include "core/rng.h"

using namespace omnibal::partition;

namespace {
/// Smallest heaviest stage over every contiguous split (brute force over all cut sets).
double brute_force_min_max(const std::vector<double>& w, int P) {
  const int n = static_cast<int>(w.size());
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> cuts;
  std::function<void(int)> rec = [&](int start) {
    if (static_cast<int>(cuts.size()) == P - 1) {
      const auto sums = stage_sums(Partition::from_boundaries(cuts, n), w);
      best = std::min(best, *std::max_element(sums.begin(), sums.end()));
      return;
    }
    for (int c = start; c < n; ++c) {
      cuts.push_back(c);
      rec(c + 1);
      cuts.pop_back();
    }
  };
  rec(1);
  return best;
}
}  // namespace

TEST_CASE("partition bookkeeping", "[partition]") {
  const Partition p{{2, 3, 1}};
  CHECK(p.units() == 6);
  CHECK(p.begin(1) == 2);
  CHECK(p.end(1) == 5);
  CHECK(p.stage_of(4) == 1);
  CHECK(p.stage_of(5) == 2);
  CHECK(p.boundaries() == std::vector<int>{2, 5});
  CHECK(Partition::from_boundaries({2, 5}, 6) == p);
  CHECK(p.to_string() == "[2, 3, 1]");
  CHECK_THROWS_WITH(Partition::from_boundaries({2, 2}, 6), Catch::Contains("no stage is empty"));
  CHECK(uniform_partition(97, 8).sizes == std::vector<int>{13, 12, 12, 12, 12, 12, 12, 12});
  CHECK_THROWS_AS(uniform_partition(3, 4), omnibal::Error);
}

TEST_CASE("min-max partition equals brute force on random small cases", "[partition][anchor]") {
  omnibal::Rng rng(GENERATE(1, 2, 3, 4, 5, 6, 7, 8));
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 2 + static_cast<int>(rng.below(9));
    const int P = 1 + static_cast<int>(rng.below(std::min(n, 5)));
    std::vector<double> w(n);
    for (auto& x : w) x = 0.1 + rng.uniform() * (rng.below(4) == 0 ? 10.0 : 1.0);
    const Partition p = min_max_partition(w, P);
    REQUIRE(p.stages() == P);
    const auto sums = stage_sums(p, w);
    INFO("n=" << n << " P=" << P << " split " << p.to_string());
    CHECK(*std::max_element(sums.begin(), sums.end()) == Approx(brute_force_min_max(w, P)));
    // The greedy anchor is a valid split and never better than the optimum.
    const auto g = stage_sums(greedy_anchor_partition(w, P), w);
    CHECK(*std::max_element(g.begin(), g.end()) >= brute_force_min_max(w, P) - 1e-12);
  }
}

TEST_CASE("greedy anchor follows the running sum, closer side", "[partition][anchor]") {
  // S = 8, P = 2, target 4: running sums 1, 2, 5, ... -> boundary after unit 1 (sum 2, off by 2)
  // or after unit 2 (sum 5, off by 1): the closer is after unit 2.
  CHECK(greedy_anchor_partition({1, 1, 3, 3}, 2).sizes == std::vector<int>{3, 1});
  // Equal weights split evenly.
  CHECK(greedy_anchor_partition(std::vector<double>(12, 1.0), 4).sizes ==
        std::vector<int>{3, 3, 3, 3});
  // A huge first unit cannot leave later stages empty.
  CHECK(greedy_anchor_partition({100, 1, 1, 1}, 4).sizes == std::vector<int>{1, 1, 1, 1});
}
