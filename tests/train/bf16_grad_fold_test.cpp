// bf16 gradients folded into the optimizer's fp32 main gradient as autograd produces them
// (post-accumulate-grad hooks, train/distributed_optimizer.h) against folding after each
// backward (OptimizerOptions::fold_in_backward off: the path before, and the one on LibTorch
// < 2.1). The tiny VLM in bf16, 2 micro-batches through the stage executor as the trainer runs
// them (accumulate_grads() after every Backward, BackwardInput and BackwardWeight), under 1F1B,
// ZB-H1 (the deferred W fold through WeightGradStore::run), with every unit recomputed, and
// with the tied LM head sharing the embedding on one stage: no parameter holds a .grad at any
// of those points, the main gradients are bitwise equal (the tied embedding with llm_embed
// recomputed within bf16 rounding: the hook sums its two parts in fp32), after the first
// backward the bytes alive are exactly the old path's bf16 gradients fewer (2 per parameter
// under 1F1B), and the step's peak is lower. Measured on the tiny VLM (1,189,568 parameters),
// 1F1B: 2,379,136 B fewer after the backward, peak 6,530,944 -> 4,227,200 B.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "../models/model_test_util.h"
#include "core/paths.h"
#include "models/accumulate_grad_hook.h"
#include "models/weight_grad_store.h"
#include "pipeline/stage_executor.h"
#include "profile/memory_meter.h"
#include "schedule/schedules.h"
#include "train/distributed_optimizer.h"

using namespace omnibal;
using train::DistributedOptimizer;
using train::OptimizerOptions;

namespace {

/// One model and schedule to compare the two fold paths on.
struct Variant {
  std::string name;
  std::string preset;  ///< name or path (load_model_preset)
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  bool recompute = false;  ///< every unit but the loss head
  /// A parameter that one backward reaches through two AccumulateGrad calls (the tied
  /// embedding at PP 1 with llm_embed recomputed: distributed_optimizer.h): the hook adds the
  /// two parts in fp32 where folding after the backward added their bf16 sum, so it is equal
  /// within bf16 rounding, not bitwise.
  std::string inexact;
};

/// What one step of 2 micro-batches left.
struct FoldRun {
  std::map<std::string, torch::Tensor> main_grad;  ///< fp32, by parameter name
  int64_t elements = 0;                            ///< trainable parameter elements
  int backwards = 0;                               ///< after_backward calls
  int grads_held = 0;       ///< parameters holding a .grad at after_backward, summed over calls
  int64_t held_first = 0;   ///< bytes of those .grad at the first after_backward
  int64_t alive_first = 0;  ///< tensor bytes allocated in the step and alive at the first one
  int64_t peak = 0;         ///< peak tensor bytes allocated in the step
};

/// The tiny VLM of `v` in bf16 as one stage, its parameters named as the trainer names them.
std::vector<models::UnitPtr> bf16_model(const Variant& v, DistributedOptimizer::NamedParams& out) {
  const ModelPreset preset = load_model_preset(v.preset);
  const auto options = models::VlmOptions{}
                           .with_img_context_id(models::testing::kImgContextId)
                           .with_seed(7)
                           .with_dtype(torch::kBFloat16);
  const auto n = static_cast<int64_t>(omnibal::unit_names(preset).size());
  auto units = models::make_units(preset, options, 0, n);
  for (const auto& u : units) {
    u->set_recompute(v.recompute);
    for (const auto& np : u->named_parameters())
      out.emplace_back(u->unit_name() + "." + np.key(), np.value());
  }
  return units;
}

/// One step of 2 micro-batches of `v` with the given fold path; see FoldRun.
FoldRun run_step(const Variant& v, bool fold_in_backward) {
  DistributedOptimizer::NamedParams params;
  const auto units = bf16_model(v, params);
  const ModelPreset preset = load_model_preset(v.preset);
  OptimizerOptions o;
  o.precision = Precision::kBf16;
  o.fold_in_backward = fold_in_backward;
  DistributedOptimizer opt(params, o, nullptr, {});
  REQUIRE(opt.folds_in_backward() == fold_in_backward);
  using models::testing::SampleSpec;
  const std::vector<models::PackBatch> packs = {
      models::testing::make_pack(preset, {SampleSpec{2, 20, 6}, SampleSpec{0, 12, 4}}, 11),
      models::testing::make_pack(preset, {SampleSpec{1, 16, 5}}, 12)};
  FoldRun r;
  for (const auto& [name, p] : params) r.elements += p.numel();
  pipeline::StageExecutor stage(units, 0, 1, nullptr);
  profile::MemoryMeter meter(torch::kCPU);  // process-wide counts: taken from here on
  meter.reset_peak();
  const int64_t base = meter.current_bytes();
  pipeline::StepHooks hooks;
  hooks.after_backward = [&](int) {  // as the trainer's (train/trainer.cpp)
    for (const auto& [name, p] : params) {
      if (!p.grad().defined()) continue;
      ++r.grads_held;
      if (r.backwards == 0) r.held_first += static_cast<int64_t>(p.grad().nbytes());
    }
    if (r.backwards++ == 0) r.alive_first = meter.current_bytes() - base;
    opt.accumulate_grads();
  };
  opt.zero_grad();
  stage.run_step(schedule::build_schedule(v.schedule, 1, 2)[0], packs, 1e-2, hooks);
  r.peak = meter.peak_bytes() - base;
  for (const auto& name : opt.names()) r.main_grad[name] = opt.reduced_grad(name).clone();
  return r;
}

/// ||a - b|| / ||b|| in fp64.
double rel_l2(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor r = b.to(torch::kFloat64);
  return (a.to(torch::kFloat64) - r).norm().item<double>() / (r.norm().item<double>() + 1e-30);
}

/// Both fold paths on `v`: the same main gradients, no .grad left, the bytes saved.
void check_variant(const Variant& v) {
  INFO(v.name);
  const FoldRun before = run_step(v, false), now = run_step(v, true);
  CHECK(now.backwards == (v.schedule == PipelineSchedule::kZbH1 ? 4 : 2));
  CHECK(before.backwards == now.backwards);
  CHECK(before.grads_held > 0);  // folded after the backward: they lived until then
  CHECK(now.grads_held == 0);    // folded in it: no bf16 gradient is left at any of those points
  REQUIRE(now.main_grad.size() == before.main_grad.size());
  int nonzero = 0;
  for (const auto& [name, g] : before.main_grad) {
    INFO(name);
    if (name == v.inexact) CHECK(rel_l2(now.main_grad.at(name), g) < 0x1p-8);  // measured 1.6e-3
    else CHECK(torch::equal(now.main_grad.at(name), g));
    nonzero += g.abs().max().item<float>() > 0 ? 1 : 0;
  }
  CHECK(nonzero == static_cast<int>(before.main_grad.size()));  // every parameter got one
  INFO(now.elements << " parameters; first backward: bf16 gradients " << before.held_first
                    << " B, alive " << before.alive_first << " -> " << now.alive_first
                    << " B; step peak " << before.peak << " -> " << now.peak << " B");
  CHECK(before.alive_first - now.alive_first == before.held_first);
  if (v.schedule == PipelineSchedule::k1F1B) CHECK(before.held_first == 2 * now.elements);
  CHECK(now.peak < before.peak);
}

}  // namespace

TEST_CASE("optimizer: bf16 gradients fold into the main gradient in the backward, bitwise",
          "[train][bf16]") {
  if (!models::compat::has_post_accumulate_grad_hook()) {
    WARN("LibTorch < 2.1: no post-accumulate-grad hooks; bf16 gradients fold after the backward");
    return;
  }
  const std::string tied = source_dir() + "/tests/integration/tiny-tied.yaml";
  const auto k1F1B = PipelineSchedule::k1F1B, kZbH1 = PipelineSchedule::kZbH1;
  for (const Variant& v : std::vector<Variant>{{"1F1B", "tiny"},
                                               {"ZB-H1", "tiny", kZbH1},
                                               {"1F1B recompute", "tiny", k1F1B, true},
                                               {"1F1B tied head", tied},
                                               {"ZB-H1 tied head", tied, kZbH1},
                                               {"1F1B tied head recompute", tied, k1F1B, true,
                                                "llm_embed.tok_embeddings.weight"}})
    check_variant(v);
}

TEST_CASE("optimizer: a deferred W filing one weight twice folds their sum once, as autograd",
          "[train][bf16]") {
  // y = W (W x): one key files two dW of W. Folding after the W adds their bf16 sum in .grad;
  // the hook must run after the weight's last triple to add the same.
  const auto fold = [](bool in_backward) {
    torch::manual_seed(3);
    auto w = torch::randn({8, 8}).to(torch::kBFloat16).requires_grad_(true);
    const auto x = torch::randn({5, 8}).to(torch::kBFloat16);
    OptimizerOptions o;
    o.precision = Precision::kBf16;
    o.fold_in_backward = in_backward;
    DistributedOptimizer opt({{"w", w}}, o, nullptr, {});
    auto store = c10::make_intrusive<models::WeightGradStore>();
    {
      models::WeightGradStore::Recording recording(store, 0);
      models::linear_layer(models::linear_layer(x, w), w).pow(2).sum().backward();
    }
    CHECK(store->run(0) == 2);
    CHECK(w.grad().defined() != opt.folds_in_backward());
    opt.accumulate_grads();
    CHECK_FALSE(w.grad().defined());
    return opt.reduced_grad("w").clone();
  };
  const torch::Tensor now = fold(true), before = fold(false);
  CHECK(torch::equal(now, before));
  CHECK(now.abs().max().item<float>() > 0);
}

TEST_CASE("optimizer: bf16 fold hooks leave with the optimizer", "[train][bf16]") {
  auto p = torch::ones({4}, torch::kBFloat16).requires_grad_(true);
  OptimizerOptions o;
  o.precision = Precision::kBf16;
  {
    DistributedOptimizer opt({{"p", p}}, o, nullptr, {});
    (p * 3).sum().backward();
    CHECK(p.grad().defined() != opt.folds_in_backward());
    opt.accumulate_grads();
    CHECK_FALSE(p.grad().defined());
    CHECK(torch::equal(opt.reduced_grad("p"), torch::full({4}, 3.0f)));
    CHECK(opt.folds_in_backward() == models::compat::has_post_accumulate_grad_hook());
  }
  (p * 3).sum().backward();  // plain autograd again: the gradient stays in .grad
  REQUIRE(p.grad().defined());
  CHECK(torch::equal(p.grad(), torch::full({4}, 3.0f, torch::kBFloat16)));
}
