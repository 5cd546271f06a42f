#include "balance/repeat_time.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

using namespace omnibal::balance;
using Catch::Contains;

namespace {
std::vector<uint32_t> iota_n(uint32_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), 0u);
  return v;
}
}  // namespace

TEST_CASE("repeat_time: whole copies in file order, the issue's 48 records", "[balance][repeat]") {
  CHECK(repeat_records(48, 1.0, 1024, 0, "d") == iota_n(48));
  const auto twice = repeat_records(48, 2.0, 1024, 0, "d");
  REQUIRE(twice.size() == 96);
  CHECK(std::vector<uint32_t>(twice.begin(), twice.begin() + 48) == iota_n(48));
  CHECK(std::vector<uint32_t>(twice.begin() + 48, twice.end()) == iota_n(48));
  const auto half = repeat_records(48, 0.5, 1024, 0, "d");
  REQUIRE(half.size() == 24);
  CHECK(std::is_sorted(half.begin(), half.end()));
  CHECK(std::adjacent_find(half.begin(), half.end()) == half.end());  // distinct records
  CHECK(half != iota_n(24));  // a seeded draw, not the prefix InternVL 1.x kept
}

TEST_CASE("repeat_time: counts over a sweep, each record floor(r) or floor(r) + 1 times",
          "[balance][repeat]") {
  const int64_t n = GENERATE(0, 1, 7, 48, 1000);
  const double r = GENERATE(0.01, 0.25, 0.5, 1.0, 1.5, 2.0, 3.75);
  const auto rows = repeat_records(n, r, 7, 2, "d");
  const auto whole = static_cast<int64_t>(std::floor(r));
  const auto extra = static_cast<int64_t>(std::floor((r - whole) * static_cast<double>(n) + 1e-6));
  INFO("n " << n << " r " << r);
  REQUIRE(static_cast<int64_t>(rows.size()) == whole * n + extra);
  std::vector<int64_t> seen(static_cast<size_t>(n), 0);
  for (uint32_t i : rows) ++seen.at(i);
  int64_t more = 0;
  for (int64_t c : seen) {
    REQUIRE((c == whole || c == whole + 1));
    more += c == whole + 1;
  }
  CHECK(more == extra);
}

TEST_CASE("repeat_time: decimal fractions count as written", "[balance][repeat]") {
  CHECK(repeat_records(10, 0.3, 1, 0, "d").size() == 3);
  CHECK(repeat_records(10, 2.3, 1, 0, "d").size() == 23);  // 2.3 - 2 = 0.29999...
  CHECK(repeat_records(100, 0.29, 1, 0, "d").size() == 29);
  CHECK(repeat_records(3, 0.2, 1, 0, "d").empty());  // floor(0.6) = 0
}

TEST_CASE("repeat_time: the subset is seeded by the run seed and the dataset",
          "[balance][repeat]") {
  const auto a = repeat_records(1000, 1.5, 1024, 0, "d");
  CHECK(repeat_records(1000, 1.5, 1024, 0, "d") == a);
  CHECK(repeat_records(1000, 1.5, 1025, 0, "d") != a);
  CHECK(repeat_records(1000, 1.5, 1024, 1, "d") != a);
  // The fraction's draw does not depend on the whole part: r = 0.5 and 2.5 pick the same records.
  const auto half = repeat_records(1000, 0.5, 1024, 0, "d");
  const auto two_half = repeat_records(1000, 2.5, 1024, 0, "d");
  CHECK(std::vector<uint32_t>(two_half.begin() + 2000, two_half.end()) == half);
}

TEST_CASE("repeat_time: invalid values name the dataset", "[balance][repeat]") {
  const double bad = GENERATE(0.0, -1.0, std::numeric_limits<double>::infinity(),
                              std::numeric_limits<double>::quiet_NaN());
  CHECK_THROWS_WITH(repeat_records(4, bad, 1, 0, "meta.json: dataset \"ai2d\""),
                    Contains("meta.json: dataset \"ai2d\": repeat_time must be a number > 0"));
  CHECK_THROWS_AS(repeat_records(-1, 1.0, 1, 0, "d"), omnibal::Error);
  CHECK_THROWS_WITH(repeat_records(int64_t{1} << 31, 2.0, 1, 0, "big"),
                    Contains("exceeds 2^32 - 1"));
}
