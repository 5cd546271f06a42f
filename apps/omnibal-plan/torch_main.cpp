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
  std::vector<std::function<int()>> actions;
  omnibal::plan::register_profile_command(app, actions);
  omnibal::plan::register_export_command(app, actions);
  CLI11_PARSE(app, argc, argv);
  try {
    int rc = 0;
    for (auto& action : actions) rc = action();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "omnibal-plan: error: %s\n", e.what());
    return 1;
  }
}
