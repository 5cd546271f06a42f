// rank_step_costs / rank_step_schedules (training_simulator.h): the per-step lists the trainer
// runs under ZB-V (lib/train/step_programs.h) are what the simulator walks for that DP rank, the
// same on every rank given the same packs, and differ from the equal-cost lists when the
// micro-batches do.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "partition/training_simulator.h"
#include "schedule/schedule_checker.h"
#include "schedule/schedules.h"
#include "schedule/zb_v_schedule.h"

using namespace omnibal::partition;
using omnibal::PipelineSchedule;
using omnibal::UnitKind;
namespace schedule = omnibal::schedule;

namespace {

/// Eight LLM blocks, each per 100 computed tokens: 0.5 s forward, 1 s backward of which 0.4 s
/// W, 100 bytes kept and 10 sent per token.
class ZbModel : public CostModel {
 public:
  UnitCostTable costs(const MicroBatchLoad& load) const override {
    UnitCostTable t;
    const double k = load.computed_tokens() / 100.0;
    for (int u = 0; u < 8; ++u) {
      UnitCost c{"llm_block." + std::to_string(u),
                 UnitKind::kLlmBlock,
                 0.5 * k,
                 1.0 * k,
                 100.0 * load.computed_tokens(),
                 1e9,
                 true,
                 10.0 * load.computed_tokens()};
      c.backward_weight_s = 0.4 * k;
      t.units.push_back(c);
    }
    return t;
  }
};

/// ZB-V at P = 2 (4 chunks of 2 blocks), links fast enough to cost nothing.
SimulatorSetup zb_v_setup(const CostModel& model) {
  SimulatorSetup s;
  s.model = &model;
  s.schedule = PipelineSchedule::kZbV;
  s.partition = Partition{{2, 2, 2, 2}};
  s.recompute.assign(8, false);
  s.device = host_device(1e30);
  s.static_bytes = {0, 0};
  return s;
}

std::vector<MicroBatchLoad> loads_of(const std::vector<int>& tokens) {
  std::vector<MicroBatchLoad> out;
  for (int t : tokens) out.push_back(MicroBatchLoad::packed({1}, {t}));
  return out;
}

}  // namespace

TEST_CASE("ZB-V step lists: the same on every rank for the same packs, built for their costs",
          "[partition][simulator][zb-v]") {
  const ZbModel model;
  const auto tokens =
      GENERATE(std::vector<int>{100, 800, 50, 400}, std::vector<int>{900, 100, 100, 100, 700, 60});
  const auto loads = loads_of(tokens);
  const int m = static_cast<int>(loads.size());
  // Two ranks of one pipeline: each its own setup and model, the same packs.
  const ZbModel other_model;
  const auto mine = rank_step_schedules(zb_v_setup(model), loads);
  const auto theirs = rank_step_schedules(zb_v_setup(other_model), loads_of(tokens));
  CHECK(mine == theirs);
  CHECK(rank_step_costs(zb_v_setup(model), loads).forward_s ==
        rank_step_costs(zb_v_setup(other_model), loads).forward_s);
  CHECK(schedule::check_schedule(mine, m, 2, schedule::ChunkLayout::kV).ok);
  // Unequal micro-batches: not the lists of equal costs, and not slower on these costs.
  const auto equal = schedule::build_zb_v_schedule(2, m);
  CHECK(mine != equal);
  const auto costs = rank_step_costs(zb_v_setup(model), loads);
  auto end = [&costs](const schedule::StageSchedules& lists) {
    double e = 0;
    for (const auto& t : schedule::run_pipeline_timeline(lists, costs))
      e = std::max(e, t.ready_for_reduce_s);
    return e;
  };
  CHECK(end(mine) <= end(equal) + 1e-9);
}

TEST_CASE("rank step lists are what simulate_step walks", "[partition][simulator][zb-v]") {
  const ZbModel model;
  auto setup = zb_v_setup(model);
  setup.dp = 2;
  setup.device.hbm_bandwidth = 1e30;  // no optimizer time
  const StepLoads loads{loads_of({100, 800, 50, 400}), loads_of({300, 300, 300, 300})};
  double slowest = 0;
  for (const auto& rank : loads)
    for (const auto& t : schedule::run_pipeline_timeline(rank_step_schedules(setup, rank),
                                                         rank_step_costs(setup, rank)))
      slowest = std::max(slowest, t.ready_for_reduce_s);
  // Each stage's all-reduce over the host link (1e30 B/s) takes nothing: the step ends when the
  // slowest rank's pipeline is ready.
  CHECK(simulate_step(setup, loads).step_s == Approx(slowest).epsilon(1e-12));
}

TEST_CASE("rank step lists of the other schedules are their fixed lists",
          "[partition][simulator]") {
  const ZbModel model;
  auto setup = zb_v_setup(model);
  setup.schedule = PipelineSchedule::kZbH1;
  setup.partition = Partition{{4, 4}};
  const auto loads = loads_of({100, 800, 50, 400});
  CHECK(rank_step_schedules(setup, loads) ==
        schedule::build_schedule(PipelineSchedule::kZbH1, 2, 4, 1));
  setup.shard = omnibal::ShardMode::kFull;
  CHECK_THROWS(rank_step_costs(setup, loads));
  setup.shard = omnibal::ShardMode::kOptimizer;
  CHECK_THROWS(rank_step_costs(setup, {}));
}
