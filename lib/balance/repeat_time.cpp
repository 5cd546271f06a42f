#include "balance/repeat_time.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace omnibal::balance {

std::vector<uint32_t> repeat_records(int64_t records, double repeat_time, uint64_t seed,
                                     uint32_t dataset, const std::string& where) {
  OMNIBAL_CHECK(std::isfinite(repeat_time) && repeat_time > 0, where,
                ": repeat_time must be a number > 0, got ", repeat_time);
  OMNIBAL_CHECK(records >= 0, where, ": negative record count ", records);
  const double whole = std::floor(repeat_time);
  const auto n = static_cast<double>(records);
  const double rows = whole * n + (repeat_time - whole) * n;
  OMNIBAL_CHECK(rows < static_cast<double>(std::numeric_limits<uint32_t>::max()), where,
                ": repeat_time ", repeat_time, " x ", records, " records exceeds 2^32 - 1 samples");
  const auto copies = static_cast<int64_t>(whole);
  // 1e-6: a decimal fraction such as 2.3 - 2 is 0.2999..., and 0.3 * 10 must still give 3.
  const auto extra =
      std::min(records, static_cast<int64_t>(std::floor((repeat_time - whole) * n + 1e-6)));
  std::vector<uint32_t> out;
  out.reserve(static_cast<size_t>(copies * records + extra));
  for (int64_t c = 0; c < copies; ++c)
    for (int64_t i = 0; i < records; ++i) out.push_back(static_cast<uint32_t>(i));
  if (extra == 0) return out;
  std::vector<uint32_t> pool(static_cast<size_t>(records));
  std::iota(pool.begin(), pool.end(), 0u);
  uint64_t mix = seed ^ (0x7e9ea7ULL + (static_cast<uint64_t>(dataset) << 32));
  Rng rng(splitmix64(mix));
  for (int64_t i = 0; i < extra; ++i)  // partial Fisher–Yates: the first `extra` are the draw
    std::swap(pool[i], pool[i + rng.below(pool.size() - i)]);
  std::sort(pool.begin(), pool.begin() + extra);
  out.insert(out.end(), pool.begin(), pool.begin() + extra);
  return out;
}

}  // namespace omnibal::balance
