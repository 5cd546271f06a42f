// omnibal-plan: the offline planners as one CLI, torch- and MPI-free.
//   data       data balance: ISF packing, budget search, baselines, metrics (lib/balance)
//   scan       per-sample tile/token lengths of a dataset meta file (lib/data's torch-free core)
//   partition  model + memory balance and the pipeline simulator (lib/partition, lib/memory)
//   simulate   the DP x PP simulator on a trainer config and a cost table
//   profile, export  LibTorch: forwarded to omnibal-plan-torch beside this binary (torch_main.cpp)
// Each subcommand lives in its own file and registers itself on the CLI11 app.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"

int main(int argc, char** argv) {
  try {
    if (argc > 1 && omnibal::plan::is_torch_command(argv[1]))
      return omnibal::plan::exec_torch_command(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "omnibal-plan: error: %s\n", e.what());
    return 1;
  }
  CLI::App app{"omnibal-plan: data, model and memory balance planners for VLM training"};
  app.require_subcommand(1);
  omnibal::plan::Actions actions;
  omnibal::plan::register_commands(app, actions);
  omnibal::plan::register_torch_command_stubs(app);
  // CLI11 would answer "A subcommand is required" to a misspelt one: name it and the commands.
  const auto known = [&app](const char* name) {
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      if (sub->get_name() == name) return true;
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      names += (names.empty() ? "" : ", ") + sub->get_name();
    std::fprintf(stderr, "omnibal-plan: unknown command '%s'; the commands are %s (--help)\n",
                 argv[1], names.c_str());
    return 2;
  }
  CLI11_PARSE(app, argc, argv);
  return omnibal::plan::run_actions(actions);
}
