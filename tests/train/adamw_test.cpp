#include <catch2/catch.hpp>

#include "train/adamw.h"

using omnibal::train::AdamW;
using omnibal::train::AdamWOptions;

TEST_CASE("AdamW equals torch::optim::AdamW with decay on matrices only", "[train]") {
  torch::manual_seed(3);
  const auto w0 = torch::randn({4, 3}), b0 = torch::randn({3});
  auto w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  auto rw = w0.clone().requires_grad_(true), rb = b0.clone().requires_grad_(true);
  AdamWOptions o;
  o.weight_decay = 0.1;
  AdamW ours({{"w", w}, {"b", b}}, o);
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
    ours.step(0.01);
    ref.step();
  }
  CHECK(ours.steps() == 4);
  CHECK(torch::allclose(w, rw, 1e-5, 1e-6));
  CHECK(torch::allclose(b, rb, 1e-5, 1e-6));
  CHECK_FALSE(torch::allclose(w, w0));
}

TEST_CASE("AdamW state round-trips by name and rejects a missing or mis-shaped entry", "[train]") {
  auto w = torch::ones({2, 2}).requires_grad_(true);
  auto frozen = torch::ones({2});  // requires_grad false: not optimised, no state
  AdamW a({{"w", w}, {"frozen", frozen}}, {});
  CHECK(a.state_names() == std::vector<std::string>{"w#exp_avg", "w#exp_avg_sq"});
  w.mutable_grad() = torch::full({2, 2}, 0.5);
  a.step(0.1);
  AdamW b({{"w", torch::ones({2, 2}).requires_grad_(true)}}, {});
  b.load_state_tensors(a.state_tensors());
  CHECK(torch::equal(b.state_tensors().at("w#exp_avg"), a.state_tensors().at("w#exp_avg")));
  CHECK(torch::allclose(a.state_tensors().at("w#exp_avg"), torch::full({2, 2}, 0.05)));
  auto state = a.state_tensors();
  state.erase("w#exp_avg_sq");
  CHECK_THROWS_WITH(b.load_state_tensors(state), Catch::Contains("w#exp_avg_sq"));
  state["w#exp_avg_sq"] = torch::zeros({3});
  CHECK_THROWS_WITH(b.load_state_tensors(state), Catch::Contains("shape"));
}
