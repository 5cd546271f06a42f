#include "partition/analytic_cost_model.h"

#include <catch2/catch.hpp>

#include "core/error.h"

using namespace omnibal::partition;
using omnibal::UnitKind;

namespace {
AnalyticCostModel internvl(bool freeze_vit = false) {
  return AnalyticCostModel(omnibal::load_model_preset("internvl-1.5-6b-20b"),
                           device_spec("a100-80g"), 1, freeze_vit);
}
double params_of(const UnitCostTable& t, UnitKind a, UnitKind b) {
  double p = 0;
  for (const auto& u : t.units)
    if (u.kind == a || u.kind == b) p += u.parameter_bytes / 2;
  return p;
}
}  // namespace

TEST_CASE("analytic model: unit order and published parameter counts", "[partition][analytic]") {
  const auto model = internvl();
  CHECK(model.num_units() == 45 + 48 + 4);
  const auto t = model.costs(MicroBatchLoad::packed({5, 5}, {1500, 1400}));
  CHECK(t.units[0].name == "vit_embed");
  CHECK(t.units[45].name == "vit_block.44");
  CHECK(t.units[46].kind == UnitKind::kProjector);
  CHECK(t.units[47].kind == UnitKind::kLlmEmbed);
  CHECK(t.units[48].name == "llm_block.0");
  CHECK(t.units[96].kind == UnitKind::kLlmHead);
  // InternViT-6B-448px-V1-5 keeps 45 of InternViT-6B's 48 blocks: 5,540M parameters;
  // InternLM2-20B has 19.86B (published model cards).
  CHECK(params_of(t, UnitKind::kVitEmbed, UnitKind::kVitBlock) == Approx(5.54e9).epsilon(0.01));
  CHECK(params_of(t, UnitKind::kLlmEmbed, UnitKind::kLlmBlock) +
            params_of(t, UnitKind::kLlmHead, UnitKind::kLlmHead) ==
        Approx(19.86e9).epsilon(0.03));
}

TEST_CASE("analytic model: hand-computed FLOPs and bytes", "[partition][analytic]") {
  const auto model = internvl();
  const auto load = MicroBatchLoad::packed({2, 1}, {600, 400});  // 3 tiles, 1000 tokens
  // ViT block: 2 * tiles * 1025 * (4 d^2 + 2 d f) with d = 3200, f = 12800.
  const auto vit = model.work(1, load);
  CHECK(vit.gemm_flops == Approx(2.0 * 3 * 1025 * (4.0 * 3200 * 3200 + 2.0 * 3200 * 12800)));
  CHECK(vit.attention_flops == Approx(4.0 * 3 * 1025 * 1025 * 3200));
  // LLM block: GQA with 8 of 48 heads for k, v: d_kv = 1024; causal attention per sample.
  const auto llm = model.work(48, load);
  CHECK(llm.gemm_flops ==
        Approx(2.0 * 1000 * (2.0 * 6144 * 6144 + 2.0 * 6144 * 1024 + 3.0 * 6144 * 16384)));
  CHECK(llm.attention_flops == Approx(2.0 * (600.0 * 600 + 400.0 * 400) * 6144));
  const auto t = model.costs(load);
  CHECK(t.units[48].activation_bytes == Approx(2.0 * 1000 * (6 * 6144 + 2 * 1024 + 3 * 16384)));
  CHECK(t.units[48].output_bytes == Approx(2.0 * 1000 * 6144 + 16.0 * 1000));
  // Seconds: GEMMs at 70% of 312 TFLOP/s, element-wise at 80% of 2.039 TB/s.
  const auto proj = model.work(46, load);
  const double proj_fwd = proj.gemm_flops / (312e12 * 0.7) + proj.memory_bytes / (2.039e12 * 0.8);
  CHECK(t.units[46].forward_s == Approx(proj_fwd));
  CHECK(t.units[46].backward_s == Approx(2 * proj_fwd));  // no attention: backward = 2x forward
}

TEST_CASE("analytic model: padding costs, frozen ViT and tensor parallelism",
          "[partition][analytic]") {
  const auto model = internvl();
  const auto packed = MicroBatchLoad::packed({1, 1, 1, 1}, {300, 500, 700, 900});
  const auto padded = MicroBatchLoad::padded_to_longest({1, 1, 1, 1}, {300, 500, 700, 900});
  CHECK(padded.computed_tokens() == 3600);
  CHECK(packed.computed_tokens() == 2400);
  const auto a = model.costs(packed), b = model.costs(padded);
  CHECK(b.units[60].forward_s > 1.4 * a.units[60].forward_s);     // 1.5x tokens, more attention
  CHECK(b.units[10].forward_s == Approx(a.units[10].forward_s));  // the ViT never pads
  const auto frozen = internvl(true).costs(packed);
  CHECK(frozen.units[10].backward_s == 0);
  CHECK_FALSE(frozen.units[10].trainable);
  CHECK(frozen.units[46].trainable);
  // TP 2 (ViT heads padded 25 -> 26): LLM block GEMMs and attention halve, element-wise
  // traffic on the replicated 10 d per token does not; the block keeps its two norms whole.
  const AnalyticCostModel tp2(omnibal::load_model_preset("internvl-1.5-6b-20b"),
                              device_spec("a100-80g"), 2, false, {}, VitHeadPadding::kDummyHeads);
  const auto c = tp2.costs(packed);
  CHECK(c.units[60].forward_s < 0.6 * a.units[60].forward_s);
  CHECK(c.units[60].forward_s > 0.5 * a.units[60].forward_s);
  CHECK(c.units[60].parameter_bytes ==
        Approx((a.units[60].parameter_bytes - 2.0 * 2 * 6144) / 2 + 2.0 * 2 * 6144));
  CHECK_THROWS_WITH(device_spec("v100"), Catch::Contains("a100-80g | h100 | h200"));
}
