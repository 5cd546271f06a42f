// Packed attention's kernel dispatch (models/varlen_attention.h): which inputs take the single
// flash varlen call, the flash wrapper's argument checks (all raised before any kernel, so they
// run on the CPU), and the CPU path left as it was. The flash kernel itself is checked on a GPU
// by tests/gpu/attention_cuda_test.cpp.
#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include <stdexcept>
#include <vector>

#include "models/varlen_attention.h"

using namespace omnibal::models;

namespace {

struct DispatchQkv {
  torch::Tensor q, k, v;
};

DispatchQkv dispatch_qkv(int64_t tokens, int64_t hq, int64_t hkv, int64_t d,
                         torch::Dtype dtype = torch::kBFloat16) {
  const auto opt = torch::TensorOptions().dtype(dtype);
  return {torch::randn({tokens, hq, d}, opt), torch::randn({tokens, hkv, d}, opt),
          torch::randn({tokens, hkv, d}, opt)};
}

torch::Tensor cu32(std::vector<int32_t> values) {
  return torch::tensor(values, torch::dtype(torch::kInt32));
}

}  // namespace

TEST_CASE("flash varlen is chosen for CUDA fp16/bf16 with a flash head dim, else per sample",
          "[models][varlen]") {
  const auto cuda = c10::DeviceType::CUDA, cpu = c10::DeviceType::CPU;
  const auto flash = flash_varlen_built() ? VarlenKernel::kFlashVarlen : VarlenKernel::kPerSample;
  CHECK(choose_varlen_kernel(cuda, torch::kBFloat16, 64) == flash);
  CHECK(choose_varlen_kernel(cuda, torch::kHalf, 128) == flash);
  CHECK(choose_varlen_kernel(cuda, torch::kBFloat16, 8) == flash);
  CHECK(choose_varlen_kernel(cuda, torch::kBFloat16, 256) == flash);
  // fp32 on CUDA, any CPU tensor, and head dims the kernel does not take: the per-sample path.
  CHECK(choose_varlen_kernel(cuda, torch::kFloat32, 64) == VarlenKernel::kPerSample);
  CHECK(choose_varlen_kernel(cuda, torch::kFloat64, 64) == VarlenKernel::kPerSample);
  CHECK(choose_varlen_kernel(cpu, torch::kBFloat16, 64) == VarlenKernel::kPerSample);
  CHECK(choose_varlen_kernel(cpu, torch::kFloat32, 64) == VarlenKernel::kPerSample);
  CHECK(choose_varlen_kernel(cuda, torch::kBFloat16, 12) == VarlenKernel::kPerSample);
  CHECK(choose_varlen_kernel(cuda, torch::kBFloat16, 264) == VarlenKernel::kPerSample);
  CHECK(choose_varlen_kernel(cuda, torch::kBFloat16, 0) == VarlenKernel::kPerSample);
  // LibTorch 2.11 (the pinned environment) has the kernel.
  CHECK(flash_varlen_built() ==
        (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)));
}

TEST_CASE("flash_varlen_attention rejects bad q/k/v shapes with std::invalid_argument",
          "[models][varlen]") {
  const torch::Tensor cu = cu32({0, 3, 10});
  const DispatchQkv ok = dispatch_qkv(10, 8, 2, 16);
  auto call = [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return flash_varlen_attention(q, k, v, cu, /*causal=*/true);
  };
  CHECK_THROWS_AS(call(ok.q.flatten(1), ok.k, ok.v), std::invalid_argument);
  CHECK_THROWS_WITH(call(ok.q.flatten(1), ok.k, ok.v),
                    Catch::Contains("flash_varlen_attention") && Catch::Contains("[10, 128]"));
  CHECK_THROWS_WITH(call(ok.q, ok.k, ok.v.narrow(1, 0, 1)),
                    Catch::Contains("k and v must have the same shape"));
  const DispatchQkv short_kv = dispatch_qkv(9, 8, 2, 16);
  CHECK_THROWS_WITH(call(ok.q, short_kv.k, short_kv.v),
                    Catch::Contains("k/v have T = 9") && Catch::Contains("q has T = 10"));
  const DispatchQkv wide = dispatch_qkv(10, 8, 2, 32);
  CHECK_THROWS_WITH(call(ok.q, wide.k, wide.v), Catch::Contains("head dim 32 but q has 16"));
  const DispatchQkv three = dispatch_qkv(10, 8, 3, 16);
  CHECK_THROWS_AS(call(ok.q, three.k, three.v), std::invalid_argument);
  CHECK_THROWS_WITH(call(ok.q, three.k, three.v),
                    Catch::Contains("Hkv = 3") && Catch::Contains("Hq = 8"));
  CHECK_THROWS_WITH(call(ok.q, ok.k.to(torch::kHalf), ok.v), Catch::Contains("one dtype"));
}

TEST_CASE("flash_varlen_attention rejects bad cu_seqlens with std::invalid_argument",
          "[models][varlen]") {
  const DispatchQkv x = dispatch_qkv(10, 4, 4, 16);
  auto call = [&](const torch::Tensor& cu) {
    return flash_varlen_attention(x.q, x.k, x.v, cu, /*causal=*/true);
  };
  CHECK_THROWS_AS(call(torch::tensor(std::vector<int64_t>{0, 3, 10})), std::invalid_argument);
  CHECK_THROWS_WITH(call(torch::tensor(std::vector<int64_t>{0, 3, 10})),
                    Catch::Contains("int32 CPU tensor") && Catch::Contains("Long"));
  CHECK_THROWS_WITH(call(cu32({10})), Catch::Contains("n + 1 >= 2"));
  CHECK_THROWS_WITH(call(cu32({0, 3, 10}).reshape({1, 3})), Catch::Contains("1-D"));
  CHECK_THROWS_WITH(call(cu32({1, 3, 10})), Catch::Contains("must start at 0, got 1"));
  CHECK_THROWS_WITH(call(cu32({0, 3, 9})),
                    Catch::Contains("ends at 9") && Catch::Contains("T = 10"));
  CHECK_THROWS_WITH(call(cu32({0, 7, 3, 10})),
                    Catch::Contains("non-decreasing") && Catch::Contains("cu_seqlens[2] = 3"));
}

TEST_CASE("flash_varlen_attention with valid shapes on the CPU fails only on the device",
          "[models][varlen]") {
  // Every shape and cu_seqlens check passes (an empty sample included); the first complaint is
  // the device, then the dtype, then the head dim: the kernel never runs on the CPU.
  const DispatchQkv x = dispatch_qkv(10, 8, 2, 16);
  const torch::Tensor cu = cu32({0, 3, 3, 10});
  CHECK_THROWS_WITH(flash_varlen_attention(x.q, x.k, x.v, cu, true),
                    Catch::Contains("must be CUDA tensors, got cpu"));
  CHECK_THROWS_AS(flash_varlen_attention(x.q, x.k, x.v, cu, false), std::invalid_argument);
}

TEST_CASE("packed attention on the CPU stays the per-sample path", "[models][varlen]") {
  // A flash-eligible head dim (64) and bf16 on the CPU: varlen_causal_attention is bit for bit the
  // per-sample path, forward and gradients, in bf16 and fp32.
  const auto dtype = GENERATE(torch::kBFloat16, torch::kFloat32);
  torch::manual_seed(5);
  const torch::Tensor cu = torch::tensor(std::vector<int64_t>{0, 1, 9, 30});
  const DispatchQkv x = dispatch_qkv(30, 4, 2, 64, dtype);
  auto run = [&](bool dispatched) {
    const torch::Tensor q = x.q.clone().requires_grad_(), k = x.k.clone().requires_grad_(),
                        v = x.v.clone().requires_grad_();
    const torch::Tensor out = dispatched ? varlen_causal_attention(q, k, v, cu)
                                         : varlen_attention_per_sample(q, k, v, cu);
    out.backward(torch::ones_like(out));
    return std::vector<torch::Tensor>{out, q.grad(), k.grad(), v.grad()};
  };
  const auto got = run(true), ref = run(false);
  for (size_t i = 0; i < got.size(); ++i) CHECK(torch::equal(got[i], ref[i]));
  // And it is attention: token 0 (a sample of one) returns its own value row, per query head.
  CHECK(torch::allclose(got[0][0].to(torch::kFloat32),
                        x.v[0].repeat_interleave(2, 0).to(torch::kFloat32), 1e-3, 1e-3));
}
