// StepMetrics: the named fields survive pack() -> unpack() exactly, the layout is the documented
// one, summing packed tensors (what the world all-reduce does) sums the fields, and
// metrics_record() computes the derived keys by hand-checked numbers.
#include <catch2/catch.hpp>

#include "train/step_metrics.h"

using omnibal::train::metrics_record;
using omnibal::train::StepMetrics;
using omnibal::train::StepScalars;

namespace {

// Every field a distinct value, so a swapped or shifted field cannot round-trip.
StepMetrics filled(int stages, int dp, double base) {
  StepMetrics m(stages, dp);
  double v = base;
  m.loss_term_sum = v += 1;
  m.samples = v += 1;
  m.tokens = v += 1;
  for (auto& s : m.stages) {
    s.forward_s = v += 0.5;
    s.backward_s = v += 0.5;
    s.idle_s = v += 0.5;
    s.reduce_s = v += 0.5;
  }
  for (auto& d : m.dp_ranks) {
    d.tiles = v += 1;
    d.tokens = v += 1;
    d.busy_s = v += 0.5;
  }
  m.micro_batch_mean_loss_sum = v += 1;
  m.micro_batches = v += 1;
  return m;
}

void check_equal(const StepMetrics& a, const StepMetrics& b) {
  CHECK(a.loss_term_sum == b.loss_term_sum);
  CHECK(a.samples == b.samples);
  CHECK(a.tokens == b.tokens);
  REQUIRE(a.stages.size() == b.stages.size());
  for (size_t s = 0; s < a.stages.size(); ++s) {
    CHECK(a.stages[s].forward_s == b.stages[s].forward_s);
    CHECK(a.stages[s].backward_s == b.stages[s].backward_s);
    CHECK(a.stages[s].idle_s == b.stages[s].idle_s);
    CHECK(a.stages[s].reduce_s == b.stages[s].reduce_s);
  }
  REQUIRE(a.dp_ranks.size() == b.dp_ranks.size());
  for (size_t d = 0; d < a.dp_ranks.size(); ++d) {
    CHECK(a.dp_ranks[d].tiles == b.dp_ranks[d].tiles);
    CHECK(a.dp_ranks[d].tokens == b.dp_ranks[d].tokens);
    CHECK(a.dp_ranks[d].busy_s == b.dp_ranks[d].busy_s);
  }
  CHECK(a.micro_batch_mean_loss_sum == b.micro_batch_mean_loss_sum);
  CHECK(a.micro_batches == b.micro_batches);
}

}  // namespace

TEST_CASE("step metrics: pack and unpack round-trip every field", "[train]") {
  const int stages = GENERATE(1, 2, 3);
  const int dp = GENERATE(1, 2, 4);
  const StepMetrics m = filled(stages, dp, 0.25);
  const torch::Tensor v = m.pack();
  CHECK(v.scalar_type() == torch::kFloat64);
  CHECK(v.size(0) == 3 + 4 * stages + 3 * dp + 2);
  CHECK(v.size(0) == m.packed_size());
  check_equal(StepMetrics::unpack(v, stages, dp), m);
  // The documented layout: stage s at 3 + 4 s, DP rank d at 3 + 4 S + 3 d, the last two last.
  CHECK(v[3 + 4 * (stages - 1) + 2].item<double>() == m.stages.back().idle_s);
  CHECK(v[3 + 4 * stages + 3 * (dp - 1) + 1].item<double>() == m.dp_ranks.back().tokens);
  CHECK(v[3 + 4 * stages + 3 * (dp - 1) + 2].item<double>() == m.dp_ranks.back().busy_s);
  CHECK(v[-1].item<double>() == m.micro_batches);
}

TEST_CASE("step metrics: the sum of packed tensors is the field-wise sum", "[train]") {
  // Two ranks' contributions, each filling only its own fields, as the trainer does.
  StepMetrics last(2, 2), first(2, 2);
  last.loss_term_sum = 6.5;
  last.micro_batch_mean_loss_sum = 1.25;
  last.micro_batches = 2;
  last.stages[1] = {0.5, 1.0, 0.25, 0.125};
  first.samples = 9;
  first.tokens = 700;
  first.stages[0] = {0.75, 1.5, 0.0, 0.0625};
  first.dp_ranks[1] = {12, 700, 2.25};  // stage 0 of DP rank 1: tiles, tokens, its busy seconds
  last.dp_ranks[1].busy_s = 1.5;        // stage 1 of DP rank 1 adds its own
  const StepMetrics sum = StepMetrics::unpack(last.pack() + first.pack(), 2, 2);
  CHECK(sum.loss_term_sum == 6.5);
  CHECK(sum.samples == 9);
  CHECK(sum.tokens == 700);
  CHECK(sum.stages[0].forward_s == 0.75);
  CHECK(sum.stages[1].idle_s == 0.25);
  CHECK(sum.dp_ranks[0].tiles == 0);
  CHECK(sum.dp_ranks[1].tiles == 12);
  CHECK(sum.dp_ranks[1].busy_s == 3.75);  // forward + backward over the rank's two stages
  CHECK(sum.micro_batches == 2);
}

TEST_CASE("step metrics: unpack refuses another layout", "[train]") {
  const torch::Tensor v = StepMetrics(2, 1).pack();
  CHECK_THROWS_WITH(StepMetrics::unpack(v, 2, 2),
                    Catch::Contains(
                        "expected [19] float64 for 2 stages and 2 DP ranks, got float64 [16]"));
  CHECK_THROWS(StepMetrics::unpack(v.to(torch::kFloat32), 2, 1));
  CHECK_THROWS(StepMetrics(0, 1));
}

TEST_CASE("step metrics: the metrics.jsonl record by hand", "[train]") {
  StepMetrics m(2, 2);
  m.loss_term_sum = 30;
  m.samples = 8;
  m.tokens = 400;
  m.stages[0] = {1.0, 2.0, 0.5, 0.1};
  m.stages[1] = {1.5, 2.5, 1.5, 0.3};
  m.dp_ranks[0] = {5, 150, 2.5};
  m.dp_ranks[1] = {7, 250, 3.5};
  m.micro_batch_mean_loss_sum = 9;
  m.micro_batches = 4;
  StepScalars s;
  s.step = 3;
  s.lr = 1e-3;
  s.grad_norm = 0.5;
  s.label_tokens = 12;
  s.normaliser = 12;
  s.seconds = 4;
  s.epoch = 1;
  const auto j = metrics_record(m, s);
  CHECK(j["step"] == 3);
  CHECK(j["loss"].get<double>() == 2.5);  // 30 / 12
  CHECK(j["samples"] == 8);
  CHECK(j["tokens"] == 400);
  CHECK(j["tokens_per_s"].get<double>() == 100);
  CHECK(j["samples_per_s"].get<double>() == 2);
  CHECK(j["dp_wait_s"].get<double>() == 0.3);         // the slowest stage's gradient all-reduce
  CHECK(j["bubble_fraction"].get<double>() == 0.25);  // (0.5 + 1.5) / 2 stages / 4 s
  CHECK(j["micro_batch_mean_loss"].get<double>() == 2.25);
  CHECK(j["epoch"] == 1);
  CHECK(j["label_tokens"] == 12);
  CHECK(j["loss_normaliser"].get<double>() == 12);
  REQUIRE(j["stages"].size() == 2);
  CHECK(j["stages"][1]["idle_s"].get<double>() == 1.5);
  CHECK_FALSE(j["stages"][1].contains("reduce_s"));
  CHECK(j["dp_ranks"][1]["tiles"] == 7);
  CHECK(j["dp_ranks"][1]["busy_s"].get<double>() == 3.5);
  CHECK_FALSE(j.contains("predicted_rank_s"));  // no pack time model given: not recorded
  // With the step's predicted times (balance::step_time): by DP rank, and both Dist Ratios.
  const double pack_s[] = {1.0, 3.0, 2.0, 1.0};
  s.predicted = omnibal::balance::step_time(pack_s, 2, 2);
  const auto p = metrics_record(m, s);
  CHECK(p["predicted_rank_s"] == std::vector<double>{4.0, 3.0});
  CHECK(p["cost_dist_dp"].get<double>() == Approx(1.0 / 8.0));
  CHECK(p["cost_dist_mb"].get<double>() == Approx(7.0 / 24.0));
  s.predicted = {};
  // No label in the global batch: loss and the micro-batch mean are 0, not NaN.
  s.normaliser = 0;
  StepMetrics empty(1, 1);
  const auto e = metrics_record(empty, s);
  CHECK(e["loss"].get<double>() == 0);
  CHECK(e["micro_batch_mean_loss"].get<double>() == 0);
}
