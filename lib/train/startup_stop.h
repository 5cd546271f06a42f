// Stopping while the trainer plans its stages at start-up (SIGTERM / SIGINT, comm/stop_signal.h).
// The start-up profile and the timed partition trials take minutes on a real model (the demo's
// trials 2 minutes), far past a scheduler's grace (Slurm sends SIGTERM, then SIGKILL 30 s later
// by default), so they check the stop flag between units of work: the profiler on world rank 0
// before each unit run (the other ranks wait for its table and learn of the stop with it), the
// trials at each timed repeat's start and end (folded into the collectives they already run),
// and the planner once after the profile. Where ranks must agree the check is collective
// (stop_point: one all-reduce of the flag, as comm::should_stop at a step boundary), so every
// rank throws StartupStopped at the same point and the job ends within seconds.
// Exit code 0, as the step-boundary stop: the run did not fail, a relaunch (`--resume auto`)
// continues from the same place (the last checkpoint, or the start), and a requeue script or a
// job dependency must not read the stop as a failure (Megatron-LM checks its signal handler only
// after an iteration and then exits 0 with a checkpoint). Nothing is written: there is no step
// to checkpoint before step 0 and the run directory's metrics and checkpoints are not touched.
// apps/omnibal-train catches it.
#pragma once

#include <stdexcept>
#include <string>

namespace omnibal::comm {
class Communicator;
}

namespace omnibal::train {

/// Thrown on every rank when a stop signal ended start-up planning; what() is the log line
/// ("stopped by a signal during start-up planning (partition trials): ...").
class StartupStopped : public std::runtime_error {
 public:
  /// `phase`: what was running, e.g. "start-up profiling", "partition trials".
  explicit StartupStopped(const std::string& phase);
  /// What was running when the stop was agreed.
  const std::string& phase() const { return phase_; }

 private:
  std::string phase_;
};

/// Collective over `world` (every rank calls it at the same point): throws StartupStopped(phase)
/// on every rank when any rank has comm::stop_requested(). One all-reduce of an int.
void stop_point(comm::Communicator& world, const std::string& phase);

}  // namespace omnibal::train
