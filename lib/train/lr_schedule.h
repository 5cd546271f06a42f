// Learning-rate schedule: linear warm-up then cosine decay (the InternVL / LLaVA recipe).
// Pure function of the step, so a resumed run needs no scheduler state beyond the step.
#pragma once

#include <cstdint>

#include "core/config.h"

namespace omnibal::train {

/// Learning rate of 0-based `step`: lr * (step + 1) / warmup_steps during warm-up, then cosine
/// from lr down to lr * min_lr_ratio at train.steps.
double learning_rate(const TrainConfig& train, int64_t step);

}  // namespace omnibal::train
