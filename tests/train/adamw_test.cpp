// The optimizer in one process: AdamW against LibTorch's, fp32 gradient accumulation of bf16
// gradients, the bucket layout (a tied weight alone, ZeRO-1 shards), state by name across
// precisions and shard counts, and the state bytes ZeRO-1 saves. DP-parallel equivalence (plain
// vs ZeRO-1 at DP 2, PP 2 x DP 2) runs end to end in tests/integration (train_zero1).
#include <catch2/catch.hpp>

#include "train/distributed_optimizer.h"

using omnibal::Precision;
using omnibal::train::DistributedOptimizer;
using omnibal::train::DpShard;
using omnibal::train::OptimizerOptions;

TEST_CASE("optimizer: fp32 AdamW equals torch::optim::AdamW with decay on matrices only",
          "[train]") {
  torch::manual_seed(3);
  const auto w0 = torch::randn({4, 3}), b0 = torch::randn({3});
  auto w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  auto rw = w0.clone().requires_grad_(true), rb = b0.clone().requires_grad_(true);
  OptimizerOptions o;
  o.adam.weight_decay = 0.1;
  o.bucket_bytes = 16;  // several buckets
  DistributedOptimizer ours({{"w", w}, {"b", b}}, o, nullptr, {});
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      std::vector<torch::Tensor>{rw},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(0.01).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  groups.emplace_back(
      std::vector<torch::Tensor>{rb},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(0.01).betas({0.9, 0.95}).eps(1e-8).weight_decay(0)));
  torch::optim::AdamW ref(groups, torch::optim::AdamWOptions(0.01));
  const auto x = torch::randn({5, 4});
  for (int step = 0; step < 4; ++step) {
    ours.zero_grad();
    ref.zero_grad();
    (x.matmul(w) + b).pow(2).sum().backward();
    (x.matmul(rw) + rb).pow(2).sum().backward();
    ours.reduce_grads();
    ours.step(0.01);
    ref.step();
  }
  CHECK(ours.steps() == 4);
  CHECK(torch::allclose(w, rw, 1e-5, 1e-6));
  CHECK(torch::allclose(b, rb, 1e-5, 1e-6));
  CHECK_FALSE(torch::allclose(w, w0));
  // The model's tensors are views of the optimizer's buffer: they moved with the update.
  CHECK(torch::equal(ours.state_tensors().at("w"), w));
}

TEST_CASE("optimizer: bf16 gradients are accumulated in fp32 across micro-batches", "[train]") {
  auto p = torch::ones({8}, torch::kBFloat16).requires_grad_(true);
  OptimizerOptions o;
  o.precision = Precision::kBf16;
  DistributedOptimizer opt({{"p", p}}, o, nullptr, {});
  opt.zero_grad();
  // 1 + 256 micro-batches of 2^-8: in fp32 the sum is 2 exactly; summed in bf16 (8 significant
  // bits) every 1 + 2^-8 rounds back to 1 and the result would stay 1.
  const auto x = torch::ones({8}, torch::kBFloat16);
  (p * x).sum().backward();
  opt.accumulate_grads();
  CHECK_FALSE(p.grad().defined());  // the bf16 gradient is folded in and freed
  for (int k = 0; k < 256; ++k) {
    (p * x * (1.0 / 256)).sum().backward();
    opt.accumulate_grads();
  }
  const auto g = opt.reduced_grad("p");
  REQUIRE(g.defined());
  CHECK(g.scalar_type() == torch::kFloat32);
  CHECK(torch::equal(g, torch::full({8}, 2.0f)));
  // The update runs on fp32 master weights: a step far below bf16's spacing at 1 still moves
  // the master, and the bf16 parameter follows once the master crosses a bf16 value.
  const auto master0 = opt.state_tensors().at("p").clone();
  opt.step(1e-4);
  const auto master1 = opt.state_tensors().at("p");
  CHECK(master1.scalar_type() == torch::kFloat32);
  CHECK(torch::allclose(master0 - master1, torch::full({8}, 1e-4f), 1e-3, 0));
  CHECK(torch::equal(p.to(torch::kFloat32), torch::ones({8})));  // 1 - 1e-4 rounds to 1 in bf16
}

TEST_CASE("optimizer: a tied weight gets its own bucket, ZeRO-1 shards each bucket", "[train]") {
  auto a = torch::zeros({5}).requires_grad_(true);
  auto tied = torch::zeros({3, 3}).requires_grad_(true);
  auto c = torch::zeros({7}).requires_grad_(true);
  OptimizerOptions o;
  o.zero1 = true;
  o.own_bucket = {"tied"};
  // DP rank 1 of 2 (layout only: no reduction is run).
  DistributedOptimizer opt({{"a", a}, {"tied", tied}, {"c", c}}, o, nullptr, DpShard{1, 2});
  CHECK(opt.names() == std::vector<std::string>{"tied", "a", "c"});
  // Buckets: [tied 9 -> 10] [a 5 + c 7 = 12]; rank 1 holds elements 5..9 of the first and 6..11
  // of the second: 5 + 6 = 11 elements, 2 fp32 moments each.
  CHECK(opt.state_bytes() == 11 * 2 * 4);
  CHECK(opt.reduced_grad("tied").numel() == 4);  // elements 5..8 of the 9
  CHECK_FALSE(opt.reduced_grad("a").defined());  // a is elements 0..4: all on rank 0
  CHECK(opt.reduced_grad("c").numel() == 6);
  CHECK(opt.main_grad_bytes() == 22 * 4);
}

TEST_CASE("optimizer: ZeRO-1 at DP 2 holds half the state of a full replica", "[train]") {
  torch::manual_seed(1);
  const auto make = [] {
    return std::vector<std::pair<std::string, torch::Tensor>>{
        {"w", torch::randn({64, 32}).requires_grad_(true)},
        {"b", torch::randn({32}).requires_grad_(true)},
        {"frozen", torch::randn({100})}};  // no state
  };
  for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
    OptimizerOptions o;
    o.precision = precision;
    auto params = make();
    if (precision == Precision::kBf16)
      for (auto& [n, p] : params)
        p = p.detach().to(torch::kBFloat16).requires_grad_(p.requires_grad());
    DistributedOptimizer full(params, o, nullptr, DpShard{0, 2});
    o.zero1 = true;
    DistributedOptimizer r0(params, o, nullptr, DpShard{0, 2});
    DistributedOptimizer r1(params, o, nullptr, DpShard{1, 2});
    const int64_t per = precision == Precision::kBf16 ? 12 : 8;  // bytes per parameter
    INFO(omnibal::choice_name(precision));
    CHECK(full.state_bytes() == (64 * 32 + 32) * per);
    CHECK(r0.state_bytes() * 2 == full.state_bytes());
    CHECK(r1.state_bytes() == r0.state_bytes());
  }
}

TEST_CASE("optimizer: state by name loads across precision and ZeRO-1 shards", "[train]") {
  torch::manual_seed(5);
  const auto w0 = torch::randn({6, 4});
  auto w = w0.clone().requires_grad_(true);
  DistributedOptimizer a({{"w", w}}, {}, nullptr, {});
  w.grad().fill_(0.5);
  a.step(0.1);
  const auto state = a.state_tensors();
  CHECK(a.state_names() == std::vector<std::string>{"w", "w#exp_avg", "w#exp_avg_sq"});
  CHECK(torch::allclose(state.at("w#exp_avg"), torch::full({6, 4}, 0.05)));
  // Into rank 1 of a ZeRO-1 pair in bf16: the fp32 master keeps every bit, the bf16 parameter
  // is its rounding, and the shard holds the second half of the moments.
  auto wb = torch::zeros({6, 4}, torch::kBFloat16).requires_grad_(true);
  OptimizerOptions o;
  o.precision = Precision::kBf16;
  o.zero1 = true;
  DistributedOptimizer b({{"w", wb}}, o, nullptr, DpShard{1, 2});
  b.load_state_tensors(state);
  CHECK(torch::equal(wb, state.at("w").to(torch::kBFloat16)));
  // A single-rank gather returns the shard's own part only; compare that part.
  OptimizerOptions o1 = o;
  o1.zero1 = false;
  auto wc = torch::zeros({6, 4}, torch::kBFloat16).requires_grad_(true);
  DistributedOptimizer c({{"w", wc}}, o1, nullptr, {});
  c.load_state_tensors(state);
  const auto back = c.state_tensors();
  CHECK(torch::equal(back.at("w"), state.at("w")));  // fp32 master, bitwise
  CHECK(torch::equal(back.at("w#exp_avg_sq"), state.at("w#exp_avg_sq")));
  auto missing = state;
  missing.erase("w#exp_avg_sq");
  CHECK_THROWS_WITH(c.load_state_tensors(missing), Catch::Contains("w#exp_avg_sq"));
  missing["w#exp_avg_sq"] = torch::zeros({3});
  CHECK_THROWS_WITH(c.load_state_tensors(missing), Catch::Contains("shape"));
  // A parameter of the wrong dtype for the precision is refused.
  auto wrong = torch::zeros({2}).requires_grad_(true);
  CHECK_THROWS_WITH(DistributedOptimizer({{"x", wrong}}, o, nullptr, {}),
                    Catch::Contains("expected bfloat16"));
}
