#include "commands.h"

namespace omnibal::plan {

// One line per torch-free subcommand file in this folder (profile and export: torch_main.cpp).

void register_commands(CLI::App& app, Actions& actions) {
  register_data_command(app, actions);
  register_partition_command(app, actions);
  register_scan_command(app, actions);
  register_simulate_command(app, actions);
}

}  // namespace omnibal::plan
