#include "partition/pick_margin.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace omnibal::partition {

double timing_spread(const std::vector<double>& median_s, const std::vector<double>& min_s,
                     const std::vector<double>& max_s) {
  OMNIBAL_CHECK(min_s.size() == median_s.size() && max_s.size() == median_s.size(),
                "timing spread: ", median_s.size(), " medians, ", min_s.size(), " minima and ",
                max_s.size(), " maxima; expected one of each per entry");
  double range = 0, total = 0;
  for (size_t i = 0; i < median_s.size(); ++i) {
    for (double v : {median_s[i], min_s[i], max_s[i]})
      OMNIBAL_CHECK(std::isfinite(v) && v >= 0, "timing spread: entry ", i,
                    " holds a time that is not a finite number >= 0: ", v);
    OMNIBAL_CHECK(max_s[i] >= min_s[i], "timing spread: entry ", i, " has max ", max_s[i],
                  " s below its min ", min_s[i], " s");
    range += max_s[i] - min_s[i];
    total += median_s[i];
  }
  return total > 0 ? range / total : 0.0;
}

int pick_within_margin(const std::vector<double>& seconds, const std::vector<int>& preference,
                       double margin) {
  OMNIBAL_CHECK(!seconds.empty(), "pick within margin: no candidate");
  OMNIBAL_CHECK(std::isfinite(margin) && margin >= 0,
                "pick within margin: the margin must be a finite fraction >= 0, got ", margin);
  for (double s : seconds)
    OMNIBAL_CHECK(std::isfinite(s), "pick within margin: a predicted time is not finite: ", s);
  std::vector<int> sorted = preference;
  std::sort(sorted.begin(), sorted.end());
  bool permutation = sorted.size() == seconds.size();
  for (size_t i = 0; permutation && i < sorted.size(); ++i)
    permutation = sorted[i] == static_cast<int>(i);
  OMNIBAL_CHECK(permutation, "pick within margin: the preference order must list each of the ",
                seconds.size(), " candidates once, got ", preference.size(), " entries");
  const double fastest = *std::min_element(seconds.begin(), seconds.end());
  const double limit = fastest + margin * std::abs(fastest);
  for (int i : preference)
    if (seconds[i] <= limit) return i;
  return static_cast<int>(std::min_element(seconds.begin(), seconds.end()) - seconds.begin());
}

std::string margin_note(const std::vector<double>& seconds, const std::vector<std::string>& names,
                        int pick, double margin) {
  OMNIBAL_CHECK(names.size() == seconds.size() && pick >= 0 &&
                    pick < static_cast<int>(seconds.size()),
                "margin note: ", names.size(), " names for ", seconds.size(), " candidates, pick ",
                pick);
  const auto fastest = std::min_element(seconds.begin(), seconds.end()) - seconds.begin();
  if (seconds[fastest] >= seconds[pick]) return "";
  const double faster = 100.0 * (seconds[pick] - seconds[fastest]) / std::abs(seconds[fastest]);
  return fmt::format("kept {} over {} ({:.1f} % faster, within the {:.1f} % margin)", names[pick],
                     names[fastest], faster, 100.0 * margin);
}

}  // namespace omnibal::partition
