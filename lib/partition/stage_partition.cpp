#include "partition/stage_partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace omnibal::partition {

int Partition::units() const {
  int n = 0;
  for (int s : sizes) n += s;
  return n;
}

int Partition::begin(int stage) const {
  OMNIBAL_CHECK(stage >= 0 && stage < stages(), "stage ", stage, " out of range [0, ", stages(),
                ")");
  int b = 0;
  for (int s = 0; s < stage; ++s) b += sizes[s];
  return b;
}

int Partition::end(int stage) const { return begin(stage) + sizes[stage]; }

int Partition::stage_of(int unit) const {
  int end_unit = 0;
  for (int s = 0; s < stages(); ++s) {
    end_unit += sizes[s];
    if (unit < end_unit) return s;
  }
  OMNIBAL_FAIL("unit ", unit, " out of range [0, ", units(), ")");
}

std::vector<int> Partition::boundaries() const {
  std::vector<int> cuts;
  int b = 0;
  for (int s = 0; s + 1 < stages(); ++s) cuts.push_back(b += sizes[s]);
  return cuts;
}

Partition Partition::from_boundaries(const std::vector<int>& cuts, int units) {
  Partition p;
  int prev = 0;
  for (size_t k = 0; k < cuts.size(); ++k) {
    OMNIBAL_CHECK(cuts[k] > prev && cuts[k] < units, "partition cut ", k, " at unit ", cuts[k],
                  ": expected in (", prev, ", ", units, ") so that no stage is empty");
    p.sizes.push_back(cuts[k] - prev);
    prev = cuts[k];
  }
  OMNIBAL_CHECK(units > prev, "partition: the last stage would be empty");
  p.sizes.push_back(units - prev);
  return p;
}

std::string Partition::to_string() const {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << "]";
  return os.str();
}

Partition uniform_partition(int units, int stages) {
  OMNIBAL_CHECK(stages >= 1 && stages <= units,
                "uniform partition: expected 1 <= stages <= units (", units, "), got ", stages);
  Partition p;
  for (int s = 0; s < stages; ++s) p.sizes.push_back(units / stages + (s < units % stages ? 1 : 0));
  return p;
}

Partition min_max_partition(const std::vector<double>& weights, int stages) {
  const int n = static_cast<int>(weights.size());
  OMNIBAL_CHECK(stages >= 1 && stages <= n, "min-max partition: expected 1 <= stages <= units (", n,
                "), got ", stages);
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: smallest possible heaviest stage when the first i units form k stages.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, -1));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = k; i <= n - (stages - k); ++i)
      for (int j = i - 1; j >= k - 1; --j) {  // last stage is units [j, i)
        const double v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (v < best[k][i]) {
          best[k][i] = v;
          cut[k][i] = j;
        }
      }
  std::vector<int> cuts(stages - 1);
  int i = n;
  for (int k = stages; k > 1; --k) i = cuts[k - 2] = cut[k][i];
  return Partition::from_boundaries(cuts, n);
}

Partition greedy_anchor_partition(const std::vector<double>& weights, int stages) {
  const int n = static_cast<int>(weights.size());
  OMNIBAL_CHECK(stages >= 1 && stages <= n, "greedy anchor: expected 1 <= stages <= units (", n,
                "), got ", stages);
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  std::vector<int> cuts;
  int prev = 0;
  for (int k = 1; k < stages; ++k) {
    const double target = prefix[n] * k / stages;
    int i = 1;
    while (i < n && prefix[i] < target) ++i;  // first boundary whose running sum reaches target
    int c = (i > 1 && std::abs(prefix[i - 1] - target) <= std::abs(prefix[i] - target)) ? i - 1 : i;
    c = std::min(std::max(c, prev + 1), n - (stages - k));
    cuts.push_back(prev = c);
  }
  return Partition::from_boundaries(cuts, n);
}

std::vector<double> stage_sums(const Partition& partition, const std::vector<double>& weights) {
  OMNIBAL_CHECK(partition.units() == static_cast<int>(weights.size()), "partition ",
                partition.to_string(), " covers ", partition.units(), " units, expected ",
                weights.size());
  std::vector<double> sums(partition.stages(), 0.0);
  int u = 0;
  for (int s = 0; s < partition.stages(); ++s)
    for (int i = 0; i < partition.sizes[s]; ++i) sums[s] += weights[u++];
  return sums;
}

}  // namespace omnibal::partition
