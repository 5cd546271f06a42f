// loss.reduction (models/loss_reduction.h): hand-computed token / sample / square values, and
// a packed run of the tiny VLM equal to its per-sample runs (loss and gradients) under each
// reduction, with the normaliser summed over micro-batches as the trainer all-reduces it.
#include "models/loss_reduction.h"

#include "core/error.h"
#include "models/llm.h"
#include "tests/models/model_test_util.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace omnibal::models;
using namespace omnibal::models::testing;

TEST_CASE("loss reductions on a hand-computed pack", "[models][loss]") {
  // 3 samples: tokens [0, 4), [4, 10), [10, 12); label positions 1,2,3 | 5 | 10,11.
  const auto cu = torch::tensor(std::vector<int64_t>{0, 4, 10, 12});
  const auto pos = torch::tensor(std::vector<int64_t>{1, 2, 3, 5, 10, 11});
  const auto loss = torch::tensor(std::vector<float>{1, 2, 3, 4, 5, 7});
  const auto token = reduce_loss(loss, pos, cu, LossReduction::kToken);
  CHECK(token.weighted_sum.item<double>() == Approx(22.0));
  CHECK(token.normaliser == 6.0);
  const auto sample = reduce_loss(loss, pos, cu, LossReduction::kSample);
  // Sample means 2, 4, 6: weighted sum 6/3 + 4/1 + 12/2 = 12 over 3 samples -> 4.
  CHECK(sample.weighted_sum.item<double>() == Approx(12.0));
  CHECK(sample.normaliser == Approx(3.0));
  const auto square = reduce_loss(loss, pos, cu, LossReduction::kSquare);
  CHECK(square.weighted_sum.item<double>() == Approx(6 / std::sqrt(3.0) + 4 + 12 / std::sqrt(2.0)));
  CHECK(square.normaliser == Approx(std::sqrt(3.0) + 1 + std::sqrt(2.0)));
  // A sample without labels contributes nothing (and is not counted by sample).
  const auto cu4 = torch::tensor(std::vector<int64_t>{0, 4, 10, 12, 15});
  CHECK(loss_normaliser(pos, cu4, LossReduction::kSample) == Approx(3.0));
  CHECK(parse_loss_reduction("square") == LossReduction::kSquare);
  CHECK_THROWS_WITH(parse_loss_reduction("mean"),
                    Catch::Contains("loss.reduction: expected token | sample | square"));
  CHECK_THROWS_WITH(token_weights(torch::tensor(std::vector<int64_t>{12}), cu,
                                  LossReduction::kToken),
                    Catch::Contains("positions in [0, 12)"));
}

TEST_CASE("packed and per-sample runs give equal losses and gradients under each reduction",
          "[models][loss]") {
  const auto reduction =
      GENERATE(LossReduction::kToken, LossReduction::kSample, LossReduction::kSquare);
  const std::vector<SampleSpec> specs{{2, 23, 7}, {0, 17, 2}, {1, 30, 12}};
  const PackBatch pack = make_pack(tiny_preset(), specs, 3);
  // One intra-op thread: with 2, LibTorch 2.11's CPU attention backward gave gradients up to
  // 2.3e-4 apart from run to run (3 of 8 runs over the 2e-5 bar; 0 of 6 with one thread).
  // Investigated in the session note of 6 Dec; the bar checks packing, not that kernel.
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);

  Vlm packed(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId).with_seed(3));
  fill_golden(packed);
  UnitState out = packed->forward(pack);
  const ReducedLoss r = reduce_loss(out.token_loss, out.label_positions, out.cu_seqlens, reduction);
  const torch::Tensor packed_loss = r.weighted_sum / r.normaliser;
  packed_loss.backward();

  // Per-sample micro-batches: the normaliser is known from the labels before any forward.
  Vlm single(tiny_preset(), VlmOptions{}.with_img_context_id(kImgContextId).with_seed(3));
  fill_golden(single);
  std::vector<PackBatch> parts;
  double normaliser = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    parts.push_back(sample_of(pack, specs, i));
    const auto targets = label_targets(parts.back().labels, parts.back().cu_seqlens);
    normaliser += loss_normaliser(targets.first, parts.back().cu_seqlens, reduction);
  }
  CHECK(normaliser == Approx(r.normaliser).epsilon(1e-12));
  double total = 0;
  for (const auto& p : parts) {
    UnitState one = single->forward(p);
    const torch::Tensor mb =
        reduce_loss(one.token_loss, one.label_positions, one.cu_seqlens, reduction).weighted_sum /
        normaliser;
    total += mb.item<double>();
    mb.backward();
  }
  torch::set_num_threads(threads);
  CHECK(total == Approx(packed_loss.item<double>()).epsilon(1e-5));
  const auto g_single = grads_of(*single);
  for (const auto& [name, g] : grads_of(*packed)) {
    INFO(name);
    CHECK(rel_err(g, g_single.at(name)) < 2e-5);
  }
  // The reductions really differ on this pack (unequal label counts 7, 2, 12).
  if (reduction != LossReduction::kToken) {
    const auto t =
        reduce_loss(out.token_loss, out.label_positions, out.cu_seqlens, LossReduction::kToken);
    CHECK(std::abs((t.weighted_sum / t.normaliser).item<double>() - packed_loss.item<double>()) >
          1e-4);
  }
}
