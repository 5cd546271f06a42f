#include "core/rng.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

using omnibal::Rng;

TEST_CASE("splitmix64 matches the published reference sequence", "[core][rng]") {
  // Reference values of splitmix64 seeded with 1234567 (Vigna's test vector).
  uint64_t state = 1234567;
  CHECK(omnibal::splitmix64(state) == 6457827717110365317ULL);
  CHECK(omnibal::splitmix64(state) == 3203168211198807973ULL);
  CHECK(omnibal::splitmix64(state) == 9817491932198370423ULL);
}

TEST_CASE("Rng is deterministic for a seed and differs across seeds", "[core][rng]") {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next();
    CHECK(x == b.next());
  }
  Rng a2(42);
  int same = 0;
  for (int i = 0; i < 100; ++i) same += a2.next() == c.next();
  CHECK(same == 0);
}

TEST_CASE("below() is in range and roughly uniform", "[core][rng]") {
  Rng rng(7);
  std::vector<int> counts(10, 0);
  for (int i = 0; i < 100000; ++i) {
    const auto v = rng.below(10);
    REQUIRE(v < 10);
    counts[v]++;
  }
  for (int c : counts) CHECK(std::abs(c - 10000) < 500);  // ~5 sigma
}

TEST_CASE("shuffle is a permutation and every position moves", "[core][rng]") {
  Rng rng(3);
  std::vector<int> v(1000);
  std::iota(v.begin(), v.end(), 0);
  rng.shuffle(v);
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 1000; ++i) REQUIRE(sorted[i] == i);
  int fixed = 0;
  for (int i = 0; i < 1000; ++i) fixed += v[i] == i;
  CHECK(fixed < 10);  // expected ~1 fixed point for a random permutation
}

TEST_CASE("Rng state round-trips", "[core][rng]") {
  Rng a(99);
  a.next();
  Rng b(0);
  b.set_state(a.state());
  for (int i = 0; i < 10; ++i) CHECK(a.next() == b.next());
}
