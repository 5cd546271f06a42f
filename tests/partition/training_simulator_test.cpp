#include "partition/training_simulator.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "core/error.h"
#include "partition/analytic_cost_model.h"
#include "schedule/one_f_one_b.h"

using namespace omnibal::partition;
using omnibal::UnitKind;

namespace {
/// Four LLM blocks; each costs 0.5 s forward and 1 s backward per 100 computed tokens, keeps
/// 100 bytes per token (10 bytes of output per token), 1e9 parameter bytes.
class LinearModel : public CostModel {
 public:
  UnitCostTable costs(const MicroBatchLoad& load) const override {
    UnitCostTable t;
    const double k = load.computed_tokens() / 100.0;
    for (int u = 0; u < 4; ++u)
      t.units.push_back({"llm_block." + std::to_string(u), UnitKind::kLlmBlock, 0.5 * k, 1.0 * k,
                         100.0 * load.computed_tokens(), 1e9, true, 10.0 * load.computed_tokens()});
    return t;
  }
};

SimulatorSetup setup_for(const LinearModel& model, int dp) {
  SimulatorSetup s;
  s.model = &model;
  s.partition = Partition{{2, 2}};
  s.recompute.assign(4, false);
  s.dp = dp;
  s.device = device_spec("a100-80g");
  s.device.intra_node_bandwidth = 1e30;  // no transfer time unless a test sets one
  s.device.inter_node_bandwidth = 1e30;
  s.device.hbm_bandwidth = 1e30;  // no optimizer time
  s.static_bytes = {1000, 2000};
  return s;
}

StepLoads uniform_loads(int dp, int m, int tokens) {
  return StepLoads(dp, std::vector<MicroBatchLoad>(m, MicroBatchLoad::packed({1}, {tokens})));
}
}  // namespace

TEST_CASE("P=2, m=2 with uniform micro-batches: textbook 1F1B step", "[partition][simulator]") {
  const LinearModel model;
  const auto rep = simulate_step(setup_for(model, 1), uniform_loads(1, 2, 100));
  // Per stage f = 1 s, b = 2 s: (m + P - 1)(f + b) = 9 s.
  CHECK(rep.step_s == Approx(9));
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  CHECK(rep.breakdown.useful_s == Approx(6));  // each device computes 2 x 3 s
  CHECK(rep.breakdown.bubble_s / rep.step_s ==
        Approx(omnibal::schedule::bubble_fraction_1f1b(2, 2)));
  CHECK(rep.breakdown.dp_wait_s == Approx(0));
  // Stage 0 holds 2 micro-batches of 2 units x 100 tokens x 100 bytes; stage 1 holds one.
  CHECK(rep.stages[0].peak_memory_bytes == Approx(1000 + 2 * 2e4));
  CHECK(rep.stages[1].peak_memory_bytes == Approx(2000 + 2e4));
  CHECK(rep.samples == 2);
}

TEST_CASE("bubble fraction matches (P-1)/(m+P-1) for uniform micro-batches",
          "[partition][simulator]") {
  const int m = GENERATE(1, 3, 8, 16);
  const LinearModel model;
  auto s = setup_for(model, 1);
  s.partition = Partition{{1, 1, 1, 1}};
  s.static_bytes = {0, 0, 0, 0};
  const auto rep = simulate_step(s, uniform_loads(1, m, 200));
  CHECK(rep.breakdown.bubble_s / rep.step_s ==
        Approx(omnibal::schedule::bubble_fraction_1f1b(4, m)));
}

TEST_CASE("recompute adds forward time to backward; DP waits for the slowest rank",
          "[partition][simulator]") {
  const LinearModel model;
  auto s = setup_for(model, 1);
  s.recompute = {true, false, true, true};
  auto rep = simulate_step(s, uniform_loads(1, 2, 100));
  // Stage 0 backward 2 + 0.5, stage 1 backward 2 + 1: per stage f + b = 3.5 and 4.
  // Stage 0: F0 [0,1] F1 [1,2]; stage 1: F0 [1,2] B0 [2,5] F1 [5,6] B1 [6,9];
  // stage 0: B0 [5,7.5] B1 [9,11.5].
  CHECK(rep.step_s == Approx(11.5));
  CHECK(rep.breakdown.recompute_s == Approx((2 * 0.5 + 2 * 1.0) / 2));
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  // Stage 0 keeps unit 0's input only (unit 0 is the chain start: 0 bytes) + unit 1's 1e4.
  CHECK(rep.stages[0].peak_memory_bytes == Approx(1000 + 2 * 1e4 + 1e4));

  auto d = setup_for(model, 2);
  StepLoads loads = uniform_loads(2, 2, 100);
  loads[1][1] = MicroBatchLoad::packed({1}, {200});  // rank 1's second micro-batch is 2x
  rep = simulate_step(d, loads);
  // Rank 1: stage 0 F0 [0,1] F1 [1,3]; stage 1 F0 [1,2] B0 [2,4] F1 [4,6] B1 [6,10]; stage 0
  // B0 [4,6] B1 [10,14]. Rank 0's stage 0 is ready at 9. The all-reduce is free here.
  CHECK(rep.step_s == Approx(14));
  CHECK(rep.breakdown.dp_wait_s > 0);
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  CHECK(rep.stages[0].dp_wait_s == Approx((14 - 9) / 2.0));
}

TEST_CASE("padding shows up as padding time and transfers and all-reduce as time",
          "[partition][simulator]") {
  const LinearModel model;
  auto s = setup_for(model, 2);
  s.device.intra_node_bandwidth = 1e9;  // dp = 2 < 8 GPUs: NVLink for both
  StepLoads loads(2, {MicroBatchLoad::padded_to_longest({1, 1}, {50, 150})});
  const auto rep = simulate_step(s, loads);
  // 300 computed tokens vs 200 real: one third of the compute is padding.
  CHECK(rep.breakdown.padding_s == Approx((rep.breakdown.padding_s + rep.breakdown.useful_s) / 3));
  // Stage 0: F 3 s, send 300 * 10 * 2 B... = 3000 B at 1 GB/s = 3 us; all-reduce of 2e9 B:
  // 2 * (1/2) * 2e9 / 1e9 = 2 s after the backward.
  CHECK(rep.stages[0].reduce_s == Approx(2.0));
  CHECK(rep.step_s == Approx(3 + 6 + 6 + 3 + 2 + 2 * 3000 / 1e9));
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  CHECK_THROWS_WITH(simulate_step(s, StepLoads(1, loads[0])), Catch::Contains("dp = 2"));
}

TEST_CASE("host overheads: per micro-batch on every Forward, per step instead of the optimizer",
          "[partition][simulator]") {
  const LinearModel model;
  auto s = setup_for(model, 1);
  s.device.hbm_bandwidth = 1e9;  // analytic optimizer: 2e9 B / 2 B * 30 B / 0.8e9 B/s = 37.5 s
  CHECK(simulate_step(s, uniform_loads(1, 2, 100)).step_s == Approx(9 + 37.5));
  s.overheads.per_micro_batch_s = {0.5, 0.25};
  s.overheads.per_step_s = {0.1, 0.2};
  const auto rep = simulate_step(s, uniform_loads(1, 2, 100));
  // Forward 1.5 s on stage 0, 1.25 s on stage 1. Stage 0: F0 [0,1.5] F1 [1.5,3]; stage 1:
  // F0 [1.5,2.75] B0 [2.75,4.75] F1 [4.75,6] B1 [6,8]; stage 0: B0 [4.75,6.75] B1 [8,10].
  // Per-step costs replace the 37.5 s: stage 0 done at 10.1, stage 1 at 8.2.
  CHECK(rep.step_s == Approx(10.1));
  CHECK(rep.stages[0].forward_s == Approx(3.0));
  CHECK(rep.stages[1].forward_s == Approx(2.5));
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  CHECK(rep.breakdown.comm_s == Approx((0.1 + 0.2) / 2));

  s.overheads.per_step_s = {0.1};
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(1, 2, 100)), Catch::Contains("expected 2"));
  s.overheads.per_step_s = {0.1, -0.2};
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(1, 2, 100)), Catch::Contains(">= 0"));
}

TEST_CASE("host overheads: a fixed part plus parts per tile, token and sample of each micro-batch",
          "[partition][simulator]") {
  const LinearModel model;
  auto s = setup_for(model, 1);
  s.overheads.per_micro_batch_s = {0.5, 0.25};
  s.overheads.per_tile_s = {0.1, 0.0};
  s.overheads.per_token_s = {0.001, 0.002};
  s.overheads.per_sample_s = {0.0, 0.05};
  // 2 samples, 5 tiles, 100 real tokens: stage 0 0.5 + 0.5 + 0.1 = 1.1 s, stage 1
  // 0.25 + 0.2 + 0.1 = 0.55 s.
  const auto two = MicroBatchLoad::packed({2, 3}, {40, 60});
  CHECK(s.overheads.micro_batch_s(0, two) == Approx(1.1));
  CHECK(s.overheads.micro_batch_s(1, two) == Approx(0.55));
  StageOverheads none;
  CHECK(none.micro_batch_s(1, two) == 0.0);

  // One sample, one tile, 100 tokens: F 1 + 0.7 = 1.7 s on stage 0, 1 + 0.5 = 1.5 s on stage 1;
  // B 2 s. Stage 0: F0 [0,1.7] F1 [1.7,3.4]; stage 1: F0 [1.7,3.2] B0 [3.2,5.2] F1 [5.2,6.7]
  // B1 [6.7,8.7]; stage 0: B0 [5.2,7.2] B1 [8.7,10.7].
  const auto rep = simulate_step(s, uniform_loads(1, 2, 100));
  CHECK(rep.step_s == Approx(10.7));
  CHECK(rep.stages[0].forward_s == Approx(3.4));
  CHECK(rep.stages[1].forward_s == Approx(3.0));
  CHECK(rep.stages[0].backward_s == Approx(4.0));
  CHECK(rep.breakdown.total() == Approx(rep.step_s));

  // Twice the tokens per micro-batch: the unit table doubles (F 2, B 4) and the token part
  // adds 0.1 s on stage 0 and 0.2 s on stage 1; the fixed parts stay.
  const auto big = simulate_step(s, uniform_loads(1, 2, 200));
  CHECK(big.stages[0].forward_s == Approx(2 * (2 + 0.5 + 0.1 + 0.2)));
  CHECK(big.stages[1].forward_s == Approx(2 * (2 + 0.25 + 0.4 + 0.05)));

  s.overheads.per_tile_s = {0.1};
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(1, 2, 100)), Catch::Contains("expected 2"));
  s.overheads.per_tile_s = {0.1, 0.0};
  s.overheads.per_token_s = {0.001, -0.002};
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(1, 2, 100)), Catch::Contains(">= 0"));
}

TEST_CASE(
    "host overheads: a fraction of the table's compute scales forward, backward and "
    "recomputation",
    "[partition][simulator]") {
  const LinearModel model;
  auto s = setup_for(model, 1);
  s.recompute = {true, false, false, false};
  s.overheads.compute_fraction = {0.5, 0.0};
  const auto rep = simulate_step(s, uniform_loads(1, 2, 100));
  // Stage 0: F 1 x 1.5 = 1.5 s, B (2 + 0.5 recompute) x 1.5 = 3.75 s; stage 1 F 1, B 2.
  // Stage 0: F0 [0,1.5] F1 [1.5,3]; stage 1: F0 [1.5,2.5] B0 [2.5,4.5] F1 [4.5,5.5] B1 [5.5,7.5];
  // stage 0: B0 [4.5,8.25] B1 [8.25,12].
  CHECK(rep.step_s == Approx(12.0));
  CHECK(rep.stages[0].forward_s == Approx(3.0));
  CHECK(rep.stages[0].backward_s == Approx(7.5));
  CHECK(rep.breakdown.recompute_s == Approx(2 * 0.75 / 2));  // device average
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  // A negative fraction: the table is slower than the run. Stage 1 at 0.5x: F 0.5, B 1.
  s.overheads.compute_fraction = {0.0, -0.5};
  s.recompute.assign(4, false);
  // Stage 0: F0 [0,1] F1 [1,2]; stage 1: F0 [1,1.5] B0 [1.5,2.5] F1 [2.5,3] B1 [3,4];
  // stage 0: B0 [2.5,4.5] B1 [4.5,6.5].
  CHECK(simulate_step(s, uniform_loads(1, 2, 100)).step_s == Approx(6.5));
  s.overheads.compute_fraction = {0.5, -1.0};
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(1, 2, 100)), Catch::Contains("> -1"));
  s.overheads.compute_fraction = {0.5};
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(1, 2, 100)), Catch::Contains("expected 2"));
}

namespace {
/// LinearModel with profiled checkpointed times: a checkpointed block's forward 0.4 s and its
/// backward 1.8 s (rerun 0.8 s) per 100 tokens, against the plain 0.5 s and 1 s.
class CheckpointedModel : public LinearModel {
 public:
  UnitCostTable costs(const MicroBatchLoad& load) const override {
    UnitCostTable t = LinearModel::costs(load);
    const double k = load.computed_tokens() / 100.0;
    for (auto& u : t.units) {
      u.checkpointed_forward_s = 0.4 * k;
      u.checkpointed_backward_s = 1.8 * k;
    }
    return t;
  }
};
}  // namespace

TEST_CASE("recomputation from profiled checkpointed times, and a fraction of its own",
          "[partition][simulator]") {
  const CheckpointedModel model;
  auto s = setup_for(model, 1);
  s.recompute = {true, true, false, false};
  auto rep = simulate_step(s, uniform_loads(1, 2, 100));
  // Stage 0: F 2 x 0.4 = 0.8 s, B 2 x 1 + 2 x 0.8 rerun = 3.6 s; stage 1: F 1, B 2.
  // Stage 0: F0 [0,0.8] F1 [0.8,1.6]; stage 1: F0 [0.8,1.8] B0 [1.8,3.8] F1 [3.8,4.8]
  // B1 [4.8,6.8]; stage 0: B0 [3.8,7.4] B1 [7.4,11].
  CHECK(rep.step_s == Approx(11.0));
  CHECK(rep.stages[0].forward_s == Approx(1.6));
  CHECK(rep.stages[0].backward_s == Approx(7.2));
  CHECK(rep.stages[0].checkpointed_s == Approx(2 * (0.8 + 1.6)));
  CHECK(rep.stages[1].checkpointed_s == 0);
  CHECK(rep.breakdown.recompute_s == Approx(2 * 1.6 / 2));  // device average
  CHECK(rep.breakdown.total() == Approx(rep.step_s));

  // compute fraction 0.5 and checkpoint fraction -0.25 on stage 0: its checkpointed compute
  // runs at 1.25 x, the plain backward at 1.5 x. F 0.8 x 1.25 = 1; B 2 x 1.5 + 1.6 x 1.25 = 5.
  // Stage 0: F0 [0,1] F1 [1,2]; stage 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]; stage 0:
  // B0 [4,9] B1 [9,14].
  s.overheads.compute_fraction = {0.5, 0.0};
  s.overheads.checkpoint_fraction = {-0.25, 0.0};
  rep = simulate_step(s, uniform_loads(1, 2, 100));
  CHECK(rep.step_s == Approx(14.0));
  CHECK(rep.stages[0].forward_s == Approx(2.0));
  CHECK(rep.stages[0].backward_s == Approx(10.0));
  CHECK(rep.stages[0].checkpointed_s == Approx(2 * (1.0 + 2.0)));
  CHECK(rep.breakdown.recompute_s == Approx(2 * 2.0 / 2));
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  // Without recomputation the checkpoint fraction changes nothing: F 0.5 x 1.5 per block.
  s.recompute.assign(4, false);
  CHECK(simulate_step(s, uniform_loads(1, 2, 100)).stages[0].forward_s == Approx(2 * 1.5));
  s.overheads.compute_fraction = {-0.5, 0.0};
  s.overheads.checkpoint_fraction = {-0.5, 0.0};
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(1, 2, 100)), Catch::Contains("> -1"));
  s.overheads.checkpoint_fraction = {0.1};
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(1, 2, 100)), Catch::Contains("expected 2"));
}

TEST_CASE("host overheads under interleaved 1F1B: the micro-batch's cost split over the chunks",
          "[partition][simulator]") {
  const LinearModel model;
  auto s = setup_for(model, 1);
  s.schedule = omnibal::PipelineSchedule::kInterleaved;
  s.virtual_stages = 2;
  s.partition = Partition{{1, 1, 1, 1}};
  const auto plain = simulate_step(s, uniform_loads(1, 2, 100));
  s.overheads.per_micro_batch_s = {0.4, 0.2};
  s.overheads.per_token_s = {0.002, 0.0};
  const auto rep = simulate_step(s, uniform_loads(1, 2, 100));
  // Per micro-batch 0.4 + 0.2 = 0.6 s on rank 0 and 0.2 s on rank 1, over 2 micro-batches.
  CHECK(rep.stages[0].forward_s == Approx(plain.stages[0].forward_s + 2 * 0.6));
  CHECK(rep.stages[1].forward_s == Approx(plain.stages[1].forward_s + 2 * 0.2));
}

TEST_CASE("host overheads: the loader shares the first stage's core from the step's start",
          "[partition][simulator]") {
  const LinearModel model;
  auto s = setup_for(model, 1);
  s.overheads.loader_per_micro_batch_s = {0.5, 0.0};
  // m = 2: 1 s of loader work on stage 0's core, which F0 (1 s of compute) shares at half speed:
  // F0 [0,2] F1 [2,3]; stage 1: F0 [2,3] B0 [3,5] F1 [5,6] B1 [6,8]; stage 0: B0 [5,7] B1 [8,10].
  const auto rep = simulate_step(s, uniform_loads(1, 2, 100));
  CHECK(rep.step_s == Approx(10.0));
  CHECK(rep.stages[0].forward_s == Approx(3.0));
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  // The same 0.5 s per micro-batch added to every forward is partly hidden in the bubble:
  // stage 0 F 1.5 s, F0 [0,1.5] F1 [1.5,3]; stage 1 F0 [1.5,2.5] B0 [2.5,4.5] F1 [4.5,5.5]
  // B1 [5.5,7.5]; stage 0 B0 [4.5,6.5] B1 [7.5,9.5].
  auto spread = setup_for(model, 1);
  spread.overheads.per_micro_batch_s = {0.5, 0.0};
  const auto sp = simulate_step(spread, uniform_loads(1, 2, 100));
  CHECK(sp.step_s == Approx(9.5));
  CHECK(sp.stages[0].forward_s == Approx(rep.stages[0].forward_s));
  // m = 3 (1.5 s of loader work): F0 [0,2], F1 [2,3.5] (0.5 s left); stage 1 F0 [2,3] B0 [3,5];
  // stage 0 B0 [5,7], then as plain 1F1B one second later. m = 6 (3 s): F0 [0,2], F1 [2,4],
  // and the last second runs while stage 0 waits for B0's gradient [4,5]: again one second, not
  // 3, because the loader finishes in the bubble.
  const auto [m, extra] = GENERATE(table<int, double>({{1, 0.5}, {2, 1.0}, {3, 1.0}, {6, 1.0}}));
  const auto plain = simulate_step(setup_for(model, 1), uniform_loads(1, m, 100));
  const auto with_loader = simulate_step(s, uniform_loads(1, m, 100));
  CHECK(with_loader.step_s == Approx(plain.step_s + extra));
  CHECK(with_loader.breakdown.total() == Approx(with_loader.step_s));
  s.overheads.loader_per_micro_batch_s = {-0.1, 0.0};
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(1, 2, 100)), Catch::Contains(">= 0"));
}

TEST_CASE("expected maximum of independent normals", "[partition][simulator]") {
  const double pi = 3.14159265358979323846;
  CHECK(expected_maximum({3, 3}, {0.5, 0.5}) == Approx(3 + 0.5 / std::sqrt(pi)).epsilon(1e-6));
  CHECK(expected_maximum({0, 0, 0}, {1, 1, 1}) == Approx(1.5 / std::sqrt(pi)).epsilon(1e-6));
  CHECK(expected_maximum({1, 2, 5}, {0, 0, 0}) == 5);
  CHECK(expected_maximum({7}, {2}) == Approx(7).epsilon(1e-6));
  // Two unequal normals (Clark 1961): mu1 Phi(a) + mu2 Phi(-a) + t phi(a), t^2 = s1^2 + s2^2,
  // a = (mu1 - mu2) / t.
  const double t = std::sqrt(5.0), a = -1.0 / t;
  const auto Phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  const double clark = 0 * Phi(a) + 1 * Phi(-a) + t * std::exp(-a * a / 2) / std::sqrt(2 * pi);
  CHECK(expected_maximum({0, 1}, {1, 2}) == Approx(clark).epsilon(1e-6));
  // A far-ahead normal: the maximum is its mean.
  CHECK(expected_maximum({0, 100}, {1, 1}) == Approx(100).epsilon(1e-9));
  CHECK_THROWS_WITH(expected_maximum({1, 2}, {1}), Catch::Contains("expected as many"));
  CHECK_THROWS_WITH(expected_maximum({1, 2}, {1, -1}), Catch::Contains("sd >= 0"));
  CHECK_THROWS(expected_maximum({}, {}));
}

TEST_CASE("DP jitter: the reduction waits for the expected slowest of the ranks",
          "[partition][simulator]") {
  const LinearModel model;
  auto s = setup_for(model, 2);
  const auto plain = simulate_step(s, uniform_loads(2, 2, 100));
  // Textbook 1F1B on both ranks: stage 0 ready at 9 s, stage 1 at 7 s; no reduce, no optimizer.
  CHECK(plain.step_s == Approx(9));
  CHECK(plain.dp_busy_s == std::vector<double>{12, 12});
  s.dp_jitter = 0.1;
  const auto rep = simulate_step(s, uniform_loads(2, 2, 100));
  const double pi = 3.14159265358979323846;
  // Two ranks ready at 9 s with sd 0.9 s: E[max] = 9 + 0.9 / sqrt(pi).
  CHECK(rep.step_s == Approx(9 + 0.9 / std::sqrt(pi)).epsilon(1e-6));
  CHECK(rep.stages[0].dp_wait_s == Approx(0.9 / std::sqrt(pi)).epsilon(1e-6));
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  // One DP rank waits for nobody.
  auto one = setup_for(model, 1);
  one.dp_jitter = 0.1;
  CHECK(simulate_step(one, uniform_loads(1, 2, 100)).step_s == Approx(9));
  s.dp_jitter = -0.1;
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(2, 2, 100)), Catch::Contains(">= 0"));
}

TEST_CASE("overheads equal to zero change nothing", "[partition][simulator]") {
  const int m = GENERATE(1, 2, 5);
  const int tokens = GENERATE(50, 300);
  const LinearModel model;
  auto s = setup_for(model, 1);
  const auto plain = simulate_step(s, uniform_loads(1, m, tokens));
  s.overheads.per_micro_batch_s = {0, 0};
  s.overheads.per_step_s = {0, 0};  // the analytic optimizer is 0 here too (hbm 1e30)
  const auto zero = simulate_step(s, uniform_loads(1, m, tokens));
  CHECK(zero.step_s == Approx(plain.step_s));
  // A per-micro-batch cost c on every stage lengthens a uniform 1F1B step by (m + P - 1) c.
  s.overheads.per_micro_batch_s = {0.3, 0.3};
  CHECK(simulate_step(s, uniform_loads(1, m, tokens)).step_s ==
        Approx(plain.step_s + (m + 1) * 0.3));
}

TEST_CASE("host device: one link bandwidth for pipeline and DP, no HBM figures",
          "[partition][simulator]") {
  const DeviceSpec h = host_device(4e9);
  CHECK(h.name == "host");
  CHECK(h.hbm_bandwidth == 0);
  const int dp = GENERATE(1, 2, 64);
  CHECK(pipeline_link_bandwidth(h, dp, 1) == 4e9);
  CHECK(data_parallel_bandwidth(h, dp, 1) == 4e9);
  CHECK_THROWS_WITH(host_device(0), Catch::Contains("> 0"));
}

namespace {
/// LinearModel at tp 2: each unit also all-reduces 100 bytes in 2 calls forward and the same
/// backward per 100 tokens.
class TpLinearModel : public LinearModel {
 public:
  UnitCostTable costs(const MicroBatchLoad& load) const override {
    UnitCostTable t = LinearModel::costs(load);
    t.tp = 2;
    const double k = load.computed_tokens() / 100.0;
    for (auto& u : t.units) u.tp_all_reduce = {100.0 * k, 100.0 * k, 2, 2};
    return t;
  }
};
}  // namespace

TEST_CASE("TP all-reduces: hand-computed step with tp_comm as its own component",
          "[partition][simulator][tp]") {
  const TpLinearModel model;
  auto s = setup_for(model, 1);
  s.tp = 2;
  s.tp_link = TpLink{1000.0, 0.01};  // per unit and direction: 2 * 0.01 + (1/2 * 2) * 100 / 1000
  const double unit_ar = 2 * 0.01 + 2.0 * (2 - 1) / 2 * 100 / 1000;  // 0.12 s
  const auto rep = simulate_step(s, uniform_loads(1, 2, 100));
  // Per stage f = 1 + 2 * 0.12, b = 2 + 2 * 0.12: (m + P - 1)(f + b) = 3 * 3.48.
  CHECK(rep.step_s == Approx(3 * (3 + 4 * unit_ar)));
  CHECK(rep.breakdown.tp_comm_s == Approx(2 * 4 * unit_ar));  // per device: 2 mb x 4 all-reduces
  CHECK(rep.breakdown.useful_s == Approx(6));
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  CHECK(rep.stages[0].tp_comm_s == Approx(2 * 4 * unit_ar));
  // Recomputing stage 1's blocks re-runs their forward all-reduces in the backward.
  s.recompute = {false, false, true, true};
  const auto rc = simulate_step(s, uniform_loads(1, 2, 100));
  CHECK(rc.stages[1].tp_comm_s == Approx(2 * 6 * unit_ar));
  CHECK(rc.stages[0].tp_comm_s == Approx(2 * 4 * unit_ar));
  CHECK(rc.breakdown.recompute_s == Approx(0.5 * 2 * 1.0));  // compute only: 2 mb x 1 s / 2 dev
  CHECK(rc.breakdown.total() == Approx(rc.step_s));
  // Without a link the device's TP link (NVLink at 80%, 10 us per call) is used.
  s.tp_link.reset();
  s.device = device_spec("a100-80g");
  const auto nv = simulate_step(s, uniform_loads(1, 2, 100));
  CHECK(nv.breakdown.tp_comm_s > 0);
  CHECK(nv.breakdown.total() == Approx(nv.step_s));
  // A table per rank of tp 2 under a tp 1 setup is refused.
  s.tp = 1;
  CHECK_THROWS_WITH(simulate_step(s, uniform_loads(1, 2, 100)),
                    Catch::Contains("per rank of tp 2, the setup has tp = 1"));
}

TEST_CASE("TP with padding, DP and analytic costs: components still add up",
          "[partition][simulator][tp]") {
  const AnalyticCostModel model(omnibal::load_model_preset("tiny"), device_spec("a100-80g"), 2);
  SimulatorSetup s;
  s.model = &model;
  s.partition = Partition{{5, 5}};
  s.recompute.assign(10, true);
  s.dp = 2;
  s.tp = 2;
  s.device = device_spec("a100-80g");
  s.static_bytes = {0, 0};
  StepLoads loads(2);
  for (auto& r : loads)
    for (int i = 0; i < 3; ++i)
      r.push_back(MicroBatchLoad::padded_to_longest({1, 2}, {30 + 10 * i, 90}));
  const auto rep = simulate_step(s, loads);
  CHECK(rep.breakdown.tp_comm_s > 0);
  CHECK(rep.breakdown.padding_s > 0);
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
}

TEST_CASE("trace: per-track compute equals the stage report, reduce and optimizer end the step",
          "[partition][simulator][trace]") {
  const LinearModel model;
  const auto kind = GENERATE(omnibal::PipelineSchedule::k1F1B, omnibal::PipelineSchedule::kZbH1);
  auto s = setup_for(model, 2);
  s.schedule = kind;
  s.device.hbm_bandwidth = 1e12;        // some optimizer time
  s.device.intra_node_bandwidth = 1e5;  // some transfer and all-reduce time
  s.device.inter_node_bandwidth = 1e5;
  StepLoads loads(2);
  for (int i = 0; i < 4; ++i) {
    loads[0].push_back(MicroBatchLoad::packed({1, 2}, {100 + 30 * i, 50}));
    loads[1].push_back(MicroBatchLoad::packed({3}, {90 + 10 * i}));
  }
  omnibal::schedule::StepTrace trace;
  const auto rep = simulate_step(s, loads, &trace);
  const auto plain = simulate_step(s, loads);
  CHECK(rep.step_s == plain.step_s);
  std::map<std::pair<int, int>, double> compute, optimizer_end;
  for (const auto& sp : trace.spans) {
    if (sp.name == "forward" || sp.name == "backward" || sp.name == "backward_input" ||
        sp.name == "backward_weight")
      compute[{sp.dp, sp.stage}] += (sp.end_us - sp.start_us) * 1e-6;
    if (sp.name == "optimizer") optimizer_end[{sp.dp, sp.stage}] = sp.end_us * 1e-6;
    CHECK(sp.end_us >= sp.start_us);
  }
  REQUIRE(compute.size() == 4);
  for (int st = 0; st < 2; ++st) {
    // The report averages the stage over DP ranks.
    const double avg = (compute[{0, st}] + compute[{1, st}]) / 2;
    CHECK(avg == Approx(rep.stages[st].forward_s + rep.stages[st].backward_s).epsilon(1e-12));
  }
  double last = 0;
  for (const auto& [k, t] : optimizer_end) last = std::max(last, t);
  CHECK(last == Approx(rep.step_s).epsilon(1e-12));
  REQUIRE(trace.loads.size() == 8);
  CHECK(trace.loads.at({0, 3}).tokens == 100 + 90 + 50);
  CHECK(trace.loads.at({0, 3}).tiles == 3);
  CHECK(trace.loads.at({1, 0}).samples == 1);
}
