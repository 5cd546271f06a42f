// Periodic work in the training loop: whether a component's every-N-steps task falls due.
// Each component asks with its own period (RunLog: train.log_every, Evaluator: train.eval_every,
// TrainCheckpoint: train.checkpoint_every), so the loop never spells the arithmetic out.
#pragma once

#include <cstdint>

namespace omnibal {

/// True when a task run every `every` steps falls due once `steps_done` steps are complete
/// (steps_done a positive multiple of every). `every` <= 0 means never.
inline bool due(int64_t every, int64_t steps_done) {
  return every > 0 && steps_done > 0 && steps_done % every == 0;
}

}  // namespace omnibal
