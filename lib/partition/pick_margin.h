// A reproducible pick among candidates ranked by times predicted from a measured profile
// (issue 37). The start-up profile is timed by wall clock on whatever else the machine runs, so
// one launch's unit times differ from the next's by a few per cent, and two splits (or two
// schedules of parallel.schedule auto) whose simulated steps lie closer than that swap places
// from launch to launch: the same config trained on [7, 3] in one launch and on [6, 4] in the
// next. The rule here lets the measurement decide only where it can:
//   margin       the profile's measured spread, its repeat-to-repeat variation relative to its
//                total: sum over units of (slowest - fastest repeat) / sum of the unit times,
//                forward and backward (timing_spread; 3 repeats at start-up);
//   preference   an order of the candidates that no timing decides (the caller's: for splits
//                the fewest parameter bytes on the fullest rank, then the split itself; for
//                auto's schedules 1F1B, ZB-H1, interleaved);
//   pick         the most preferred candidate whose predicted time is within (1 + margin) of
//                the fastest's. So the preferred candidate is kept unless another is faster by
//                more than the margin, and a candidate that is clearly faster always wins.
// Margin 0 (a cost table read from a file, the same at every launch): the fastest, as before.
// Not here: which candidates are compared (partition_search.h), the timed trials' own test
// (lib/train/partition_trials.h), torch, MPI.
#pragma once

#include <string>
#include <vector>

namespace omnibal::partition {

/// The relative spread of a profile: sum of (max_s - min_s) over sum of median_s, over any
/// number of entries (e.g. every unit's forward and backward time, seconds); 0 when every
/// median is 0. Throws omnibal::Error when the lists differ in length, an entry is negative or
/// not finite, or a max is below its min.
double timing_spread(const std::vector<double>& median_s, const std::vector<double>& min_s,
                     const std::vector<double>& max_s);

/// Index of the candidate to keep (see the file comment): the first of `preference` (every
/// index of `seconds` once, most preferred first) whose seconds are at most (1 + margin) x the
/// lowest. Throws omnibal::Error when `seconds` is empty or holds a value that is not finite,
/// `preference` is not a permutation of its indices, or margin is negative or not finite.
int pick_within_margin(const std::vector<double>& seconds, const std::vector<int>& preference,
                       double margin);

/// What the margin decided, in words for the log: "" when the pick is the fastest, else e.g.
/// "kept [7, 3] over [6, 4] (1.2 % faster, within the 3.4 % margin)". `names` names the
/// candidates of `seconds`.
std::string margin_note(const std::vector<double>& seconds, const std::vector<std::string>& names,
                        int pick, double margin);

}  // namespace omnibal::partition
