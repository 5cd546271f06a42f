// The optimizer at DP 2 (mpiexec -n 2), without the trainer: ZeRO-1 against plain data
// parallelism over 3 steps on different per-rank gradients (fp32 and bf16), the state
// gathered from ZeRO-1 shards loading into one unsharded replica and back into shards, and a
// step with a NaN gradient on one rank skipped on both (train/nonfinite_guard.h): nothing
// changes, and the steps after it equal a run without it, bitwise, with and without ZeRO-1.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <optional>

#include "../comm/mpi_test_support.h"
#include "core/error.h"
#include "train/distributed_optimizer.h"
#include "train/nonfinite_guard.h"

using omnibal::Precision;
using omnibal::train::DistributedOptimizer;
using omnibal::train::DpShard;
using omnibal::train::NonFiniteGuard;
using omnibal::train::OptimizerOptions;
using omnibal::train::StepVerdict;
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

/// Rank `rank`'s gradient of step `step` for each parameter (different on each rank); with
/// `nan_b`, parameter "b"'s is NaN: set in the backward by a hook on "b" (a bf16 .grad is folded
/// into the main gradient and gone after the backward), as a quiet NaN of b's dtype (a NaN
/// made by the backward's operations came out negative in bf16 and printed as -nan).
void backward(const NamedParams& params, int rank, int step, bool nan_b = false) {
  torch::Tensor loss = torch::zeros({}, torch::kFloat);
  for (const auto& [name, p] : params)
    loss = loss + (p.to(torch::kFloat) * (rank + 1) * (step + 1)).sin().sum();
  const torch::Tensor& b = params.at(1).second;
  std::optional<unsigned> hook;
  if (nan_b)
    hook = b.register_hook([](const torch::Tensor& g) { return torch::full_like(g, NAN); });
  loss.backward();
  if (hook) b.remove_hook(*hook);
}

/// Three steps of `opt` over `params`; returns the fp32 master weights by name.
std::map<std::string, torch::Tensor> train(DistributedOptimizer& opt, const NamedParams& params,
                                           int rank) {
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    backward(params, rank, step);
    opt.accumulate_grads();
    opt.reduce_grads();
    opt.clip(opt.grad_norm(), 0.5);
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

TEST_CASE("optimizer at DP 2: a skipped non-finite step changes nothing; the run goes on equal",
          "[train][mpi]") {
  auto world = omnibal::comm::testing::world_comm();
  REQUIRE(world->size() == 2);
  const int r = world->rank();
  const omnibal::comm::ProcessGrid grid(omnibal::comm::GridShape{2, 1, 1}, 2);
  for (const Precision precision : {Precision::kFp32, Precision::kBf16})
    for (const bool zero1 : {false, true}) {
      INFO(omnibal::choice_name(precision) << (zero1 ? " zero1" : ""));
      OptimizerOptions o;
      o.precision = precision;
      o.zero1 = zero1;
      o.bucket_bytes = 40 * 4;
      const torch::Dtype dtype = omnibal::train::precision_dtype(precision);
      const NamedParams ref_params = make_params(dtype);
      DistributedOptimizer ref(ref_params, o, world.get(), DpShard{r, 2});
      const auto want = train(ref, ref_params, r);

      // The same 3 steps with a step between the first two whose gradient is NaN on rank 1 only.
      const NamedParams params = make_params(dtype);
      DistributedOptimizer opt(params, o, world.get(), DpShard{r, 2});
      NonFiniteGuard guard(omnibal::OnNonFinite::kSkip, 1, 4, grid);
      for (int step = 0; step < 3; ++step) {
        if (step == 1) {
          const auto before = opt.state_tensors();
          std::vector<torch::Tensor> values;
          for (const auto& [name, p] : params) values.push_back(p.detach().clone());
          opt.zero_grad();
          backward(params, r, step, /*nan_b=*/r == 1);
          opt.accumulate_grads();
          opt.reduce_grads();
          const double norm = opt.grad_norm();
          CHECK(std::isnan(norm));
          const StepVerdict v = guard.check(4, {false, 0.0, opt.local_grad_sq(), norm}, *world);
          REQUIRE(v == StepVerdict::kSkip);  // on both ranks, though only rank 1 saw the NaN
          CHECK_THROWS_WITH(opt.clip(norm, 1.0), Catch::Contains("the gradient norm is nan"));
          opt.skip_step();
          CHECK(opt.steps() == 1);
          for (const auto& [name, t] : opt.state_tensors()) CHECK(torch::equal(t, before.at(name)));
          for (size_t i = 0; i < params.size(); ++i)
            CHECK(torch::equal(params[i].second, values[i]));
        }
        opt.zero_grad();
        backward(params, r, step);
        opt.accumulate_grads();
        opt.reduce_grads();
        opt.clip(opt.grad_norm(), 0.5);
        opt.step(0.01);
      }
      for (const auto& [name, t] : opt.state_tensors()) CHECK(torch::equal(t, want.at(name)));
      for (size_t i = 0; i < params.size(); ++i)
        CHECK(torch::equal(params[i].second, ref_params[i].second));
    }
}

TEST_CASE("non-finite guard at 2 ranks: a NaN loss on one rank stops both with one message",
          "[train][mpi]") {
  auto world = omnibal::comm::testing::world_comm();
  REQUIRE(world->size() == 2);
  const int r = world->rank();
  // PP 2: rank 1 is the last stage, it holds the loss.
  NonFiniteGuard guard(omnibal::OnNonFinite::kStop, 3, 10,
                       omnibal::comm::ProcessGrid(omnibal::comm::GridShape{1, 2, 1}, 2));
  CHECK(guard.check(0, {r == 1, 2.5, 1.0, 1.0}, *world) == StepVerdict::kApply);
  std::string message;
  try {
    guard.check(7, {r == 1, r == 1 ? NAN : 0.0, 1.0, 1.0}, *world);
  } catch (const omnibal::Error& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Contains("step 7 (progress line 8/10): the loss is nan (on stage 1, "
                                      "dp rank 0, tp rank 0, world rank 1)"));
  // Every rank threw the same text (after the file:line prefix).
  const std::string text = message.substr(message.find("step 7"));
  const int64_t h = static_cast<int64_t>(std::hash<std::string>{}(text)&0x7fffffff);
  CHECK(world->all_reduce_int(h, omnibal::comm::ReduceOp::kMax) ==
        world->all_reduce_int(h, omnibal::comm::ReduceOp::kMin));
}
