// The checkpoint store under 1 and 2 ranks (ctest runs this binary with mpiexec -n 1 and -n 2):
// save/load round trip across files, find_latest skipping truncated, flipped and leftover
// directories and edited manifests, keep_last pruning, a failed write on the last rank leaving the previous
// checkpoint verified and loadable, a NaN / Inf tensor refused at save on every rank, and an
// older unchecked checkpoint holding a NaN skipped by find_latest and named by verify.
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/file_digest.h"
#include "checkpoint/safetensors.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "tests/checkpoint/mpi_world.h"
#include "tests/checkpoint/test_dirs.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using omnibal::checkpoint::CheckpointManifest;
using omnibal::checkpoint::CheckpointStore;
using omnibal::checkpoint::Shard;
using omnibal::checkpoint::testing::flip_byte;
using omnibal::checkpoint::testing::ScratchDir;
using omnibal::checkpoint::testing::world_comm;

namespace {

/// One scratch directory for all ranks: rank 0's pid names it, rank 0 owns it.
std::unique_ptr<ScratchDir> shared_dir(omnibal::comm::Communicator& world, const std::string& tag) {
  const long id =
      world.all_reduce_int(world.rank() == 0 ? ::getpid() : 0, omnibal::comm::ReduceOp::kMax);
  auto dir = std::make_unique<ScratchDir>(tag, id, world.rank() == 0);
  world.barrier();
  return dir;
}

/// Rank r's shard at `step`: its own tensors (several dtypes) plus one name every rank writes.
Shard make_shard(int rank, int64_t step) {
  Shard s;
  const float base = 1000.0f * rank + static_cast<float>(step);
  s.tensors["unit_" + std::to_string(rank) + ".w"] =
      torch::arange(12, torch::kFloat).reshape({3, 4}) + base;
  s.tensors["unit_" + std::to_string(rank) + ".w_bf16"] =
      (torch::arange(6, torch::kFloat) + base).to(torch::kBFloat16);
  s.tensors["unit_" + std::to_string(rank) + ".adam_step"] = torch::full({1}, step, torch::kLong);
  s.tensors["shared.bias"] = torch::full({2}, static_cast<float>(rank));
  s.state = {{"rank", rank}, {"step", step}, {"rng", "state-" + std::to_string(rank)}};
  return s;
}

std::vector<std::string> step_dirs(const std::string& root) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("checkpoint store saves every rank's shard and loads tensors by name", "[store]") {
  auto world = world_comm();
  auto dir = shared_dir(*world, "ckpt_roundtrip");
  const int size = world->size();
  CheckpointStore store(dir->str(), 3, *world);
  CHECK_FALSE(store.find_latest().has_value());
  store.save(7, make_shard(world->rank(), 7), "model:\n  preset: tiny\n");

  const auto latest = store.find_latest();
  REQUIRE(latest.has_value());
  CHECK(*latest == dir->file("step-7"));
  CHECK_NOTHROW(store.verify(*latest));
  CHECK(CheckpointStore::parse_step_dir(*latest) == 7);
  // Every rank loads every rank's tensors (as a rank of another partition would).
  std::vector<std::string> names{"shared.bias"};
  for (int r = 0; r < size; ++r)
    for (const char* suffix : {".w", ".w_bf16", ".adam_step"})
      names.push_back("unit_" + std::to_string(r) + suffix);
  const auto tensors = store.load_tensors(*latest, names);
  CHECK(tensors.size() == names.size());
  for (int r = 0; r < size; ++r) {
    const Shard expected = make_shard(r, 7);
    for (const auto& [name, t] : expected.tensors) {
      if (name == "shared.bias") continue;
      INFO(name);
      CHECK(tensors.at(name).scalar_type() == t.scalar_type());
      CHECK(torch::equal(tensors.at(name), t));
    }
  }
  CHECK(torch::equal(tensors.at("shared.bias"), torch::zeros({2})));  // lowest rank wins
  CHECK(store.tensor_names(*latest).size() == names.size());
  const auto states = store.load_states(*latest);
  REQUIRE(states.size() == static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) CHECK(states[r] == make_shard(r, 7).state);
  CHECK(store.load_config(*latest) == "model:\n  preset: tiny\n");
  CHECK_THROWS_WITH(store.load_tensors(*latest, {"shared.bias", "nope.a", "nope.b"}),
                    Catch::Contains("lacks 2 of the 3") && Catch::Contains("nope.a") &&
                        Catch::Contains("nope.b"));
  world->barrier();
}

TEST_CASE("checkpoint store keeps the newest keep_last checkpoints", "[store]") {
  auto world = world_comm();
  auto dir = shared_dir(*world, "ckpt_prune");
  CheckpointStore store(dir->str(), 2, *world);
  for (int64_t step : {10, 20, 30, 40}) store.save(step, make_shard(world->rank(), step), "x: 1\n");
  world->barrier();
  CHECK(step_dirs(dir->str()) == std::vector<std::string>{"step-30", "step-40"});
  CHECK(store.find_latest() == dir->file("step-40"));
  // Saving an existing step replaces it with the new contents.
  world->barrier();  // every rank has looked before rank 0 starts the next save
  store.save(40, make_shard(world->rank(), 41), "x: 2\n");
  CHECK(store.load_config(dir->file("step-40")) == "x: 2\n");
  CHECK(store.load_states(dir->file("step-40"))[0]["step"] == 41);
  CHECK(step_dirs(dir->str()) == std::vector<std::string>{"step-30", "step-40"});
  world->barrier();
}

TEST_CASE("find_latest skips truncated, flipped and unfinished checkpoints", "[store]") {
  auto world = world_comm();
  auto dir = shared_dir(*world, "ckpt_damage");
  const int last = world->size() - 1;
  CheckpointStore store(dir->str(), 0, *world);
  for (int64_t step : {1, 2, 3}) store.save(step, make_shard(world->rank(), step), "x: 1\n");
  const std::string victim_shard = "rank-" + std::to_string(last) + ".safetensors";
  if (world->rank() == 0) {
    // step-3: the last rank's shard loses its tail; step-2: one data byte flipped.
    const std::string truncated = dir->file("step-3/" + victim_shard);
    fs::resize_file(truncated, fs::file_size(truncated) - 5);
    flip_byte(dir->file("step-2/" + victim_shard),
              static_cast<std::streamoff>(fs::file_size(dir->file("step-2/" + victim_shard)) - 3));
    // An interrupted later save and a directory without manifest.
    fs::create_directories(dir->file("step-9.tmp"));
    fs::create_directories(dir->file("step-8"));
  }
  world->barrier();
  CHECK(store.find_latest() == dir->file("step-1"));
  CHECK_THROWS_WITH(store.verify(dir->file("step-3")),
                    Catch::Contains(victim_shard + ": size") && Catch::Contains("manifest says"));
  CHECK_THROWS_WITH(store.verify(dir->file("step-2")),
                    Catch::Contains(victim_shard + ": checksum xxh3_64") &&
                        Catch::Contains("manifest says"));
  CHECK_THROWS_WITH(store.verify(dir->file("step-8")), Catch::Contains("manifest.json: missing"));
  world->barrier();
  if (world->rank() == 0) fs::remove(dir->file("step-1/config.yaml"));
  world->barrier();
  CHECK_FALSE(store.find_latest().has_value());
  CHECK_THROWS_WITH(store.verify(dir->file("step-1")), Catch::Contains("config.yaml: missing"));
  world->barrier();
}

TEST_CASE("an edited manifest is refused by its own checksum; a version-1 manifest still reads",
          "[store]") {
  auto world = world_comm();
  auto dir = shared_dir(*world, "ckpt_manifest");
  CheckpointStore store(dir->str(), 0, *world);
  for (int64_t step : {1, 2, 3}) store.save(step, make_shard(world->rank(), step), "x: 1\n");
  const auto read_json = [](const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  };
  const auto write_json = [](const std::string& path, const nlohmann::json& j) {
    std::ofstream(path) << j.dump(1) << "\n";
  };
  if (world->rank() == 0) {
    // step-3: one tensor re-pointed to another (existing, verified) file; every listed file
    // still matches, so only the manifest's own checksum can tell.
    nlohmann::json edited = read_json(dir->file("step-3/manifest.json"));
    CHECK(edited["version"] == 2);
    CHECK(edited.contains("manifest_xxh3_64"));
    edited["tensors"]["unit_0.w"] = "config.yaml";
    write_json(dir->file("step-3/manifest.json"), edited);
    // step-2: as a version-1 writer left it (no checksum): still read.
    nlohmann::json v1 = read_json(dir->file("step-2/manifest.json"));
    v1.erase("manifest_xxh3_64");
    v1["version"] = 1;
    write_json(dir->file("step-2/manifest.json"), v1);
  }
  world->barrier();
  CHECK(store.find_latest() == dir->file("step-2"));
  CHECK_THROWS_WITH(store.verify(dir->file("step-3")),
                    Catch::Contains(
                        "step-3/manifest.json: the manifest does not match its own checksum"));
  CHECK_NOTHROW(store.verify(dir->file("step-2")));
  const auto name = "unit_0.w";
  CHECK(torch::equal(store.load_tensors(dir->file("step-2"), {name}).at(name),
                     make_shard(0, 2).tensors.at(name)));
  world->barrier();
}

TEST_CASE("a failed write on one rank aborts the save everywhere and keeps the previous checkpoint",
          "[store]") {
  auto world = world_comm();
  auto dir = shared_dir(*world, "ckpt_fail");
  const int last = world->size() - 1;
  CheckpointStore store(dir->str(), 1, *world);
  store.save(5, make_shard(world->rank(), 5), "x: 1\n");
  Shard bad = make_shard(world->rank(), 6);
  if (world->rank() == last) bad.tensors["unit.complex"] = torch::zeros({2}, torch::kComplexFloat);
  CHECK_THROWS_WITH(store.save(6, bad, "x: 2\n"),
                    Catch::Contains("checkpoint step 6 not saved") &&
                        Catch::Contains("failed on rank(s) " + std::to_string(last)) &&
                        Catch::Contains("earlier checkpoints are untouched"));
  world->barrier();
  CHECK(step_dirs(dir->str()) == std::vector<std::string>{"step-5"});
  const auto latest = store.find_latest();
  REQUIRE(latest == dir->file("step-5"));
  CHECK_NOTHROW(store.verify(*latest));
  const auto name = "unit_" + std::to_string(last) + ".w";
  CHECK(torch::equal(store.load_tensors(*latest, {name}).at(name),
                     make_shard(last, 5).tensors.at(name)));
  // The store still works after the failure.
  world->barrier();
  store.save(7, make_shard(world->rank(), 7), "x: 3\n");
  CHECK(store.find_latest() == dir->file("step-7"));
  world->barrier();
}

TEST_CASE("a checkpoint root that cannot be created fails on every rank", "[store]") {
  auto world = world_comm();
  auto dir = shared_dir(*world, "ckpt_unwritable");
  if (world->rank() == 0) std::ofstream(dir->file("a_file")) << "not a directory";
  world->barrier();
  CheckpointStore store(dir->file("a_file/ckpt"), 1, *world);
  CHECK_THROWS_WITH(store.save(1, make_shard(world->rank(), 1), "x: 1\n"),
                    Catch::Contains("checkpoint step 1 not saved: rank 0 could not create"));
  CHECK_FALSE(store.find_latest().has_value());
  world->barrier();
}

TEST_CASE("a shard with a NaN or Inf tensor is refused on every rank; the last good one stays",
          "[store][nonfinite]") {
  auto world = world_comm();
  auto dir = shared_dir(*world, "ckpt_nonfinite");
  const int last = world->size() - 1;
  CheckpointStore store(dir->str(), 2, *world);
  store.save(5, make_shard(world->rank(), 5), "x: 1\n");
  CHECK(CheckpointManifest::read(dir->file("step-5")).all_finite);
  Shard bad = make_shard(world->rank(), 6);
  const std::string victim = "unit_" + std::to_string(last) + ".w";
  if (world->rank() == last) {
    bad.tensors.at(victim)[1][2] = NAN;
    bad.tensors.at("unit_" + std::to_string(last) + ".w_bf16")[0] = INFINITY;
  }
  std::string message;
  try {
    store.save(6, bad, "x: 2\n");
  } catch (const omnibal::Error& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Contains("checkpoint step 6 refused: the tensors of rank(s) " +
                                      std::to_string(last) + " are not all finite") &&
                          Catch::Contains("earlier checkpoints are untouched"));
  if (world->rank() == last)  // the rank that holds it names the tensor
    CHECK_THAT(message, Catch::Contains("'" + victim +
                                        "' holds 1 nan and 0 inf of 12 values (and 1 more "
                                        "tensors)"));
  world->barrier();
  CHECK(step_dirs(dir->str()) == std::vector<std::string>{"step-5"});
  const auto latest = store.find_latest();
  REQUIRE(latest == dir->file("step-5"));
  CHECK(torch::equal(store.load_tensors(*latest, {victim}).at(victim),
                     make_shard(last, 5).tensors.at(victim)));
  world->barrier();
}

namespace {

/// Rank 0: copies `from` to step-`step` as a checkpoint written before saves checked tensors (no
/// "all_finite" in its manifest), with rank-0's `poison` tensor (if not empty) set to NaN at
/// element 0; the manifest's sizes, checksums and own checksum are made to match.
void copy_as_unchecked(const std::string& from, const std::string& root, int64_t step,
                       const std::string& poison) {
  const std::string to = root + "/step-" + std::to_string(step);
  fs::copy(from, to, fs::copy_options::recursive);
  CheckpointManifest m = CheckpointManifest::read(to);
  m.step = step;
  m.all_finite = false;
  if (!poison.empty()) {
    const std::string path = to + "/rank-0.safetensors";
    std::map<std::string, torch::Tensor> tensors;
    {
      const omnibal::checkpoint::SafetensorsFile file(path);
      for (const auto& name : file.names()) tensors[name] = file.tensor(name).clone();
    }
    tensors.at(poison).view(-1)[0] = NAN;
    omnibal::checkpoint::write_safetensors(path, tensors);
    for (auto& f : m.files)
      if (f.name == "rank-0.safetensors") {
        const auto d = omnibal::checkpoint::digest_file(path);
        f.bytes = d.bytes;
        f.xxh3_64 = d.hex();
      }
  }
  std::ofstream(to + "/manifest.json") << m.to_json().dump(1) << "\n";
}

}  // namespace

TEST_CASE("find_latest skips an older checkpoint holding a NaN; verify names the tensor",
          "[store][nonfinite]") {
  auto world = world_comm();
  auto dir = shared_dir(*world, "ckpt_old_nan");
  CheckpointStore store(dir->str(), 0, *world);
  store.save(2, make_shard(world->rank(), 2), "x: 1\n");
  if (world->rank() == 0) {
    // step-3: unchecked and NaN (a diverged run of an older build); step-1: unchecked, finite.
    copy_as_unchecked(dir->file("step-2"), dir->str(), 3, "unit_0.w");
    copy_as_unchecked(dir->file("step-2"), dir->str(), 1, "");
  }
  world->barrier();
  CHECK_NOTHROW(store.verify(dir->file("step-1")));  // checksums match: only the NaN differs
  CHECK_THROWS_WITH(store.verify(dir->file("step-3")),
                    Catch::Contains("holds non-finite (NaN / Inf) tensors") &&
                        Catch::Contains("rank-0.safetensors: 'unit_0.w' holds 1 nan and 0 inf "
                                        "of 12 values"));
  CHECK(store.find_latest() == dir->file("step-2"));
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir->file("step-2"));
  world->barrier();
  CHECK(store.find_latest() == dir->file("step-1"));  // an unchecked but finite one still loads
  world->barrier();
}
