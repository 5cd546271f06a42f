#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace omnibal::train {

double learning_rate(const TrainConfig& t, int64_t step) {
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / t.warmup_steps;
  const double span = std::max<int64_t>(1, t.steps - t.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - t.warmup_steps) / span);
  const double floor = t.lr * t.min_lr_ratio;
  return floor + (t.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace omnibal::train
