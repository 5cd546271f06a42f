// models/param_storage.h: a parameter's memory freed after the forward and restored (with the
// same values) before the backward gives exactly the gradients of a plain run, which is what
// train.shard full relies on; writing the values back through a versioned view instead trips
// autograd's in-place check.
#include "models/param_storage.h"

#include <catch2/catch.hpp>

#include <torch/torch.h>

namespace models = omnibal::models;

namespace {

/// A linear layer whose weight and bias are views of one flat buffer, as sharded units hold them.
struct FlatLinear {
  torch::Tensor flat, weight, bias;
  explicit FlatLinear(const torch::Tensor& w, const torch::Tensor& b) {
    flat = torch::cat({w.reshape(-1), b.reshape(-1)}).clone();
    weight = flat.narrow(0, 0, w.numel()).view(w.sizes()).detach().requires_grad_(true);
    bias = flat.narrow(0, w.numel(), b.numel()).view(b.sizes()).detach().requires_grad_(true);
  }
  torch::Tensor operator()(const torch::Tensor& x) const {
    return torch::tanh(torch::nn::functional::linear(x, weight, bias));
  }
};

}  // namespace

TEST_CASE("a parameter freed after the forward and restored before the backward keeps its grads",
          "[models][param_storage]") {
  torch::manual_seed(7);
  const torch::Tensor w = torch::randn({3, 4}), b = torch::randn({3});
  const torch::Tensor x = torch::randn({5, 4}).requires_grad_(true);
  const torch::Tensor x_ref = x.detach().clone().requires_grad_(true);

  FlatLinear ref(w, b);
  ref(x_ref).pow(2).sum().backward();

  FlatLinear lin(w, b);
  const torch::Tensor saved = lin.flat.clone();
  const size_t nbytes = lin.flat.storage().nbytes();
  torch::Tensor loss = lin(x).pow(2).sum();
  models::free_storage(lin.flat);
  CHECK(models::storage_freed(lin.weight));
  CHECK(lin.weight.sizes() == w.sizes());  // views keep their shapes
  models::restore_storage(lin.flat, nbytes);
  CHECK_FALSE(models::storage_freed(lin.weight));
  {
    torch::NoGradGuard no_grad;
    models::unversioned_alias(lin.flat).copy_(saved);
  }
  loss.backward();
  CHECK(torch::equal(lin.weight.grad(), ref.weight.grad()));
  CHECK(torch::equal(lin.bias.grad(), ref.bias.grad()));
  CHECK(torch::equal(x.grad(), x_ref.grad()));
}

TEST_CASE("writing restored values through a versioned view trips autograd's in-place check",
          "[models][param_storage]") {
  torch::manual_seed(8);
  FlatLinear lin(torch::randn({3, 4}), torch::randn({3}));
  const torch::Tensor saved = lin.flat.clone();
  const size_t nbytes = lin.flat.storage().nbytes();
  // x requires grad, so the backward needs the weight (dx = dy W) and autograd saved it.
  torch::Tensor loss = lin(torch::randn({2, 4}).requires_grad_(true)).pow(2).sum();
  models::free_storage(lin.flat);
  models::restore_storage(lin.flat, nbytes);
  {
    torch::NoGradGuard no_grad;
    lin.weight.detach().copy_(saved.narrow(0, 0, 12).view({3, 4}));  // shares the version
  }
  CHECK_THROWS_WITH(loss.backward(), Catch::Contains("modified by an inplace operation"));
}

TEST_CASE("free and restore are idempotent and refuse foreign memory", "[models][param_storage]") {
  torch::Tensor t = torch::ones({8});
  const size_t nbytes = t.storage().nbytes();
  models::free_storage(t);
  models::free_storage(t);
  CHECK(t.storage().nbytes() == 0);
  models::restore_storage(t, nbytes);
  models::restore_storage(t, nbytes);
  CHECK(t.storage().nbytes() == nbytes);
  float data[4] = {1, 2, 3, 4};
  torch::Tensor foreign = torch::from_blob(data, {4});
  models::free_storage(foreign);
  CHECK_THROWS_WITH(models::restore_storage(foreign, 16), Catch::Contains("no allocator"));
}
