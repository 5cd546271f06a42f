#include <catch2/catch.hpp>

#include "train/evaluator.h"

using omnibal::models::Phase;
using omnibal::models::UnitState;

TEST_CASE("exact match: a sample counts only when every answer token's argmax is right",
          "[train]") {
  // Two samples of 4 and 3 tokens; labels[t] is predicted at t - 1 within the sample.
  UnitState s;
  s.phase = Phase::kLoss;
  s.cu_seqlens = torch::tensor({0, 4, 7}, torch::kInt64);
  s.labels = torch::tensor({-100, -100, 5, 6, -100, 2, 3}, torch::kInt64);
  s.label_positions = torch::tensor({1, 2, 4, 5}, torch::kInt64);  // predict 5, 6 | 2, 3
  s.label_count = 4;
  s.logits = torch::zeros({4, 8});
  s.logits[0][5] = 1;  // right
  s.logits[1][1] = 1;  // wrong: 1 instead of 6
  s.logits[2][2] = 1;  // right
  s.logits[3][3] = 1;  // right
  s.token_loss = torch::tensor({0.5f, 1.0f, 0.25f, 0.25f});
  const auto m = omnibal::train::match_samples(s);
  CHECK(m.correct == std::vector<bool>{false, true});
  CHECK(m.labels == std::vector<int64_t>{2, 2});
  CHECK(m.loss_sum[0] == Approx(1.5));
  CHECK(m.loss_sum[1] == Approx(0.5));
}
