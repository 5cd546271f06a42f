#include "train/startup_stop.h"

#include "comm/communicator.h"
#include "comm/stop_signal.h"

namespace omnibal::train {

StartupStopped::StartupStopped(const std::string& phase)
    : std::runtime_error("stopped by a signal during start-up planning (" + phase +
                         "), before the first step: no checkpoint written (nothing trained); "
                         "the same command continues from where this launch started"),
      phase_(phase) {}

void stop_point(comm::Communicator& world, const std::string& phase) {
  if (comm::should_stop(world)) throw StartupStopped(phase);
}

}  // namespace omnibal::train
