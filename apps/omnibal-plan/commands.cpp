#include "commands.h"

namespace omnibal::plan {

// One line per subcommand file in this folder.

void register_commands(CLI::App& app, Actions& actions) {
  register_data_command(app, actions);
  register_partition_command(app, actions);
#ifdef OMNIBAL_PLAN_HAS_SCAN
  register_scan_command(app, actions);
#endif
#ifdef OMNIBAL_PLAN_HAS_EXPORT
  register_export_command(app, actions);
#endif
#ifdef OMNIBAL_PLAN_HAS_PROFILE
  register_profile_command(app, actions);
#endif
  register_simulate_command(app, actions);
}

}  // namespace omnibal::plan
