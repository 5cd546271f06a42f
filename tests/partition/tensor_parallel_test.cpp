// TP in the planners (partition/tensor_parallel.h, analytic_cost_model.h): hand-computed
// all-reduce times and volumes, per-TP-rank parameters and activations of the tiny preset, the
// trainer's refusals, and the JSON / scaling of the TP fields.
#include "partition/tensor_parallel.h"

#include <catch2/catch.hpp>

#include "core/error.h"
#include "partition/analytic_cost_model.h"
#include "partition/cost_model.h"

using namespace omnibal::partition;
using Catch::Contains;
using omnibal::UnitKind;

namespace {
omnibal::ModelPreset tiny() { return omnibal::load_model_preset("tiny"); }
AnalyticCostModel tiny_model(int tp, bool freeze_vit = false) {
  return AnalyticCostModel(tiny(), device_spec("a100-80g"), tp, freeze_vit);
}
double bytes(const UnitCostTable& t) {
  double b = 0;
  for (const auto& u : t.units) b += u.parameter_bytes;
  return b;
}
}  // namespace

TEST_CASE("ring all-reduce seconds: latency per call plus 2 (n-1)/n of the bytes",
          "[partition][tp]") {
  const TpLink link{1e9, 1e-5};
  CHECK(all_reduce_seconds(1e6, 2, 4, link) == Approx(2 * 1e-5 + 1.5 * 1e6 / 1e9));
  CHECK(all_reduce_seconds(1e6, 3, 2, link) == Approx(3e-5 + 1e6 / 1e9));
  CHECK(all_reduce_seconds(1e6, 2, 1, link) == 0);  // one rank: nothing to reduce
  CHECK_THROWS_WITH(all_reduce_seconds(1e6, 1, 2, TpLink{}), Contains("without bandwidth"));
  // A100: NVLink 300 GB/s per direction at 80%, 10 us per call; tp beyond a node: the network.
  const TpLink a100 = tp_link(device_spec("a100-80g"), 4);
  CHECK(a100.bandwidth == Approx(0.8 * 300e9));
  CHECK(a100.latency_s == Approx(10e-6));
  CHECK(tp_link(device_spec("a100-80g"), 16).bandwidth == Approx(0.8 * 25e9));
}

TEST_CASE("padding and the trainer's head checks", "[partition][tp]") {
  using omnibal::check_tensor_parallel;
  using omnibal::padded_vocab_size;
  CHECK(padded_vocab_size(92553, 1) == 92553);
  CHECK(padded_vocab_size(92553, 2) == 92554);
  CHECK(padded_vocab_size(92553, 4) == 92556);
  CHECK(padded_heads(25, 4) == 28);
  CHECK_NOTHROW(check_tensor_parallel(tiny(), 2));  // ViT 4 heads, LLM 4 heads, 2 KV heads
  CHECK_THROWS_WITH(check_tensor_parallel(tiny(), 4),
                    Contains("model preset 'tiny' cannot split over parallel.tp = 4: llm.kv_heads "
                             "= 2 is not divisible by 4"));
  omnibal::ModelPreset odd_mlp = tiny();
  odd_mlp.llm.mlp_dim = 350;  // heads divide by 4 after this, the MLP width does not
  odd_mlp.llm.kv_heads = 4;
  CHECK_THROWS_WITH(check_tensor_parallel(odd_mlp, 4), Contains("llm.mlp_dim = 350"));
  CHECK_THROWS_WITH(check_tensor_parallel(tiny(), 0), Contains("parallel.tp: expected >= 1"));
  const auto internvl = omnibal::load_model_preset("internvl-1.5-6b-20b");
  CHECK_THROWS_WITH(AnalyticCostModel(internvl, device_spec("a100-80g"), 2),
                    Contains("vit.heads = 25"));
  // With dummy heads (Megatron-LM NVLM) 25 -> 26 heads of 128: qkv + proj 4 * 3200 * 3328.
  const AnalyticCostModel padded(internvl, device_spec("a100-80g"), 2, false, {},
                                 VitHeadPadding::kDummyHeads);
  const auto load = MicroBatchLoad::packed({1}, {100});
  CHECK(padded.work(1, load).gemm_flops ==
        Approx(2.0 * 1025 * (4.0 * 3200 * 3328 + 2.0 * 3200 * 12800) / 2));
}

TEST_CASE("TP all-reduces per unit, counted by hand for the tiny preset", "[partition][tp]") {
  const auto p = tiny();
  // 3 tiles of 17 ViT tokens, 100 LLM tokens, bf16.
  const auto vit = unit_tp_all_reduces(p, UnitKind::kVitBlock, 3, 100, 2, 2.0, true);
  CHECK(vit.forward_bytes == 2 * 2.0 * 51 * 64);
  CHECK(vit.forward_calls == 2);
  CHECK(vit.backward_bytes == 2 * 2.0 * 51 * 64);
  CHECK(vit.backward_calls == 2);
  const auto frozen = unit_tp_all_reduces(p, UnitKind::kVitBlock, 3, 100, 2, 2.0, false);
  CHECK(frozen.backward_calls == 0);
  CHECK(frozen.backward_bytes == 0);
  const auto llm = unit_tp_all_reduces(p, UnitKind::kLlmBlock, 3, 100, 2, 2.0, true);
  CHECK(llm.forward_bytes == 2 * 2.0 * 100 * 128);
  CHECK(llm.backward_bytes == 2 * 2.0 * 100 * 128);
  const auto embed = unit_tp_all_reduces(p, UnitKind::kLlmEmbed, 3, 100, 2, 2.0, true);
  CHECK(embed.forward_bytes == 2.0 * 100 * 128);
  CHECK(embed.forward_calls == 1);
  CHECK(embed.backward_calls == 0);
  const auto head = unit_tp_all_reduces(p, UnitKind::kLlmHead, 3, 100, 2, 4.0, true);
  CHECK(head.forward_bytes == 3 * 4.0 * 100);  // max, sum of exp, target logit, fp32
  CHECK(head.forward_calls == 3);
  CHECK(head.backward_bytes == 4.0 * 100 * 128);
  CHECK(head.backward_calls == 1);
  CHECK(unit_tp_all_reduces(p, UnitKind::kProjector, 3, 100, 2, 2.0, true) == TpAllReduces{});
  CHECK(unit_tp_all_reduces(p, UnitKind::kVitEmbed, 3, 100, 2, 2.0, true) == TpAllReduces{});
  CHECK(unit_tp_all_reduces(p, UnitKind::kLlmBlock, 3, 100, 1, 2.0, true) == TpAllReduces{});
  // InternViT's qk-norm: one [tokens] fp32 all-reduce for q and one for k, each way.
  const auto internvl = omnibal::load_model_preset("internvl-1.5-6b-20b");
  const auto qk = unit_tp_all_reduces(internvl, UnitKind::kVitBlock, 1, 100, 2, 2.0, true);
  CHECK(qk.forward_calls == 4);
  CHECK(qk.forward_bytes == 2 * 2.0 * 1025 * 3200 + 2 * 4.0 * 1025);
  CHECK(qk.backward_bytes == qk.forward_bytes);
  // Recomputation re-runs the forward's all-reduces in the backward (trainable blocks only).
  UnitCost u;
  u.kind = UnitKind::kLlmBlock;
  u.tp_all_reduce = llm;
  const TpLink link{1e9, 1e-5};
  CHECK(tp_forward_seconds(u, 2, link) == Approx(2e-5 + 51200 / 1e9));
  CHECK(tp_backward_seconds(u, true, 2, link) == Approx(4e-5 + 2 * 51200 / 1e9));
  CHECK(tp_backward_seconds(u, false, 2, link) == Approx(2e-5 + 51200 / 1e9));
}

TEST_CASE("analytic model per TP rank: tiny preset parameters counted by hand",
          "[partition][tp][analytic]") {
  const auto load = MicroBatchLoad::packed({2, 1}, {60, 40});  // 3 tiles, 100 tokens
  const auto t1 = tiny_model(1).costs(load), t2 = tiny_model(2).costs(load);
  CHECK(t1.tp == 1);
  CHECK(t2.tp == 2);
  // Units: vit_embed, vit_block.0-1, projector, llm_embed, llm_block.0-3, head.
  // ViT block (d 64, f 256, layernorm, layer scale, qkv bias): sharded 4 d^2 + 2 d f + f + 3 d
  // = 49600, replicated 2 * 2 d (norms) + 2 d (proj, fc2 bias) + 2 d (layer scales) = 512.
  CHECK(t1.units[1].parameter_bytes == 2.0 * (49600 + 512));
  CHECK(t2.units[1].parameter_bytes == 2.0 * (49600 / 2 + 512));
  // LLM block (d 128, d_kv 64, f 352): sharded 2 d^2 + 2 d d_kv + 3 d f = 184320, norms 256.
  CHECK(t1.units[5].parameter_bytes == 2.0 * (184320 + 256));
  CHECK(t2.units[5].parameter_bytes == 2.0 * (184320 / 2 + 256));
  // Vocab-parallel embedding and head (1024 rows, divisible by 2); head norm replicated.
  CHECK(t2.units[4].parameter_bytes == 2.0 * 512 * 128);
  CHECK(t2.units[9].parameter_bytes == 2.0 * (128 + 512 * 128));
  // Replicated: vit_embed (3 * 14^2 * 64 + 64 + 17 * 64 + 64) and the projector.
  CHECK(t2.units[0].parameter_bytes == 2.0 * 38848);
  CHECK(t2.units[3].parameter_bytes == 2.0 * 49920);
  CHECK(t2.units[3].parameter_bytes == t1.units[3].parameter_bytes);
  // Totals: replicated R = 38848 + 2 * 512 + 49920 + 4 * 256 + 128 = 90944 parameters, all
  // 1,189,568; per TP rank at tp 2: R + (all - R) / 2 = 640,256.
  CHECK(bytes(t1) == 2.0 * 1189568);
  CHECK(bytes(t2) == 2.0 * 640256);
  // Kept activations: LLM block 2 B * 100 * (4 d + (2 d + 2 d_kv + 3 f) / 2) = 246,400 bytes;
  // ViT block 2 B * 51 * (7 d + (4 d + 2 f) / 2); head logits 4 B * 100 * 1024 / 2.
  CHECK(t2.units[5].activation_bytes == 2.0 * 100 * (4 * 128 + (2 * 128 + 2 * 64 + 3 * 352) / 2));
  CHECK(t2.units[1].activation_bytes == 2.0 * 51 * (7 * 64 + (4 * 64 + 2 * 256) / 2));
  CHECK(t2.units[9].activation_bytes == 2.0 * 100 * 2 * 128 + 4.0 * 100 * 512);
  CHECK(t2.units[5].output_bytes == t1.units[5].output_bytes);  // full activations travel
  // Compute: GEMM and attention FLOPs of blocks and head 1/tp; replicated units unchanged.
  const auto m1 = tiny_model(1), m2 = tiny_model(2);
  CHECK(m2.work(5, load).gemm_flops == Approx(m1.work(5, load).gemm_flops / 2));
  CHECK(m2.work(5, load).attention_flops == Approx(m1.work(5, load).attention_flops / 2));
  CHECK(m2.work(9, load).gemm_flops == Approx(m1.work(9, load).gemm_flops / 2));
  CHECK(t2.units[3].forward_s == Approx(t1.units[3].forward_s));
  // The all-reduces are filled in bf16 and are not part of the times.
  CHECK(t2.units[5].tp_all_reduce.forward_bytes == 2 * 2.0 * 100 * 128);
  CHECK(t1.units[5].tp_all_reduce == TpAllReduces{});
  // A frozen ViT: no backward all-reduces, forward ones stay.
  const auto f2 = tiny_model(2, true).costs(load);
  CHECK(f2.units[1].tp_all_reduce.backward_calls == 0);
  CHECK(f2.units[1].tp_all_reduce.forward_calls == 2);
}

TEST_CASE("TP fields: JSON round trip, defaults of older tables, scaling with the load",
          "[partition][tp][cost_table]") {
  auto t = tiny_model(2).costs(MicroBatchLoad::packed({4}, {200}));
  const auto back = parse_unit_cost_table(unit_cost_table_json(t), "test");
  CHECK(back.tp == 2);
  for (size_t u = 0; u < t.units.size(); ++u)
    CHECK(back.units[u].tp_all_reduce == t.units[u].tp_all_reduce);
  const std::string old = R"({"format": "omnibal.unit_costs.v1", "model": "tiny",
    "source": "profiled:cpu", "load": {"tiles": 1, "tokens": 10, "samples": 1},
    "units": [{"name": "vit_embed", "kind": "vit_embed", "forward_s": 0.1, "backward_s": 0.2,
               "activation_bytes": 1, "parameter_bytes": 2, "trainable": true,
               "output_bytes": 3}]})";
  const auto o = parse_unit_cost_table(old, "old");
  CHECK(o.tp == 1);
  CHECK(o.units[0].tp_all_reduce == TpAllReduces{});
  // Scaled to twice the tokens: LLM all-reduce bytes double, calls stay; tp kept.
  const ScaledTableCostModel scaled(t);
  const auto s = scaled.costs(MicroBatchLoad::packed({4}, {400}));
  CHECK(s.tp == 2);
  CHECK(s.units[5].tp_all_reduce.forward_bytes ==
        Approx(2 * t.units[5].tp_all_reduce.forward_bytes));
  CHECK(s.units[5].tp_all_reduce.forward_calls == 2);
  // A profiled table gets its volumes from the preset: the same as the analytic model's.
  auto profiled = t;
  for (auto& u : profiled.units) u.tp_all_reduce = {};
  set_tp_all_reduces(profiled, tiny(), 2.0);
  for (size_t u = 0; u < t.units.size(); ++u)
    CHECK(profiled.units[u].tp_all_reduce == t.units[u].tp_all_reduce);
  profiled.units.pop_back();
  CHECK_THROWS_WITH(set_tp_all_reduces(profiled, tiny(), 2.0), Contains("9 units"));
}
