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
  CLI11_PARSE(app, argc, argv);
  return omnibal::plan::run_actions(actions);
}
