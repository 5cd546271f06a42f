#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdio>

#include "core/config.h"
#include "core/model_preset.h"
#include "models/vlm.h"
#include "partition/analytic_cost_model.h"
#include "partition/device_spec.h"
#include "partition/unit_cost_table.h"
#include "profile/profiling_pack.h"
#include "profile/unit_profiler.h"

using namespace omnibal;
using namespace omnibal::profile;

namespace {

ProfileOptions tiny_options() {
  ProfileOptions o;
  o.pack.q_vit = 16;   // 64 image tokens (4 per 56 px tile)
  o.pack.q_tok = 112;  // + 48 text tokens
  o.pack.samples = 4;
  o.pack.seed = 7;
  o.warmup = 0;
  o.repeats = 1;
  return o;
}

}  // namespace

TEST_CASE("unit profiler: a unit's time is the median or the mean of its repeats", "[profile]") {
  // A two-speed host: three fast runs, two 1.5x slower ones.
  const std::vector<double> runs{0.010, 0.015, 0.010, 0.015, 0.010};
  CHECK(summarize(runs, ProfileStatistic::kMedian) == Approx(0.010));
  CHECK(summarize(runs, ProfileStatistic::kMean) == Approx(0.012));
  CHECK(summarize({0.004, 0.002}, ProfileStatistic::kMedian) == Approx(0.003));
  CHECK_THROWS_WITH(summarize({}, ProfileStatistic::kMean), Catch::Contains("no timed runs"));
}

TEST_CASE("profiling pack: exact tiles and tokens, unequal samples, image tokens in place",
          "[profile]") {
  const auto preset = load_model_preset("tiny");
  ProfilingPackOptions o;
  o.q_vit = GENERATE(4, 16, 31);
  o.samples = GENERATE(1, 3, 4);
  o.q_tok = o.q_vit * preset.tokens_per_tile() + 10 * o.samples + 7;
  o.seed = 11;
  const auto pack = make_profiling_pack(preset, o);
  CHECK(pack.pixel_values.size(0) == o.q_vit);
  CHECK(pack.input_ids.size(0) == o.q_tok);
  CHECK(pack.num_samples() == o.samples);
  const int64_t img = profiling_img_context_id(preset, o);
  CHECK((pack.input_ids == img).sum().item<int64_t>() == o.q_vit * preset.tokens_per_tile());
  CHECK((pack.labels != -100).sum().item<int64_t>() >= o.samples);
  CHECK((pack.labels.masked_select(pack.labels != -100) == img).sum().item<int64_t>() == 0);
  const auto layout = profiling_pack_layout(preset, o);
  const auto cu = pack.cu_seqlens;
  double sq = 0;
  for (size_t s = 0; s < layout.tiles.size(); ++s) {
    CHECK(layout.tiles[s] >= 1);
    CHECK(layout.text[s] >= 4);
    const auto len = static_cast<double>(cu[s + 1].item<int64_t>() - cu[s].item<int64_t>());
    sq += len * len;
  }
  // The attention load the table records is the pack's own squared sample lengths.
  CHECK(profiling_pack_token_sq_sum(preset, layout) == sq);
  if (o.samples > 1) CHECK(sq < static_cast<double>(o.q_tok) * o.q_tok);
  o.q_tok = o.q_vit * preset.tokens_per_tile();  // no room for text
  CHECK_THROWS_WITH(make_profiling_pack(preset, o), Catch::Contains("q_tok"));
}

TEST_CASE("unit profiler: tiny table has the analytic names, exact parameter and output bytes",
          "[profile]") {
  const auto preset = load_model_preset("tiny");
  const auto o = tiny_options();
  const auto result = profile_units(preset, o);
  const auto& t = result.table;
  const auto analytic = partition::AnalyticCostModel(preset, partition::device_spec("a100-80g"))
                            .costs(partition::MicroBatchLoad::packed({16}, {112}));
  REQUIRE(t.units.size() == analytic.units.size());
  const auto counts = models::unit_parameter_counts(preset);
  const int64_t T = 112, n = 4, tiles = 16, vit_tokens = preset.vit_tokens_per_tile();
  const double side = 8.0 * (5 + 3 * T + (n + 1) + tiles);  // side_tensor(): int64
  for (size_t i = 0; i < t.units.size(); ++i) {
    const auto& u = t.units[i];
    INFO(u.name);
    CHECK(u.name == analytic.units[i].name);
    CHECK(u.kind == analytic.units[i].kind);
    CHECK(u.parameter_bytes == 4.0 * counts[i]);  // fp32 on the CPU
    CHECK(u.forward_s > 0);
    CHECK(u.backward_s > 0);
    CHECK(u.trainable);
    if (u.kind == UnitKind::kVitBlock)
      CHECK(u.output_bytes == 4.0 * tiles * vit_tokens * preset.vit.width + side);
    if (u.kind == UnitKind::kLlmBlock) {
      CHECK(u.output_bytes == 4.0 * T * preset.llm.width + side);
      // RMSNorm keeps its input; q, k, v, attention output, MLP activations come on top.
      CHECK(u.activation_bytes >= 4.0 * 4 * T * preset.llm.width);
    }
    if (u.kind == UnitKind::kVitBlock)
      CHECK(u.activation_bytes >= 4.0 * 4 * tiles * vit_tokens * preset.vit.width);
  }
  CHECK(t.units.back().output_bytes == 0);
  CHECK(t.load.tiles == 16);
  CHECK(t.load.tokens == 112);
  CHECK(t.load.token_sq_sum ==
        profiling_pack_token_sq_sum(preset, profiling_pack_layout(preset, o.pack)));
  CHECK(t.load.token_sq_sum > 112.0 * 112 / 4);  // 4 samples: at least the equal split's
  CHECK(t.source == "profiled:cpu");
  // The table survives the planners' JSON format.
  const auto back = partition::parse_unit_cost_table(partition::unit_cost_table_json(t), "test");
  REQUIRE(back.units.size() == t.units.size());
  CHECK(back.units[3].activation_bytes == t.units[3].activation_bytes);
  CHECK(back.load.token_sq_sum == Approx(t.load.token_sq_sum).epsilon(1e-12));
}

TEST_CASE("unit profiler: activation bytes do not depend on the repeat and scale with the load",
          "[profile]") {
  const auto preset = load_model_preset("tiny");
  auto o = tiny_options();
  o.repeats = 2;
  const auto a = profile_units(preset, o).table;
  o.pack.q_vit = 32;
  o.pack.q_tok = 224;
  const auto b = profile_units(preset, o).table;
  for (size_t i = 0; i < a.units.size(); ++i) {
    const auto& u = a.units[i];
    INFO(u.name);
    if (u.kind == UnitKind::kVitBlock || u.kind == UnitKind::kLlmBlock) {
      // Twice the tiles and tokens: at least twice the bytes (attention grows faster), at most
      // 2.5x at these lengths.
      CHECK(b.units[i].activation_bytes >= 1.99 * u.activation_bytes);
      CHECK(b.units[i].activation_bytes <= 2.5 * u.activation_bytes);
    }
  }
}

TEST_CASE("unit profiler: train.freeze vit leaves the ViT without backward and activations",
          "[profile]") {
  const auto preset = load_model_preset("tiny");
  auto o = tiny_options();
  o.freeze = {UnitGroup::kVit};
  const auto t = profile_units(preset, o).table;
  for (const auto& u : t.units) {
    INFO(u.name);
    const bool vit = u.kind == UnitKind::kVitEmbed || u.kind == UnitKind::kVitBlock;
    CHECK(u.trainable == !vit);
    if (vit) {
      CHECK(u.backward_s == 0);
      CHECK(u.activation_bytes == 0);
      CHECK(u.parameter_bytes > 0);  // frozen weights still occupy memory
    } else {
      CHECK(u.backward_s > 0);
      if (u.recomputable() || u.kind == UnitKind::kProjector) CHECK(u.activation_bytes > 0);
    }
  }
  // Group names are checked once, where they are read (config and --freeze).
  CHECK_THROWS_WITH(parse_config("train: {freeze: [encoder]}\n", "t.yaml"),
                    Catch::Contains("train.freeze[0]") &&
                        Catch::Contains("expected vit | projector | llm"));
}

TEST_CASE("unit profiler: --split-backward times W and counts what the deferred W's keep",
          "[profile]") {
  const auto preset = load_model_preset("tiny");
  auto o = tiny_options();
  o.freeze = {UnitGroup::kVit};
  o.split_backward = true;
  const auto t = profile_units(preset, o).table;
  // An LLM block defers wq, wk, wv (one shared input), wo, w1, w3 (one shared input), w2:
  // inputs [T, d] x 3 + [T, mlp]; output gradients [T, heads hd], 2 x [T, kv hd], [T, d],
  // 2 x [T, mlp], [T, d]; fp32, T = the pack's tokens.
  const double T = o.pack.q_tok, d = preset.llm.width, mlp = preset.llm.mlp_dim;
  const double hd = d / preset.llm.heads, kv = preset.llm.kv_heads * hd;
  const double block = 4.0 * T * (3 * d + mlp + d + 2 * kv + d + 2 * mlp + d);
  for (const auto& u : t.units) {
    INFO(u.name);
    REQUIRE(u.backward_weight_s.has_value());
    REQUIRE(u.weight_grad_bytes.has_value());
    if (!u.trainable) {  // the frozen ViT: nothing deferred
      CHECK(*u.backward_weight_s == 0);
      CHECK(*u.weight_grad_bytes == 0);
      continue;
    }
    if (u.kind == UnitKind::kLlmBlock) {
      CHECK(*u.backward_weight_s > 0);
      CHECK(*u.backward_weight_s < u.backward_s);
      CHECK(*u.weight_grad_bytes == block);
    }
  }
}

TEST_CASE("unit profiler: trainable ViT and LLM blocks are also timed checkpointed", "[profile]") {
  const auto preset = load_model_preset("tiny");
  auto o = tiny_options();
  o.freeze = {UnitGroup::kVit};
  const auto t = profile_units(preset, o).table;
  int timed = 0;
  for (const auto& u : t.units) {
    INFO(u.name);
    const bool block = u.kind == UnitKind::kLlmBlock;  // the frozen ViT's are not
    CHECK(u.checkpointed_forward_s.has_value() == block);
    CHECK(u.checkpointed_backward_s.has_value() == block);
    if (!block) continue;
    ++timed;
    CHECK(*u.checkpointed_forward_s > 0);
    CHECK(*u.checkpointed_backward_s > 0);
  }
  CHECK(timed == preset.llm.depth);
  o.checkpointed = false;
  for (const auto& u : profile_units(preset, o).table.units)
    CHECK_FALSE(u.checkpointed_forward_s.has_value());
}

TEST_CASE("unit profiler: between_units runs before every unit run and may end the profile",
          "[profile]") {
  const auto preset = load_model_preset("tiny");
  auto o = tiny_options();
  o.checkpointed = false;
  int calls = 0;
  o.between_units = [&] { ++calls; };
  const auto t = profile_units(preset, o).table;
  const int n = static_cast<int>(t.units.size());
  CHECK(calls == (n - 1) + n * (o.warmup + o.repeats));  // the input pass, then every run
  // A stop request (lib/train/startup_stop.h throws) ends the profile before the next unit.
  struct Stop {};
  calls = 0;
  o.between_units = [&] {
    if (++calls == n + 2) throw Stop{};
  };
  CHECK_THROWS_AS(profile_units(preset, o), Stop);
  CHECK(calls == n + 2);
}
