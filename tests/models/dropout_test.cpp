// Counter-based dropout (models/dropout.h): masks are a pure function of (key, unit, site), so
// recomputation, stage splits and evaluation behave; dropout changes the loss when on.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "models/dropout.h"
#include "model_test_util.h"

using namespace omnibal::models;
using namespace omnibal::models::testing;

TEST_CASE("counter-based dropout masks depend on the key, unit and site only",
          "[models][dropout]") {
  const double p = GENERATE(0.1, 0.25, 0.5);
  const torch::Tensor x = torch::ones({400, 300});
  const int64_t key = dropout_key(1234, 7, 3);
  const uint64_t unit = unit_name_hash("llm_block_2");
  const torch::Tensor y = counter_dropout(x, p, key, unit, DropoutSite::kMlpOutput);
  // Inverted dropout: every element is 0 or 1 / (1 - p); about a fraction p are 0.
  const float kept = static_cast<float>(1.0 / (1.0 - p));
  CHECK(torch::logical_or(y.eq(0), y.eq(kept)).all().item<bool>());
  const double zeros = y.eq(0).to(torch::kFloat64).mean().item<double>();
  CHECK(std::abs(zeros - p) < 0.01);  // 120,000 Bernoulli draws: 4+ standard deviations
  // The same coordinates give the same mask; any other coordinate another one.
  CHECK(torch::equal(y, counter_dropout(x, p, key, unit, DropoutSite::kMlpOutput)));
  CHECK_FALSE(torch::equal(y, counter_dropout(x, p, key, unit, DropoutSite::kAttentionOutput)));
  CHECK_FALSE(torch::equal(y, counter_dropout(x, p, key, unit_name_hash("llm_block_3"),
                                              DropoutSite::kMlpOutput)));
  CHECK_FALSE(torch::equal(y, counter_dropout(x, p, dropout_key(1234, 7, 4), unit,
                                              DropoutSite::kMlpOutput)));
  // Key 0 (evaluation) and p = 0 leave the input as it is.
  CHECK(torch::equal(counter_dropout(x, p, 0, unit, DropoutSite::kMlpOutput), x));
  CHECK(torch::equal(counter_dropout(x, 0.0, key, unit, DropoutSite::kMlpOutput), x));
  CHECK_THROWS_AS(counter_dropout(x, 1.0, key, unit, DropoutSite::kMlpOutput), omnibal::Error);
  // Keys: deterministic, never 0, different per seed, step and slot.
  CHECK(dropout_key(1234, 7, 3) == key);
  CHECK(key != 0);
  CHECK(dropout_key(1235, 7, 3) != key);
  CHECK(dropout_key(1234, 8, 3) != key);
  CHECK(dropout_key(1234, 3, 7) != key);
}

TEST_CASE("model dropout follows the pack's key through stage splits and recomputation",
          "[models][dropout][recompute]") {
  const auto& preset = tiny_preset();
  const auto plain_options = VlmOptions{}.with_img_context_id(kImgContextId).with_seed(5);
  const auto options = VlmOptions(plain_options).with_dropout(0.3);
  PackBatch pack = make_pack(preset, {{2, 14, 5}, {0, 8, 3}, {1, 11, 4}}, 9);
  pack.dropout_key = dropout_key(77, 2, 1);

  Vlm off(preset, plain_options), on(preset, options), recomputed(preset, options);
  for (auto& unit : recomputed->units()) unit->set_recompute(true);
  const UnitState a = off->forward(pack);
  UnitState b = on->forward(pack);
  const double loss_off = a.loss_sum.item<double>(), loss_on = b.loss_sum.item<double>();
  INFO("loss without dropout " << loss_off << ", with p = 0.3 " << loss_on);
  // Dropout on changes the loss; the same key again gives the same loss bit for bit.
  CHECK(std::abs(loss_on - loss_off) > 1e-4 * std::abs(loss_off));
  CHECK(on->forward(pack).loss_sum.item<double>() == loss_on);
  // Key 0 (what evaluation packs carry) is dropout off.
  PackBatch eval_pack = pack;
  eval_pack.dropout_key = 0;
  CHECK(on->forward(eval_pack).loss_sum.item<double>() == loss_off);
  // Another key, other masks.
  PackBatch other = pack;
  other.dropout_key = dropout_key(77, 2, 2);
  CHECK(on->forward(other).loss_sum.item<double>() != loss_on);

  // Recomputation regenerates the masks: same loss and gradients as the plain run.
  UnitState c = recomputed->forward(pack);
  CHECK(c.loss_sum.item<double>() == loss_on);
  b.loss_sum.backward();
  c.loss_sum.backward();
  const auto gb = grads_of(*on), gc = grads_of(*recomputed);
  for (const auto& [name, g] : gb) {
    INFO(name);
    CHECK(rel_err(gc.at(name), g) < 1e-6);
  }

  // Two stages built separately, the key crossing the boundary in the side tensor.
  const int64_t cut = GENERATE(3, 6, 9);
  auto first = make_units(preset, options, 0, cut);
  auto second = make_units(preset, options, cut, on->num_units());
  UnitState s = run_units(first, UnitState::from_pack(pack));
  s = UnitState::from_wire(s.hidden.detach(), s.side_tensor());
  CHECK(s.dropout_key == pack.dropout_key);
  CHECK(run_units(second, s).loss_sum.item<double>() == Approx(loss_on).epsilon(1e-6));
}
