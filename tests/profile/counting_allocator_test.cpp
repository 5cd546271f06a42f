#include <c10/core/Allocator.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "core/rng.h"
#include "profile/counting_allocator.h"
#include "profile/memory_meter.h"

using omnibal::profile::MemoryMeter;
using omnibal::profile::ScopedCpuAllocatorCounter;

TEST_CASE(
    "counting allocator: a 1 MiB tensor raises current by 1 MiB, freeing lowers it, peak holds",
    "[profile]") {
  const c10::Allocator* before = c10::GetAllocator(c10::DeviceType::CPU);
  {
    ScopedCpuAllocatorCounter counter;
    REQUIRE(ScopedCpuAllocatorCounter::active());
    REQUIRE(c10::GetAllocator(c10::DeviceType::CPU) != before);
    counter.reset_peak();
    const int64_t c0 = counter.current_bytes();
    torch::Tensor t = torch::empty({1 << 18}, torch::kFloat32);  // 2^18 * 4 B = 1 MiB
    CHECK(counter.current_bytes() - c0 == (1 << 20));
    CHECK(counter.peak_bytes() == c0 + (1 << 20));
    t.fill_(2.0f);
    CHECK(t.sum().item<double>() == Approx(2.0 * (1 << 18)));  // the counted block is usable
    const int64_t peak = counter.peak_bytes();                 // + the 4-byte sum
    CHECK(peak >= c0 + (1 << 20));
    t = torch::Tensor();
    CHECK(counter.current_bytes() == c0);
    CHECK(counter.peak_bytes() == peak);
    counter.reset_peak();
    CHECK(counter.peak_bytes() == c0);
  }
  CHECK_FALSE(ScopedCpuAllocatorCounter::active());
  CHECK(c10::GetAllocator(c10::DeviceType::CPU) == before);
}

TEST_CASE("counting allocator: live bytes equal the sum of random tensor sizes", "[profile]") {
  const uint64_t seed = GENERATE(1u, 2u, 3u, 4u);
  omnibal::Rng rng(seed);
  ScopedCpuAllocatorCounter counter;
  const int64_t c0 = counter.current_bytes();
  std::vector<torch::Tensor> live;
  int64_t expected = 0, peak = 0;
  counter.reset_peak();
  for (int i = 0; i < 40; ++i) {
    if (!live.empty() && rng.below(3) == 0) {  // free a random live tensor
      const size_t k = rng.below(live.size());
      expected -= live[k].nbytes();
      live.erase(live.begin() + static_cast<int64_t>(k));
    } else {
      const auto n = static_cast<int64_t>(1 + rng.below(100000));
      live.push_back(rng.below(2) ? torch::empty({n}, torch::kFloat64)
                                  : torch::empty({n}, torch::kInt32));
      expected += live.back().nbytes();
    }
    peak = std::max(peak, expected);
    REQUIRE(counter.current_bytes() - c0 == expected);
  }
  CHECK(counter.peak_bytes() - c0 == peak);
}

TEST_CASE("counting allocator: nested scopes share the counter; frees after the scope are counted",
          "[profile]") {
  torch::Tensor survivor;
  int64_t inside = 0;
  {
    ScopedCpuAllocatorCounter outer;
    {
      ScopedCpuAllocatorCounter inner;
      survivor = torch::ones({1000}, torch::kFloat32);
    }
    REQUIRE(ScopedCpuAllocatorCounter::active());  // the outer scope still counts
    inside = outer.current_bytes();
  }
  ScopedCpuAllocatorCounter again;
  CHECK(again.current_bytes() == inside);
  survivor = torch::Tensor();  // allocated by the counter, freed after its scope: still counted
  CHECK(again.current_bytes() == inside - 4000);
}

TEST_CASE("memory meter: CPU meter counts autograd activations; CUDA needs a CUDA build",
          "[profile]") {
  MemoryMeter meter(torch::kCPU);
  const int64_t c0 = meter.current_bytes();
  torch::Tensor w = torch::ones({64, 64}, torch::requires_grad());
  torch::Tensor x = torch::ones({128, 64});
  const int64_t with_inputs = meter.current_bytes();
  CHECK(with_inputs - c0 == (64 * 64 + 128 * 64) * 4);
  torch::Tensor y = torch::tanh(torch::matmul(x, w));  // tanh keeps its output for backward
  CHECK(meter.current_bytes() - with_inputs >= 128 * 64 * 4);
  if (!omnibal::profile::cuda_memory_stats_available())
    CHECK_THROWS_WITH(MemoryMeter(torch::Device(torch::kCUDA, 0)), Catch::Contains("CPU-only"));
}
