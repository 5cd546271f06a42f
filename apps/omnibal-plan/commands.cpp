#include "commands.h"

namespace omnibal::plan {

// One line per subcommand file in this folder.

void register_commands(CLI::App& app, Actions& actions) {
  (void)app;
  (void)actions;
}

}  // namespace omnibal::plan
