// RunStop: when a launch ends early, decided at each step boundary by every rank alike: on
// SIGTERM / SIGINT (comm/stop_signal.h), after train.exit_after_steps steps of this launch, or
// once train.exit_duration_min minutes have passed since the launch began (agreed over all
// ranks, so a slow clock on one rank cannot split the job). The trainer then writes a checkpoint
// and returns; `--resume auto` continues bitwise. debug.fail_at's injected failures live here
// too (FaultInjector): they are the other way a step ends early, on purpose, in tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "comm/error_forwarder.h"
#include "core/config.h"

namespace omnibal::train {

/// The stop decision of a launch (see the file comment).
class RunStop {
 public:
  /// train.exit_duration_min counts from `started` (the launch's start).
  RunStop(const TrainConfig& train, comm::Communicator& world,
          std::chrono::steady_clock::time_point started);
  /// Collective: why the run stops at the boundary before 0-based step `step` ("signal",
  /// "train.exit_after_steps N", "train.exit_duration_min M") or nothing. The exit slots allow
  /// at least one step after `first`, this launch's first step, so a slot shorter than start-up
  /// still makes progress.
  std::optional<std::string> at_boundary(int64_t step, int64_t first);

 private:
  const TrainConfig& train_;
  comm::Communicator& world_;
  std::chrono::steady_clock::time_point started_;
};

/// debug.fail_at: a failure injected on one rank at one step and place, for the fault tests.
class FaultInjector {
 public:
  FaultInjector(const FailAtConfig& fail_at, int world_rank,
                std::shared_ptr<comm::ErrorForwarder> errors);
  /// Throws omnibal::Error when this rank's injected failure is at `where` of `step`; a loader
  /// failure is raised on a thread and reaches this one through the error forwarder, as a
  /// data-loader thread's would.
  void maybe_fail(FailWhere where, int64_t step) const;

 private:
  FailAtConfig fail_at_;
  int rank_;
  std::shared_ptr<comm::ErrorForwarder> errors_;
};

}  // namespace omnibal::train
