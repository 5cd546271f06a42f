// Subcommands of omnibal-plan. Each register_*_command adds a CLI11 subcommand whose callback,
// when the subcommand was given, pushes the action to run into `actions`.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace omnibal::plan {

using Actions = std::vector<std::function<int()>>;

/// `omnibal-plan data`: data balance on length statistics (data_command.cpp).
void register_data_command(CLI::App& app, Actions& actions);
/// `partition`: BMP, adaptive recompute and the simulated OmniBal ablation (partition_command.cpp).
void register_partition_command(CLI::App& app, Actions& actions);
/// `scan`: per-sample lengths of a meta file (scan_command.cpp; lib/data's torch-free core).
void register_scan_command(CLI::App& app, Actions& actions);
/// `profile`: the measured per-unit cost table of a preset (profile_command.cpp; in
/// omnibal-plan-torch).
void register_profile_command(CLI::App& app, Actions& actions);

/// `export`: a training checkpoint as a Hugging Face InternVL checkpoint (export_command.cpp;
/// in omnibal-plan-torch).
void register_export_command(CLI::App& app, Actions& actions);

/// `simulate`: the DP x PP simulator on one trainer config with a profiled cost table and the
/// trainer's own packs (simulate_command.cpp; torch-free).
void register_simulate_command(CLI::App& app, Actions& actions);

/// Registers the torch-free subcommands of omnibal-plan (commands.cpp lists them).
void register_commands(CLI::App& app, Actions& actions);

/// Whether `name` is a subcommand of omnibal-plan-torch (profile, export; torch_commands.cpp).
bool is_torch_command(const std::string& name);
/// Replaces this process with omnibal-plan-torch from the folder of the running executable,
/// same arguments; throws omnibal::Error naming the path when it cannot be started.
int exec_torch_command(int argc, char** argv);
/// Lists the torch subcommands in `omnibal-plan --help` (they never run in this process).
void register_torch_command_stubs(CLI::App& app);

/// Runs the parsed subcommands' actions (both binaries' mains): the last action's exit code, or
/// 1 after printing "omnibal-plan: error: <what>" when one throws.
inline int run_actions(const Actions& actions) {
  try {
    int rc = 0;
    for (const auto& action : actions) rc = action();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "omnibal-plan: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace omnibal::plan
