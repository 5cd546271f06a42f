#include "commands.h"

namespace omnibal::plan {

// One line per subcommand file in this folder.

void register_commands(CLI::App& app, Actions& actions) {
#ifdef OMNIBAL_PLAN_HAS_SCAN
  register_scan_command(app, actions);
#endif
  (void)app;
  (void)actions;
}

}  // namespace omnibal::plan
