// The model-balance side of the pipeline schedules: the split backward in cost tables,
// the simulator under 1F1B, interleaved 1F1B and ZB-H1, and BMP over P x v chunks.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "core/model_preset.h"
#include "partition/analytic_cost_model.h"
#include "partition/partition_search.h"
#include "partition/training_simulator.h"
#include "partition/unit_cost_table.h"
#include "schedule/schedules.h"

using namespace omnibal;
using namespace omnibal::partition;

namespace {

/// `units` identical LLM blocks per 100 tokens: forward 1 s, backward 2 s of which W 1 s (so one
/// unit per chunk gives T_F = T_B = T_W), 100 bytes kept and 50 bytes of W inputs per token.
class EqualUnits : public CostModel {
 public:
  explicit EqualUnits(int units) : units_(units) {}
  UnitCostTable costs(const MicroBatchLoad& load) const override {
    UnitCostTable t;
    const double k = load.computed_tokens() / 100.0;
    for (int u = 0; u < units_; ++u) {
      UnitCost c{"llm_block." + std::to_string(u),
                 UnitKind::kLlmBlock,
                 1.0 * k,
                 2.0 * k,
                 100.0 * load.computed_tokens(),
                 1e9,
                 true,
                 10.0 * load.computed_tokens()};
      c.backward_weight_s = 1.0 * k;
      c.weight_grad_bytes = 50.0 * load.computed_tokens();
      t.units.push_back(c);
    }
    return t;
  }

 private:
  int units_;
};

SimulatorSetup equal_setup(const CostModel& model, int units, PipelineSchedule kind, int chunks,
                           int ranks, int v) {
  SimulatorSetup s;
  s.model = &model;
  s.schedule = kind;
  s.virtual_stages = v;
  s.partition = uniform_partition(units, chunks);
  s.recompute.assign(units, false);
  s.device = device_spec("a100-80g");
  s.device.intra_node_bandwidth = s.device.inter_node_bandwidth = 1e30;  // no transfers
  s.device.hbm_bandwidth = 1e30;                                         // no optimizer time
  s.static_bytes.assign(ranks, 0.0);
  return s;
}

StepLoads equal_loads(int dp, int m) {
  return StepLoads(dp, std::vector<MicroBatchLoad>(m, MicroBatchLoad::packed({1}, {100})));
}

}  // namespace

TEST_CASE("simulator: each schedule on equal micro-batches has its textbook bubble",
          "[partition][simulator][schedule]") {
  const int P = 4, m = 8;
  struct Case {
    PipelineSchedule kind;
    int v;
  };
  const Case c =
      GENERATE(Case{PipelineSchedule::k1F1B, 1}, Case{PipelineSchedule::kZbH1, 1},
               Case{PipelineSchedule::kInterleaved, 2}, Case{PipelineSchedule::kInterleaved, 4});
  const int chunks = P * c.v;
  const EqualUnits model(chunks);
  const auto rep =
      simulate_step(equal_setup(model, chunks, c.kind, chunks, P, c.v), equal_loads(1, m));
  CAPTURE(choice_name(c.kind), c.v);
  CHECK(rep.breakdown.total() == Approx(rep.step_s));
  CHECK(rep.breakdown.bubble_s / rep.step_s ==
        Approx(schedule::bubble_fraction(c.kind, P, m, c.v)));
  CHECK(rep.stages.size() == static_cast<size_t>(P));
  // Every rank computes m x (F + B + W) = 3 s on each of its v one-unit chunks.
  CHECK(rep.breakdown.useful_s == Approx(m * 3.0 * c.v));
}

TEST_CASE("simulator: the breakdown adds up under every schedule with DP, recompute, transfers",
          "[partition][simulator][schedule]") {
  const int P = 2, m = 4, units = 8;
  const EqualUnits model(units);
  for (const auto& [kind, v] :
       {std::pair{PipelineSchedule::k1F1B, 1}, std::pair{PipelineSchedule::kZbH1, 1},
        std::pair{PipelineSchedule::kInterleaved, 2}}) {
    const int chunks = P * schedule::chunks_per_rank(kind, v);
    auto s = equal_setup(model, units, kind, chunks, P, v);
    s.dp = 2;
    s.recompute = {false, true, false, true, false, true, false, false};
    s.device.inter_node_bandwidth = s.device.intra_node_bandwidth = 1000;  // 1 s per mb transfer
    s.device.hbm_bandwidth = 1e12;
    StepLoads loads = equal_loads(2, m);
    loads[1][2] = MicroBatchLoad::packed({1}, {300});  // one heavy pack on DP rank 1
    const auto rep = simulate_step(s, loads);
    CAPTURE(choice_name(kind));
    CHECK(rep.breakdown.total() == Approx(rep.step_s));
    CHECK(rep.breakdown.recompute_s > 0);
    CHECK(rep.breakdown.dp_wait_s > 0);
  }
}

TEST_CASE("simulator: ZB-H1 beats 1F1B and interleaved needs m % P == 0",
          "[partition][simulator][schedule]") {
  const EqualUnits model(8);
  const double one =
      simulate_step(equal_setup(model, 8, PipelineSchedule::k1F1B, 4, 4, 1), equal_loads(1, 4))
          .step_s;
  const double zb =
      simulate_step(equal_setup(model, 8, PipelineSchedule::kZbH1, 4, 4, 1), equal_loads(1, 4))
          .step_s;
  CHECK(zb < one);
  CHECK_THROWS_WITH(simulate_step(equal_setup(model, 8, PipelineSchedule::kInterleaved, 8, 4, 2),
                                  equal_loads(1, 6)),
                    Catch::Contains("multiple of the pipeline stages"));
  CHECK_THROWS_WITH(simulate_step(equal_setup(model, 8, PipelineSchedule::kInterleaved, 7, 4, 2),
                                  equal_loads(1, 4)),
                    Catch::Contains("chunks per rank"));
}

TEST_CASE("cost table: the split backward round-trips and old tables get the estimates",
          "[partition][cost_table][schedule]") {
  UnitCostTable t;
  t.model = "tiny";
  t.source = "test";
  t.load = {2, 100, 1};
  t.units.push_back({"llm_block.0", UnitKind::kLlmBlock, 1.0, 2.0, 400, 10, true, 40});
  t.units.push_back({"llm_block.1", UnitKind::kLlmBlock, 1.0, 2.0, 400, 10, true, 40});
  t.units[0].backward_weight_s = 0.8;
  t.units[0].weight_grad_bytes = 300;
  const auto back = parse_unit_cost_table(unit_cost_table_json(t), "test");
  REQUIRE(back.units[0].backward_weight_s);
  CHECK(*back.units[0].backward_weight_s == 0.8);
  CHECK(*back.units[0].weight_grad_bytes == 300);
  CHECK(back.units[0].weight_backward_s() == 0.8);
  CHECK(back.units[0].deferred_weight_bytes() == 300);
  // Without the keys (a profiled or older table): half the backward, the activation bytes.
  CHECK_FALSE(back.units[1].backward_weight_s);
  CHECK(back.units[1].weight_backward_s() == Approx(kWeightShareEstimate * 2.0));
  CHECK(back.units[1].deferred_weight_bytes() == 400);
  CHECK(unit_cost_table_json(t).find("\"backward_weight_s\"") != std::string::npos);
  // A frozen unit has no W.
  t.units[1].trainable = false;
  CHECK(t.units[1].weight_backward_s() == 0);
  // W longer than the backward is refused.
  t.units[0].backward_weight_s = 3.0;
  CHECK_THROWS_WITH(parse_unit_cost_table(unit_cost_table_json(t), "test"),
                    Catch::Contains("backward_weight_s"));
}

TEST_CASE("analytic model: W is the weight-gradient GEMMs, inside the backward",
          "[partition][analytic][schedule]") {
  const AnalyticCostModel model(load_model_preset("internvl-1.5-6b-20b"), device_spec("a100-80g"));
  const auto load = MicroBatchLoad::packed({5, 5, 5, 5}, {1450, 1450, 1450, 1450});
  const auto table = model.costs(load);
  const auto& dev = model.device();
  for (int u = 0; u < model.num_units(); ++u) {
    const auto& c = table.units[u];
    REQUIRE(c.backward_weight_s);
    REQUIRE(c.weight_grad_bytes);
    CHECK(*c.backward_weight_s ==
          Approx(model.work(u, load).gemm_flops / (dev.peak_flops * AnalyticEfficiency{}.gemm)));
    CHECK(*c.backward_weight_s <= c.backward_s);
  }
  // An LLM block's W keeps its activation bytes (linear inputs + output gradients).
  const auto& llm = table.units[model.preset().vit.depth + 3];
  CHECK(llm.kind == UnitKind::kLlmBlock);
  CHECK(*llm.weight_grad_bytes == Approx(llm.activation_bytes));
  CHECK(*llm.backward_weight_s / llm.backward_s < 0.5);
}

TEST_CASE("partition search: interleaved returns P x v chunks covering the units",
          "[partition][search][schedule]") {
  PartitionSearchInput in;
  for (int u = 0; u < 20; ++u) {
    in.unit_seconds.push_back(u % 3 == 0 ? 3.0 : 1.5);
    in.output_bytes.push_back(1e6);
  }
  in.stages = 4;
  in.micro_batches = 8;
  in.schedule = PipelineSchedule::kInterleaved;
  in.virtual_stages = 2;
  const auto r = search_partitions(in);
  REQUIRE(!r.top.empty());
  for (const auto& t : r.top) {
    CHECK(t.partition.stages() == 8);
    CHECK(t.partition.units() == 20);
    for (int s : t.partition.sizes) CHECK(s >= 1);
    CHECK(t.pipeline_s == Approx(pipeline_seconds(t.partition, in)));
  }
  // 3^7 = 2187 candidates per anchor fit under the cap: the full neighbourhood.
  CHECK(neighbourhood_cuts(r.exact_anchor, 1).size() == 2187u);
  // Above the cap: single and pair moves (1 + 7 * 2 + 21 * 4 = 99).
  CHECK(neighbourhood_cuts(r.exact_anchor, 1, 100).size() == 99u);
  // Fewer units than chunks: a clear error.
  in.virtual_stages = 6;
  CHECK_THROWS_WITH(search_partitions(in), Catch::Contains("needs 24 pipeline units"));
  // ZB-H1 ranks under its own lists: faster than 1F1B on the same split.
  in.schedule = PipelineSchedule::kZbH1;
  in.virtual_stages = 1;
  const Partition p = uniform_partition(20, 4);
  PartitionSearchInput one = in;
  one.schedule = PipelineSchedule::k1F1B;
  CHECK(pipeline_seconds(p, in) < pipeline_seconds(p, one));
}
