// Subcommands of omnibal-plan. Each register_*_command adds a CLI11 subcommand whose callback,
// when the subcommand was given, pushes the action to run into `actions`.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace omnibal::plan {

using Actions = std::vector<std::function<int()>>;

/// `omnibal-plan data`: data balance on length statistics (data_command.cpp).
void register_data_command(CLI::App& app, Actions& actions);
/// `partition`: BMP, adaptive recompute and the simulated OmniBal ablation (partition_command.cpp).
void register_partition_command(CLI::App& app, Actions& actions);
/// `scan`: per-sample lengths of a meta file (scan_command.cpp; needs the LibTorch build).
void register_scan_command(CLI::App& app, Actions& actions);
/// `profile`: the measured per-unit cost table of a preset (profile_command.cpp; LibTorch build).
void register_profile_command(CLI::App& app, Actions& actions);

/// `export`: a training checkpoint as a Hugging Face InternVL checkpoint (export_command.cpp;
/// needs the LibTorch build).
void register_export_command(CLI::App& app, Actions& actions);

/// `simulate`: the DP x PP simulator on one trainer config with a profiled cost table and the
/// trainer's own packs (simulate_command.cpp; torch-free).
void register_simulate_command(CLI::App& app, Actions& actions);

/// Registers every subcommand compiled into this build (commands.cpp lists them).
void register_commands(CLI::App& app, Actions& actions);

}  // namespace omnibal::plan
