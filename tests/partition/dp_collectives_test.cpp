// The simulator's DP collectives (training_simulator.h, issue 40): ZeRO-3's per-unit
// all-gathers and reduce-scatters and the overlapped gradient buckets of none / optimizer, on
// hand-computed timelines of two units: overlap off adds compute and communication, overlap on
// takes, per unit, the larger of the two; the first all-gather and the last reduction never hide.
#include <catch2/catch.hpp>

#include "partition/training_simulator.h"

using namespace omnibal::partition;
using omnibal::ShardMode;
using omnibal::UnitKind;

namespace {

/// Two LLM blocks; per 100 computed tokens each costs 1 s forward and 2 s backward; each holds
/// `parameter_bytes` of weights and keeps 100 bytes per token.
class TwoUnitModel : public CostModel {
 public:
  explicit TwoUnitModel(double parameter_bytes) : parameter_bytes_(parameter_bytes) {}
  UnitCostTable costs(const MicroBatchLoad& load) const override {
    UnitCostTable t;
    const double k = load.computed_tokens() / 100.0;
    for (int u = 0; u < 2; ++u)
      t.units.push_back({"llm_block." + std::to_string(u), UnitKind::kLlmBlock, 1.0 * k, 2.0 * k,
                         100.0 * load.computed_tokens(), parameter_bytes_, true,
                         10.0 * load.computed_tokens()});
    return t;
  }

 private:
  double parameter_bytes_;
};

/// One pipeline rank at `dp` DP ranks; the DP link moves 1e9 B/s without latency and the
/// optimizer takes no time.
SimulatorSetup zero3_setup(const CostModel& model, int dp, bool overlap) {
  SimulatorSetup s;
  s.model = &model;
  s.partition = Partition{{2}};
  s.recompute.assign(2, false);
  s.dp = dp;
  s.shard = ShardMode::kFull;
  s.overlap = overlap;
  s.device = device_spec("a100-80g");
  s.device.hbm_bandwidth = 1e30;
  s.dp_link = TpLink{1e9, 0.0};
  s.static_bytes = {0};
  return s;
}

StepLoads loads_of(std::vector<int> tokens) {
  StepLoads loads;
  for (int t : tokens) loads.push_back({MicroBatchLoad::packed({1}, {t})});
  return loads;
}

void check_adds_up(const StepReport& rep) {
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  CHECK(rep.breakdown.bubble_s == 0);
}

}  // namespace

TEST_CASE("ZeRO-3, two units: overlap off adds every collective, overlap on hides them",
          "[partition][simulator][zero3]") {
  // DP 2: each all-gather or reduce-scatter moves (2-1)/2 of the unit's bytes over 1 GB/s.
  const TwoUnitModel model(1e9);  // 0.5 s per collective
  // Off: AG 0.5, F0 1, AG 0.5, F1 1, AG 0.5, B1 2, RS 0.5, AG 0.5, B0 2, RS 0.5 = 6 + 3.
  const auto off = simulate_step(zero3_setup(model, 2, false), loads_of({100, 100}));
  CHECK(off.step_s == Approx(9.0));
  CHECK(off.breakdown.useful_s == Approx(6.0));
  CHECK(off.breakdown.comm_s == Approx(3.0));
  CHECK(off.stages[0].reduce_s == Approx(3.0));
  check_adds_up(off);
  // On: AG(F0) [0,0.5]; F0 [0.5,1.5] while AG(F1) [0.5,1]; F1 [1.5,2.5] while AG(B1)
  // [1.5,2]; B1 [2.5,4.5] while AG(B0) [2.5,3]; RS(B1) [4.5,5] behind B0 [4.5,6.5];
  // RS(B0) [6.5,7]: the first gather and the last reduce-scatter are all that show.
  const auto on = simulate_step(zero3_setup(model, 2, true), loads_of({100, 100}));
  CHECK(on.step_s == Approx(7.0));
  CHECK(on.breakdown.comm_s == Approx(1.0));
  CHECK(on.breakdown.dp_wait_s == Approx(0.0));
  check_adds_up(on);

  // Collectives longer than compute (1.5 s each): only the compute hides. On: AG [0,1.5];
  // F0 [1.5,2.5], AG(F1) [1.5,3]; F1 [3,4], AG(B1) [3,4.5]; B1 [4.5,6.5], AG(B0) [4.5,6];
  // RS(B1) [6.5,8]; B0 [6.5,8.5]; RS(B0) [8.5,10]. Off: 6 + 6 x 1.5.
  const TwoUnitModel heavy(3e9);
  CHECK(simulate_step(zero3_setup(heavy, 2, true), loads_of({100, 100})).step_s == Approx(10.0));
  CHECK(simulate_step(zero3_setup(heavy, 2, false), loads_of({100, 100})).step_s == Approx(15.0));
  // One DP rank: nothing to gather or scatter.
  CHECK(simulate_step(zero3_setup(model, 1, false), loads_of({100})).step_s == Approx(6.0));
}

TEST_CASE("ZeRO-3 couples the DP ranks at every unit: waits split into comm and dp_wait",
          "[partition][simulator][zero3]") {
  const TwoUnitModel model(1e9);
  // Rank 1 has twice the tokens (F 2, B 4 per unit). Off: every collective waits for rank 1,
  // so the step is rank 1's 12 s of compute + 6 x 0.5 s; rank 0 waits 6 s more for rank 1.
  const auto off = simulate_step(zero3_setup(model, 2, false), loads_of({100, 200}));
  CHECK(off.step_s == Approx(15.0));
  CHECK(off.dp_busy_s == std::vector<double>{6.0, 12.0});
  CHECK(off.breakdown.comm_s == Approx(3.0));
  CHECK(off.breakdown.dp_wait_s == Approx(6.0 / 2));
  check_adds_up(off);
  // On: AG [0,0.5]; F0 ends 1.5 / 2.5, AG(F1) [0.5,1]; F1 [1.5,2.5] / [2.5,4.5], AG(B1) issued
  // by rank 1 at 2.5: [2.5,3]; B1 [3,5] / [4.5,8.5], AG(B0) issued at 4.5: [4.5,5];
  // RS(B1) once rank 1 is done, [8.5,9]; B0 [5,7] / [8.5,12.5]; RS(B0) [12.5,13].
  const auto on = simulate_step(zero3_setup(model, 2, true), loads_of({100, 200}));
  CHECK(on.step_s == Approx(13.0));
  check_adds_up(on);
  CHECK(on.breakdown.dp_wait_s > 0);
  // PP > 1 is refused by name, as DeepSpeed does.
  auto two_stages = zero3_setup(model, 2, true);
  two_stages.partition = Partition{{1, 1}};
  two_stages.static_bytes = {0, 0};
  CHECK_THROWS_WITH(simulate_step(two_stages, loads_of({100, 100})),
                    Catch::Contains("shard full (ZeRO-3) with 2 pipeline ranks is refused"));
}

namespace {

/// TwoUnitModel twice over: four units of 1e9 B of weights.
class FourUnitModel : public CostModel {
 public:
  UnitCostTable costs(const MicroBatchLoad& load) const override {
    UnitCostTable t = TwoUnitModel(1e9).costs(load);
    t.units.push_back(t.units[0]);
    t.units.push_back(t.units[1]);
    return t;
  }
};

}  // namespace

TEST_CASE("none and optimizer: gradient buckets overlap the last backward, all-gathers the forward",
          "[partition][simulator]") {
  const FourUnitModel model;
  // Two pipeline ranks of two units at DP 2 on the 1 GB/s DP link, no optimizer time.
  auto setup = [&](ShardMode shard, bool overlap) {
    auto s = zero3_setup(model, 2, overlap);
    s.shard = shard;
    s.partition = Partition{{2, 2}};
    s.recompute.assign(4, false);
    s.static_bytes = {0, 0};
    return s;
  };
  const auto loads = StepLoads(2, {MicroBatchLoad::packed({1}, {100})});
  // Off: one blocking reduction per stage of 2 (2-1)/2 x 2e9 B / 1e9 B/s = 2 s (none and
  // optimizer alike: reduce-scatter + all-gather move what an all-reduce moves).
  const auto off = simulate_step(setup(ShardMode::kNone, false), loads);
  CHECK(off.stages[0].reduce_s == Approx(2.0));
  CHECK(simulate_step(setup(ShardMode::kOptimizer, false), loads).stages[0].reduce_s ==
        Approx(2.0));
  // None, on: stage 0's backward is unit 1 [0,2] then unit 0 [2,4] (relative); unit 1's
  // all-reduce (1 s) runs [2,3] behind unit 0's backward, unit 0's [4,5]: 1 s shows.
  const auto none = simulate_step(setup(ShardMode::kNone, true), loads);
  CHECK(none.stages[0].reduce_s == Approx(1.0));
  CHECK(none.stages[1].reduce_s == Approx(1.0));
  CHECK(none.step_s == Approx(off.step_s - 1.0));
  CHECK(none.breakdown.total() == Approx(none.step_s));
  // Optimizer, on: reduce-scatters of 0.5 s [2,2.5] and [4,4.5]: 0.5 s; then the all-gathers
  // ahead of the forward: AG0 [0,0.5], F0 [0.5,1.5], AG1 [0.5,1], F1 [1.5,2.5]: 0.5 s late.
  const auto opt = simulate_step(setup(ShardMode::kOptimizer, true), loads);
  CHECK(opt.stages[0].reduce_s == Approx(1.0));
  CHECK(opt.breakdown.total() == Approx(opt.step_s));
}
