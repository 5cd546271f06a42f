// The project PRNG: splitmix64 seeding a xoshiro256** generator, with Fisher–Yates shuffles and
// unbiased bounded integers. Results are identical on every platform and standard library
// (docs/conventions.md forbids std::shuffle and std::uniform_int_distribution for that reason).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace omnibal {

/// splitmix64 step: advances state and returns the next 64-bit output. Also a good mixing hash.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// Deterministic random generator (xoshiro256**). Copyable; its full state is four words, so it
/// can be checkpointed exactly (state() / Rng(state)).
class Rng {
 public:
  /// Seeds the four state words from splitmix64(seed).
  explicit Rng(uint64_t seed = 0) {
    uint64_t s = seed;
    for (auto& w : s_) w = splitmix64(s);
  }

  /// Next uniformly distributed 64-bit value.
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform integer in [0, bound) without modulo bias (Lemire's method). bound must be > 0.
  uint64_t below(uint64_t bound) {
    __uint128_t m = static_cast<__uint128_t>(next()) * bound;
    auto low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<__uint128_t>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  /// Uniform double in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// Fisher–Yates shuffle of v in place.
  template <typename T> void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(below(i));
      std::swap(v[i - 1], v[j]);
    }
  }

  /// The four state words (for checkpoints).
  const uint64_t* state() const { return s_; }
  /// Restores a state saved with state().
  void set_state(const uint64_t* words) {
    for (int i = 0; i < 4; ++i) s_[i] = words[i];
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace omnibal
