#include "balance/balance_metrics.h"

#include <catch2/catch.hpp>

using namespace omnibal::balance;
using Approx = Catch::Detail::Approx;

namespace {

// Five hand-made packs (tiles per member, tokens per member):
//   A (1,100) (2,60)   B (5,50)   C (1,80) (1,80)   D (1,30) (1,10) (1,20)   E (4,70)
struct Fixture {
  SampleTable table;
  PackList packs;
  explicit Fixture(PackLayout layout) : packs(layout) {
    table.add_dataset({"d", "p", 9, 0, 1.0});
    const std::vector<std::vector<Load>> members = {{Load{{1, 100}}, Load{{2, 60}}},
                                                    {Load{{5, 50}}},
                                                    {Load{{1, 80}}, Load{{1, 80}}},
                                                    {Load{{1, 30}}, Load{{1, 10}}, Load{{1, 20}}},
                                                    {Load{{4, 70}}}};
    uint32_t next = 0;
    for (const auto& pack : members) {
      std::vector<uint32_t> ids;
      for (const auto& l : pack) {
        table.add(0, next, l, l.tiles());
        ids.push_back(next++);
      }
      packs.push(ids.data(), ids.size(), table);
    }
  }
};

}  // namespace

TEST_CASE("dist_ratio follows sum_j (max - T_j) / (max * N)", "[balance][metrics]") {
  const int64_t a[] = {10, 8, 6};
  CHECK(dist_ratio(a, 3) == Approx(6.0 / 30.0));
  const int64_t same[] = {7, 7, 7, 7};
  CHECK(dist_ratio(same, 4) == 0.0);
  const int64_t zeros[] = {0, 0};
  CHECK(dist_ratio(zeros, 2) == 0.0);  // max floored at 1
  const int64_t one[] = {0, 1};
  CHECK(dist_ratio(one, 2) == Approx(0.5));
  CHECK(dist_ratio(nullptr, 0) == 0.0);
}

TEST_CASE("metrics of padded micro-batches, hand computed", "[balance][metrics]") {
  Fixture f(PackLayout::kPadded);
  const StepPlan plan = place_in_order(f.packs.size(), 2, 1);  // steps {A,B} {C,D}, E carried
  const BalanceMetrics m = compute_metrics(f.packs, plan, {0, 0}, 3);
  // padded costs A 200, B 50, C 160, D 90, E 70; pads 40 + 30.
  CHECK(m.pad_ratio == Approx(70.0 / 570.0));
  CHECK(m.dist_ratio_llm == Approx((150.0 / 400.0 + 70.0 / 320.0) / 2));
  CHECK(m.dist_ratio_vit == Approx((2.0 / 10.0 + 1.0 / 6.0) / 2));
  CHECK(m.packs == 5);
  CHECK(m.samples == 9);
  CHECK(m.samples_per_pack == Approx(1.8));
  CHECK(m.max_tiles == 5);
  CHECK(m.max_tokens == 200);
  CHECK(m.tile_fill == Approx(3.4 / 5));  // no budget: largest pack
  CHECK(m.token_fill == Approx(100.0 / 200));
  CHECK(m.skipped == 3);
  CHECK(m.steps == 2);
  CHECK(m.carried_packs == 1);
  CHECK(m.carried_samples == 1);
  const BalanceMetrics b = compute_metrics(f.packs, plan, {10, 400}, 0);
  CHECK(b.tile_fill == Approx(0.34));
  CHECK(b.token_fill == Approx(0.25));
}

TEST_CASE("metrics of concatenated packs, hand computed", "[balance][metrics]") {
  Fixture f(PackLayout::kConcatenated);
  const BalanceMetrics m = compute_metrics(f.packs, place_in_order(5, 2, 1), {0, 0}, 0);
  CHECK(m.pad_ratio == 0.0);
  CHECK(m.dist_ratio_llm == Approx((110.0 / 320.0 + 100.0 / 320.0) / 2));
  CHECK(m.max_tokens == 160);
  // m = 2: rank loads are sums of two packs: {A+B, C+D} = {210, 220}.
  const BalanceMetrics m2 = compute_metrics(f.packs, place_in_order(5, 2, 2), {0, 0}, 0);
  CHECK(m2.steps == 1);
  CHECK(m2.dist_ratio_llm == Approx(10.0 / 440.0));
  CHECK(m2.dist_ratio_vit == Approx(3.0 / 16.0));  // tiles {3+5, 2+3}
}

TEST_CASE("metrics reject a plan of another pack list", "[balance][metrics]") {
  Fixture f(PackLayout::kConcatenated);
  CHECK_THROWS(compute_metrics(f.packs, place_in_order(4, 2, 1), {0, 0}, 0));
}

TEST_CASE("time_dist_ratio follows sum_j (max - t_j) / (max * N)", "[balance][metrics]") {
  const double a[] = {1.0, 0.8, 0.6};
  CHECK(time_dist_ratio(a, 3) == Approx(0.6 / 3.0));
  const double zeros[] = {0.0, 0.0};
  CHECK(time_dist_ratio(zeros, 2) == 0.0);
  CHECK(time_dist_ratio(nullptr, 0) == 0.0);
}

TEST_CASE("Cost Dist Ratios of concatenated packs, hand computed", "[balance][metrics]") {
  Fixture f(PackLayout::kConcatenated);
  // t = 1 s + 0.01 s/token: A 2.6, B 1.5, C 2.6, D 1.6, E 1.7 (tokens 160, 50, 160, 60, 70).
  PackTimeModel time;
  time.fixed_s = 1.0;
  time.per_token_s = 0.01;
  const BalanceMetrics none = compute_metrics(f.packs, place_in_order(5, 2, 1), {0, 0}, 0);
  CHECK_FALSE(none.has_time);
  // m = 1, steps {A, B} {C, D}: only the DP level; the micro-batch level is 0.
  const BalanceMetrics m1 = compute_metrics(f.packs, place_in_order(5, 2, 1), {0, 0}, 0, &time);
  CHECK(m1.has_time);
  CHECK(m1.cost_dist_ratio_dp == Approx((1.1 / 5.2 + 1.0 / 5.2) / 2));
  CHECK(m1.cost_dist_ratio_mb == 0.0);
  CHECK(m1.step_seconds == Approx(2.6));
  // dp 1, m 2: one step, rank 0 runs {A, B} (A + B = 4.1 s): Dist over its two packs.
  const BalanceMetrics m2 = compute_metrics(f.packs, place_in_order(5, 1, 2), {0, 0}, 0, &time);
  CHECK(m2.steps == 2);
  CHECK(m2.cost_dist_ratio_dp == 0.0);
  CHECK(m2.cost_dist_ratio_mb == Approx((1.1 / 5.2 + 1.0 / 5.2) / 2));
  CHECK(m2.step_seconds == Approx((4.1 + 4.2) / 2));
}

TEST_CASE("Cost Dist Ratios use the attention term of each layout", "[balance][metrics]") {
  // Only the squared-length term: A holds members of 100 and 60 tokens, B one of 50.
  PackTimeModel time;
  time.per_token_sq_s = 1e-4;
  Fixture cat(PackLayout::kConcatenated), pad(PackLayout::kPadded);
  CHECK(time.pack_seconds(cat.packs, 0) == Approx(1.36));  // (100^2 + 60^2) * 1e-4
  CHECK(time.pack_seconds(pad.packs, 0) == Approx(2.0));   // 2 rows of 100 tokens
  CHECK(time.pack_seconds(cat.packs, 1) == Approx(0.25));
  // Steps {A, B} {C, D}: C = 2 * 80^2 -> 1.28 s, D = 30^2 + 10^2 + 20^2 -> 0.14 s.
  const BalanceMetrics m = compute_metrics(cat.packs, place_in_order(5, 2, 1), {0, 0}, 0, &time);
  CHECK(m.cost_dist_ratio_dp == Approx(((1.36 - 0.25) / 2.72 + (1.28 - 0.14) / 2.56) / 2));
}

TEST_CASE("step_time of one step, hand computed", "[balance][metrics]") {
  // dp 2 x m 2: rank 0 runs 1 s and 3 s, rank 1 runs 2 s and 1 s.
  const double pack_s[] = {1.0, 3.0, 2.0, 1.0};
  const StepTime t = step_time(pack_s, 2, 2);
  REQUIRE(t.rank_s.size() == 2);
  CHECK(t.rank_s[0] == 4.0);
  CHECK(t.rank_s[1] == 3.0);
  CHECK(t.dist_dp == Approx(1.0 / 8.0));  // (4 - 3) / (4 * 2)
  // rank 0: (3 - 1) / (3 * 2) = 1/3; rank 1: (2 - 1) / (2 * 2) = 1/4; mean 7/24.
  CHECK(t.dist_mb == Approx(7.0 / 24.0));
  // m 1: no micro-batch level.
  const StepTime one = step_time(pack_s, 4, 1);
  CHECK(one.rank_s == std::vector<double>{1.0, 3.0, 2.0, 1.0});
  CHECK(one.dist_dp == Approx(5.0 / 12.0));  // (4 * 3 - 7) / (3 * 4)
  CHECK(one.dist_mb == 0.0);
  CHECK_THROWS_WITH(step_time(pack_s, 0, 2), Catch::Contains("dp and m must be >= 1"));
}
