// `omnibal-plan export` end to end: a tiny-model checkpoint saved by the store (one rank) is
// exported as a Hugging Face checkpoint and loaded back through the name map; a damaged step
// directory is refused naming the file.
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/hf_import.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "models/vlm.h"
#include "tests/checkpoint/mpi_world.h"
#include "tests/checkpoint/test_dirs.h"

#include <catch2/catch.hpp>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;
using omnibal::checkpoint::CheckpointStore;
using omnibal::checkpoint::Shard;
using omnibal::checkpoint::testing::flip_byte;
using omnibal::checkpoint::testing::ScratchDir;
using omnibal::checkpoint::testing::world_comm;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("omnibal-plan export turns a training checkpoint into a Hugging Face checkpoint",
          "[export]") {
  auto world = world_comm();
  REQUIRE(world->size() == 1);
  ScratchDir dir("ckpt_export");
  const auto preset = omnibal::load_model_preset("tiny");
  const auto n = static_cast<int64_t>(omnibal::unit_names(preset).size());
  auto opt = omnibal::models::VlmOptions{}.with_img_context_id(3).with_seed(21);
  Shard shard;
  for (const auto& u : omnibal::models::make_units(preset, opt, 0, n))
    for (const auto& p : u->named_parameters(true))
      shard.tensors[u->unit_name() + "." + p.key()] = p.value().detach().clone();
  const auto source = shard.tensors;
  shard.tensors["optim.llm_head.norm.weight.exp_avg"] = torch::ones({128});
  CheckpointStore store(dir.file("run"), 2, *world);
  store.save(3, shard, "model:\n  preset: tiny\n");

  const std::string cmd = std::string(OMNIBAL_PLAN_EXE) + " export --checkpoint " +
                          dir.file("run") + " --out " + dir.file("hf") +
                          " --dtype keep --style llama --max-shard-gb 0.002 > " + dir.file("log") +
                          " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string output = read_all(dir.file("log"));
  INFO(output);
  REQUIRE(rc == 0);
  CHECK(output.find("step-3 (tiny preset, llama layout)") != std::string::npos);
  CHECK(fs::exists(dir.file("hf/model.safetensors.index.json")));

  auto target = omnibal::models::make_units(preset, opt.with_seed(22), 0, n);
  const auto report = omnibal::checkpoint::load_pretrained(target, preset, dir.file("hf"), {});
  CHECK(report.style == omnibal::HfStyle::kLlama);
  for (const auto& u : target)
    for (const auto& p : u->named_parameters(true)) {
      const std::string name = u->unit_name() + "." + p.key();
      INFO(name);
      CHECK(torch::equal(p.value(), source.at(name)));
    }
  // A damaged step directory is refused by name.
  flip_byte(dir.file("run/step-3/rank-0.safetensors"), 100);
  CHECK(std::system((std::string(OMNIBAL_PLAN_EXE) + " export --checkpoint " +
                     dir.file("run/step-3") + " --out " + dir.file("hf2") + " > " +
                     dir.file("log2") + " 2>&1")
                        .c_str()) != 0);
  CHECK(read_all(dir.file("log2")).find("rank-0.safetensors: checksum") != std::string::npos);
}
