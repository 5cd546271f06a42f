// The optimizer at DP 2 (mpiexec -n 2), without the trainer: ZeRO-1 against plain data
// parallelism over 3 steps on different per-rank gradients (fp32 and bf16), and the state
// gathered from ZeRO-1 shards loading into one unsharded replica and back into shards.
#include <catch2/catch.hpp>

#include "../comm/mpi_test_support.h"
#include "train/distributed_optimizer.h"

using omnibal::Precision;
using omnibal::train::DistributedOptimizer;
using omnibal::train::DpShard;
using omnibal::train::OptimizerOptions;
using NamedParams = DistributedOptimizer::NamedParams;

namespace {

/// Three parameters (a matrix, an odd-sized vector, a tiny one below the DP size) in `dtype`.
NamedParams make_params(torch::Dtype dtype) {
  torch::manual_seed(7);
  NamedParams p;
  p.emplace_back("w", torch::randn({9, 5}).to(dtype).requires_grad_(true));
  p.emplace_back("b", torch::randn({7}).to(dtype).requires_grad_(true));
  p.emplace_back("s", torch::randn({1}).to(dtype).requires_grad_(true));
  return p;
}

/// Rank `rank`'s gradient of step `step` for each parameter (different on each rank).
void backward(const NamedParams& params, int rank, int step) {
  torch::Tensor loss = torch::zeros({}, torch::kFloat);
  for (const auto& [name, p] : params)
    loss = loss + (p.to(torch::kFloat) * (rank + 1) * (step + 1)).sin().sum();
  loss.backward();
}

/// Three steps of `opt` over `params`; returns the fp32 master weights by name.
std::map<std::string, torch::Tensor> train(DistributedOptimizer& opt, const NamedParams& params,
                                           int rank) {
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    backward(params, rank, step);
    opt.accumulate_grads();
    opt.reduce_grads();
    opt.clip(opt.grad_norm(nullptr), 0.5);
    opt.step(0.01);
  }
  return opt.state_tensors();
}

}  // namespace

TEST_CASE("optimizer at DP 2: ZeRO-1 equals plain DP; state moves between shards and replicas",
          "[train][mpi]") {
  auto dp = omnibal::comm::testing::world_comm();
  REQUIRE(dp->size() == 2);
  const int r = dp->rank();
  for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
    INFO(omnibal::choice_name(precision));
    const torch::Dtype dtype = omnibal::train::precision_dtype(precision);
    OptimizerOptions o;
    o.precision = precision;
    o.bucket_bytes = 40 * 4;  // several buckets, one of them padded
    const NamedParams plain_params = make_params(dtype);
    DistributedOptimizer plain(plain_params, o, dp.get(), DpShard{r, 2});
    const auto want = train(plain, plain_params, r);
    o.zero1 = true;
    const NamedParams zero_params = make_params(dtype);
    DistributedOptimizer zero(zero_params, o, dp.get(), DpShard{r, 2});
    const auto got = train(zero, zero_params, r);
    REQUIRE(got.size() == want.size());
    for (const auto& [name, t] : want) {
      INFO(name);
      CHECK(torch::allclose(got.at(name), t, 1e-6, 1e-7));  // master weights and moments
    }
    for (size_t i = 0; i < plain_params.size(); ++i)  // the gathered parameters everywhere
      CHECK(torch::allclose(zero_params[i].second.to(torch::kFloat),
                            plain_params[i].second.to(torch::kFloat), 1e-6, 1e-7));
    CHECK(zero.state_bytes() * 2 == plain.state_bytes());  // both pad buckets to DP multiples

    // The gathered state into one unsharded fp32 replica, and back into fresh shards.
    const NamedParams one_params = make_params(torch::kFloat);
    DistributedOptimizer one(one_params, {}, nullptr, {});
    one.load_state_tensors(got);
    for (const auto& [name, t] : one.state_tensors()) CHECK(torch::equal(t, got.at(name)));
    const NamedParams again_params = make_params(dtype);
    DistributedOptimizer again(again_params, o, dp.get(), DpShard{r, 2});
    again.load_state_tensors(one.state_tensors());
    for (const auto& [name, t] : again.state_tensors()) CHECK(torch::equal(t, got.at(name)));
    // A non-writing rank keeps nothing of the gathered state (collective: both ranks call).
    CHECK(again.state_tensors(/*keep=*/r == 0).empty() == (r != 0));
  }
}
