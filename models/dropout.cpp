#include "models/dropout.h"

#include "core/error.h"
#include "core/rng.h"
#include "models/torch_compat.h"

namespace omnibal::models {

int64_t dropout_key(uint64_t seed, int64_t step, int64_t slot) {
  uint64_t state = seed;
  uint64_t h = splitmix64(state);
  state = h ^ static_cast<uint64_t>(step);
  h = splitmix64(state);
  state = h ^ static_cast<uint64_t>(slot);
  h = splitmix64(state);
  return static_cast<int64_t>(h == 0 ? 1 : h);
}

uint64_t unit_name_hash(const std::string& unit_name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : unit_name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

torch::Tensor counter_dropout(const torch::Tensor& x, double p, int64_t key, uint64_t unit_hash,
                              DropoutSite site) {
  OMNIBAL_CHECK(p >= 0.0 && p < 1.0, "dropout: expected a probability in [0, 1), got ", p);
  if (p == 0.0 || key == 0 || !x.defined()) return x;
  uint64_t state = static_cast<uint64_t>(key) ^ unit_hash;
  state = splitmix64(state) ^ static_cast<uint64_t>(site);
  const uint64_t seed = splitmix64(state);
  at::Generator gen = compat::cpu_generator(seed);
  // uniform_ on the CPU is a serial kernel: the draw does not depend on the thread count.
  const torch::Tensor u =
      torch::rand(x.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat32));
  const torch::Tensor mask = u.ge(p).to(x.device(), x.scalar_type()).mul_(1.0 / (1.0 - p));
  return x * mask;
}

}  // namespace omnibal::models
