// omnibal-plan: the offline planners as one CLI.
//   data       data balance: ISF packing, budget search, baselines, metrics (lib/balance)
//   scan       per-sample tile/token lengths of a dataset meta file (lib/data)
//   partition  model + memory balance and the pipeline simulator (lib/partition, lib/memory)
// Each subcommand lives in its own file and registers itself on the CLI11 app.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"omnibal-plan: data, model and memory balance planners for VLM training"};
  app.require_subcommand(1);
  std::vector<std::function<int()>> actions;
  omnibal::plan::register_commands(app, actions);
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
