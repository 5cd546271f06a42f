// omnibal-plan-torch: the omnibal-plan subcommands that need LibTorch (profile, export). Users
// run them as `omnibal-plan profile ...` / `omnibal-plan export ...`: the torch-free omnibal-plan
// execs this binary with its own arguments (torch_commands.cpp), so messages say omnibal-plan.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"omnibal-plan: the LibTorch subcommands (profile, export)", "omnibal-plan"};
  app.require_subcommand(1);
  omnibal::plan::Actions actions;
  omnibal::plan::register_profile_command(app, actions);
  omnibal::plan::register_export_command(app, actions);
  CLI11_PARSE(app, argc, argv);
  return omnibal::plan::run_actions(actions);
}
