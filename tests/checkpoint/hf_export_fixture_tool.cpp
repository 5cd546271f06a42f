// Inputs for tests/checkpoint/hf_export_checks.py, which tests `omnibal-plan export` against an
// independent Python reader of the Hugging Face format (hf_export_reader.py):
//   hf_export_fixture_tool checkpoint PRESET ROOT [KEY=VALUE ...]   (under mpiexec -n 1)
//     a training checkpoint ROOT/step-1 as the trainer saves it: every parameter of a randomly
//     initialised PRESET (seed 17) by per-unit name, one optimizer tensor, and the resolved config
//     of "model.preset: PRESET" with the KEY=VALUE overrides (e.g. data.max_tiles=9).
//   hf_export_fixture_tool config PRESET STYLE OUT_DIR
//     only OUT_DIR/config.json (hf_config_json, default training settings) and, on stdout, the
//     preset's parameter count: for the planning-only presets, too large to instantiate here.
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/hf_export.h"
#include "comm/mpi_runtime.h"
#include "core/config.h"
#include "core/error.h"
#include "models/vlm.h"
#include "tests/checkpoint/mpi_world.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>

namespace ckpt = omnibal::checkpoint;

namespace {

int write_checkpoint(int argc, char** argv) {
  OMNIBAL_CHECK(argc >= 4, "usage: hf_export_fixture_tool checkpoint PRESET ROOT [KEY=VALUE ...]");
  omnibal::comm::MpiRuntime mpi(&argc, &argv);
  const std::string preset_name = argv[2], root = argv[3];
  const std::vector<std::string> overrides(argv + 4, argv + argc);
  const auto config =
      omnibal::parse_config("model:\n  preset: " + preset_name + "\n", "fixture", overrides);
  const auto preset = omnibal::load_model_preset(preset_name);
  const auto n = static_cast<int64_t>(omnibal::unit_names(preset).size());
  const auto opt = omnibal::models::VlmOptions{}.with_img_context_id(3).with_seed(17);
  ckpt::Shard shard;
  // A single process holds the whole model: a tied head shares the embedding and has no
  // parameter of its own, as in the trainer's PP = 1 checkpoints.
  for (const auto& u : omnibal::models::make_units(preset, opt, 0, n))
    for (const auto& p : u->named_parameters(true))
      shard.tensors[u->unit_name() + "." + p.key()] = p.value().detach();
  shard.tensors["optim.llm_head.norm.weight.exp_avg"] = torch::ones({preset.llm.width});
  auto world = ckpt::testing::world_comm();
  ckpt::CheckpointStore store(root, 0, *world);
  store.save(1, shard, omnibal::to_yaml(config));
  return 0;
}

int write_config(int argc, char** argv) {
  OMNIBAL_CHECK(argc == 5, "usage: hf_export_fixture_tool config PRESET STYLE OUT_DIR");
  const auto preset = omnibal::load_model_preset(argv[2]);
  std::filesystem::create_directories(argv[4]);
  std::ofstream(std::string(argv[4]) + "/config.json")
      << ckpt::hf_config_json(preset, ckpt::parse_hf_style(argv[3]), "bfloat16").dump(2) << "\n";
  const auto counts = omnibal::models::unit_parameter_counts(preset);
  std::cout << "parameters " << std::accumulate(counts.begin(), counts.end(), int64_t{0}) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "checkpoint") return write_checkpoint(argc, argv);
    if (mode == "config") return write_config(argc, argv);
    std::cerr << "usage: hf_export_fixture_tool checkpoint|config ...\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hf_export_fixture_tool: " << e.what() << "\n";
    return 1;
  }
}
