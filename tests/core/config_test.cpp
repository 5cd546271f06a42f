#include "core/config.h"

#include <catch2/catch.hpp>

#include "core/error.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace omnibal;

namespace {
std::string error_of(const std::string& yaml, std::vector<std::string> overrides = {}) {
  try {
    parse_config(yaml, "test.yaml", overrides);
  } catch (const omnibal::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("config parses sections and keeps defaults for missing keys", "[core][config]") {
  const auto c = parse_config(
      "parallel:\n  dp: 4\n  pp: 2\n  micro_batches: 8\n"
      "balance:\n  method: random\n  q_vit: 20\n  q_tok: 6656\n  q_tok_thresh: 6528\n"
      "train:\n  freeze: [vit]\n",
      "test.yaml");
  CHECK(c.parallel.dp == 4);
  CHECK(c.parallel.pp == 2);
  CHECK(c.parallel.micro_batches == 8);
  CHECK(c.parallel.partition.method == PartitionMethod::kBalanced);
  CHECK(c.balance.method == BalanceMethod::kRandom);
  CHECK(c.balance.q_tok == 6656);
  CHECK(c.balance.iterations == 50);
  REQUIRE(c.train.freeze.size() == 1);
  CHECK(c.train.freeze[0] == UnitGroup::kVit);
}

TEST_CASE("partition and recompute accept names and lists", "[core][config]") {
  auto c = parse_config(
      "parallel:\n  pp: 2\n  partition: {manual: [3, 5]}\nmemory:\n  recompute: [1, 0]\n",
      "test.yaml");
  CHECK(c.parallel.partition.method == PartitionMethod::kManual);
  CHECK(c.parallel.partition.manual == std::vector<int>{3, 5});
  CHECK(c.memory.recompute.mode == RecomputeMode::kPerStage);
  CHECK(c.memory.recompute.per_stage == std::vector<int>{1, 0});
  c = parse_config("parallel:\n  partition: uniform\nmemory:\n  recompute: full\n", "t.yaml");
  CHECK(c.parallel.partition.method == PartitionMethod::kUniform);
  CHECK(c.memory.recompute.mode == RecomputeMode::kFull);
}

TEST_CASE("set overrides (--set a.b=c) change any key, including nested lists", "[core][config]") {
  const auto c = parse_config("parallel:\n  dp: 4\n", "test.yaml",
                              {"parallel.dp=2", "balance.seed=7", "parallel.pp=2",
                               "parallel.partition={manual: [1, 2]}", "runtime.run_dir=/tmp/x"});
  CHECK(c.parallel.dp == 2);
  CHECK(c.parallel.pp == 2);
  CHECK(c.balance.seed == 7);
  CHECK(c.parallel.partition.manual == std::vector<int>{1, 2});
  CHECK(c.runtime.run_dir == "/tmp/x");
}

TEST_CASE("unknown keys are errors naming file, line and key", "[core][config]") {
  const auto msg = error_of("parallel:\n  dp: 2\n  dpp: 3\n");
  CHECK_THAT(msg, Catch::Contains("test.yaml:3"));
  CHECK_THAT(msg, Catch::Contains("unknown key 'parallel.dpp'"));
  CHECK_THAT(msg, Catch::Contains("micro_batches"));  // lists the known keys
  CHECK_THAT(error_of("bogus: 1\n"), Catch::Contains("unknown key 'bogus'"));
  CHECK_THAT(error_of("", {"parallel.nope=1"}), Catch::Contains("unknown key 'parallel.nope'"));
}

TEST_CASE("errors in --set values name the override, not a line of the file", "[core][config]") {
  const std::string file = "parallel:\n  dp: 1\ntrain:\n  steps: 10\n";
  auto msg = error_of(file, {"parallel.pp=2", "train.steps=abc"});
  CHECK_THAT(msg, Catch::Contains(
                      "--set 'train.steps=abc': train.steps: expected an integer, got 'abc'"));
  CHECK_THAT(msg, !Catch::Contains("test.yaml"));
  msg = error_of(file, {"train.stpes=5"});
  CHECK_THAT(msg, Catch::Contains("--set 'train.stpes=5': unknown key 'train.stpes'"));
  // The file's own errors still name file and line, overrides or not.
  CHECK_THAT(error_of(file + "  stpes: 3\n", {"train.steps=5"}),
             Catch::Contains("test.yaml:5: unknown key 'train.stpes'"));
}

TEST_CASE("bad values are errors naming the key and what was expected", "[core][config]") {
  auto msg = error_of("parallel:\n  dp: two\n");
  CHECK_THAT(msg, Catch::Contains("test.yaml:2"));
  CHECK_THAT(msg, Catch::Contains("parallel.dp: expected an integer, got 'two'"));
  CHECK_THAT(error_of("parallel:\n  dp: 0\n"),
             Catch::Contains("parallel.dp: expected a positive value"));
  CHECK_THAT(error_of("", {"parallel.partition_trial_rounds=2"}),
             Catch::Contains("parallel.partition_trial_rounds: expected >= 3"));
  CHECK_THAT(error_of("", {"parallel.partition_trial_steps=0"}),
             Catch::Contains("parallel.partition_trial_steps: expected a positive value, got 0"));
  CHECK_THAT(error_of("balance:\n  method: greedy\n"),
             Catch::Contains("balance.method: expected isf | random | length-group | best-fit | "
                             "multi-source, got 'greedy'"));
  CHECK_THAT(error_of("parallel:\n  pp: 3\n  partition: {manual: [1, 2]}\n"),
             Catch::Contains("one unit count per pipeline stage (3)"));
  CHECK_THAT(error_of("data:\n  on_bad_sample: ignore\n"), Catch::Contains("error | skip"));
  CHECK_THAT(error_of("", {"parallel.dp"}), Catch::Contains("expected key=value"));
  CHECK_THAT(error_of("parallel: [1]\n"), Catch::Contains("parallel: expected a mapping"));
  CHECK_THAT(error_of("parallel:\n  dp: [1\n"), Catch::Contains("invalid YAML"));
}

TEST_CASE("to_yaml round-trips the resolved config", "[core][config]") {
  const auto a = parse_config(
      "parallel:\n  pp: 2\n  partition: {manual: [4, 6]}\ntrain:\n  freeze: [vit, projector]\n"
      "memory:\n  recompute: [2, 1]\n",
      "test.yaml");
  const auto text = omnibal::to_yaml(a);
  const auto b = parse_config(text, "resolved.yaml");
  CHECK(omnibal::to_yaml(b) == text);
  CHECK(b.parallel.partition.manual == std::vector<int>{4, 6});
  CHECK(b.train.freeze == std::vector<UnitGroup>{UnitGroup::kVit, UnitGroup::kProjector});
  CHECK(b.memory.recompute.per_stage == std::vector<int>{2, 1});
}

TEST_CASE("config_differences lists the changed keys with both values", "[core][config]") {
  const auto a =
      parse_config("parallel:\n  dp: 2\n  micro_batches: 2\nbalance:\n  q_tok: 2048\n", "a.yaml");
  const auto b =
      parse_config("parallel:\n  dp: 1\n  micro_batches: 2\nbalance:\n  q_tok: 1024\n", "b.yaml");
  const std::vector<std::string> keys{"parallel.dp", "parallel.micro_batches", "balance.q_tok",
                                      "data.meta"};
  CHECK(omnibal::config_differences(a, b, keys) ==
        std::vector<std::string>{"parallel.dp: 2 -> 1", "balance.q_tok: 2048 -> 1024"});
  CHECK(omnibal::config_differences(a, a, keys).empty());
  // A section lists each changed key; the trees are not changed by the walk.
  CHECK(omnibal::config_differences(a, b, {"balance"}) ==
        std::vector<std::string>{"balance.q_tok: 2048 -> 1024"});
  CHECK(omnibal::config_differences(a, b, {"parallel.dp", "parallel.dp"}).size() == 2);
  CHECK_THROWS_WITH(omnibal::config_differences(a, b, {"parallel.nope"}),
                    Catch::Contains("no key 'parallel.nope'"));
  CHECK(omnibal::config_differences(a, b, {"train.exit_after_steps"}).empty());
}

TEST_CASE("train.exit_after_steps and train.exit_duration_min", "[core][config]") {
  const auto c =
      parse_config("train:\n  exit_after_steps: 3\n  exit_duration_min: 1.5\n", "t.yaml");
  CHECK(c.train.exit_after_steps == 3);
  CHECK(c.train.exit_duration_min == 1.5);
  CHECK_THROWS_WITH(parse_config("train:\n  exit_after_steps: -1\n", "t.yaml"),
                    Catch::Contains("train.exit_after_steps: expected >= 0"));
  CHECK_THROWS_WITH(parse_config("train:\n  exit_duration_min: -2\n", "t.yaml"),
                    Catch::Contains("train.exit_duration_min: expected minutes >= 0"));
}

TEST_CASE("runtime.heap_keep_mb: MiB >= 0, default 1024", "[core][config]") {
  CHECK(parse_config("", "t.yaml").runtime.heap_keep_mb == 1024);
  CHECK(parse_config("runtime:\n  heap_keep_mb: 0\n", "t.yaml").runtime.heap_keep_mb == 0);
  CHECK_THROWS_WITH(parse_config("runtime:\n  heap_keep_mb: -5\n", "t.yaml"),
                    Catch::Contains("runtime.heap_keep_mb: expected MiB >= 0"));
}

TEST_CASE("runtime.device: cpu by default, cuda parsed and printed", "[core][config]") {
  CHECK(parse_config("", "t.yaml").runtime.device == RuntimeDevice::kCpu);
  const auto c = parse_config("runtime:\n  device: cuda\n", "t.yaml");
  CHECK(c.runtime.device == RuntimeDevice::kCuda);
  CHECK(parse_config(to_yaml(c), "printed.yaml").runtime.device == RuntimeDevice::kCuda);
  CHECK_THAT(to_yaml(c), Catch::Contains("device: cuda"));
  CHECK_THAT(to_yaml(parse_config("", "t.yaml")), Catch::Contains("device: cpu"));
  CHECK(parse_config("", "t.yaml", {"runtime.device=cuda"}).runtime.device == RuntimeDevice::kCuda);
  CHECK_THAT(error_of("runtime:\n  device: gpu\n"),
             Catch::Contains("runtime.device: expected cpu | cuda, got 'gpu'"));
}

TEST_CASE("model.init_from, model.allow_missing and loss.reduction", "[core][config]") {
  const auto c = parse_config(
      "model:\n  init_from: /ckpt/InternVL-Chat-V1-5\n  allow_missing: ['projector.*']\n"
      "loss:\n  reduction: square\n",
      "test.yaml");
  CHECK(c.model.init_from == "/ckpt/InternVL-Chat-V1-5");
  CHECK(c.model.allow_missing == std::vector<std::string>{"projector.*"});
  CHECK(c.loss.reduction == LossReduction::kSquare);
  CHECK(parse_config("", "empty.yaml").loss.reduction == LossReduction::kToken);
  CHECK_THAT(error_of("loss:\n  reduction: mean\n"),
             Catch::Contains(
                 "test.yaml:2: loss.reduction: expected token | sample | square, got 'mean'"));
}

namespace {

/// Every leaf key of a YAML tree as "section.key" (nested maps joined with dots; a list or a
/// scalar is a leaf).
void collect_yaml_keys(const YAML::Node& node, const std::string& prefix,
                       std::vector<std::string>& out) {
  if (!node.IsMap()) {
    out.push_back(prefix);
    return;
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    collect_yaml_keys(kv.second, prefix.empty() ? key : prefix + "." + key, out);
  }
}

}  // namespace

// House rule (issue 39): docs/conventions.md documents every config key. The keys come from the
// config itself (to_yaml walks every struct's visit_fields), so a new key without its row in
// the key table fails here, naming the key.
TEST_CASE("every config key has its row in docs/conventions.md", "[core][config]") {
  const std::string path = std::string(OMNIBAL_SOURCE_DIR) + "/docs/conventions.md";
  std::ifstream in(path);
  REQUIRE(in.good());
  // The first cells of the key tables: "| `a.b` |" or "| `a.b`, `a.c` |".
  std::string first_cells, line;
  while (std::getline(in, line))
    if (line.rfind("| `", 0) == 0) first_cells += line.substr(0, line.find(" |", 2)) + "\n";
  std::vector<std::string> keys;
  collect_yaml_keys(YAML::Load(omnibal::to_yaml(omnibal::Config{})), "", keys);
  REQUIRE(keys.size() > 40);  // the walk found the sections, not one node
  std::vector<std::string> missing;
  for (const auto& key : keys)
    if (first_cells.find("`" + key + "`") == std::string::npos) missing.push_back(key);
  INFO("keys without a row (first cell `key`) in " << path << ": " << [&] {
    std::string all;
    for (const auto& k : missing) all += k + " ";
    return all;
  }());
  CHECK(missing.empty());
}

TEST_CASE("train.shard is a choice and the deprecated train.zero1 maps onto it", "[core][config]") {
  CHECK(parse_config("", "test.yaml").train.shard == ShardMode::kNone);
  CHECK(parse_config("train: {shard: optimizer}\n", "test.yaml").train.shard ==
        ShardMode::kOptimizer);
  // The old key reads as shard optimizer and is left false, so to_yaml holds one spelling.
  const Config old = parse_config("train: {zero1: true}\n", "old.yaml");
  CHECK(old.train.shard == ShardMode::kOptimizer);
  CHECK_FALSE(old.train.zero1);
  CHECK(old.train.zero1_on());
  CHECK(to_yaml(old).find("shard: optimizer") != std::string::npos);
  CHECK(parse_config("train: {zero1: true, shard: optimizer}\n", "t.yaml").train.zero1_on());
  CHECK_THAT(error_of("train: {zero1: true, shard: full}\n"),
             Catch::Contains("test.yaml:1") && Catch::Contains("contradicts train.shard full"));
  CHECK_THAT(error_of("train: {shard: full}\n", {"train.zero1=true"}),
             Catch::Contains("--set 'train.zero1=true': train.zero1 true") &&
                 Catch::Contains("contradicts train.shard full"));
  CHECK_THAT(error_of("train: {shard: zero3}\n"),
             Catch::Contains("shard") && Catch::Contains("optimizer"));
  CHECK(parse_config("train: {shard: full}\n", "t.yaml").train.shard == ShardMode::kFull);
  CHECK_THAT(error_of("parallel: {pp: 2}\ntrain: {shard: full}\n"),
             Catch::Contains("test.yaml:2") && Catch::Contains("expected parallel.pp 1") &&
                 Catch::Contains("got parallel.pp 2"));
  CHECK_THAT(error_of("parallel: {schedule: zb-h1}\ntrain: {shard: full}\n"),
             Catch::Contains("ZB-H1") && Catch::Contains("train.shard"));
  CHECK(parse_config("", "test.yaml").comm.overlap);
  CHECK_FALSE(parse_config("comm: {overlap: false}\n", "test.yaml").comm.overlap);
}

TEST_CASE("a value out of range names the file line or the --set that gave it", "[core][config]") {
  const std::string yaml = "train:\n  lr: 0.001\n  steps: -5\n";
  CHECK_THAT(error_of(yaml), Catch::Contains("test.yaml:3: ") &&
                                 Catch::Contains("train.steps: expected >= 0, got -5"));
  CHECK_THAT(error_of("train: {lr: 0.001}\n", {"train.steps=-3"}),
             Catch::Contains("--set 'train.steps=-3': ") && Catch::Contains("got -3"));
  // A later --set wins over the file, and names itself.
  CHECK_THAT(error_of(yaml, {"train.steps=-7"}), Catch::Contains("--set 'train.steps=-7'"));
  // A --set of the section around the key names itself, not line 1 of the file.
  const std::string split = "parallel.partition={manual: [5, 5]}";
  const std::string file = "parallel:\n  pp: 3\n";
  CHECK_THAT(error_of(file, {split}), Catch::StartsWith("--set '" + split + "': ") &&
                                          Catch::Contains("partition.manual: expected one"));
  CHECK_THAT(error_of("parallel:\n  pp: 3\n  partition: {manual: [5, 5]}\n"),
             Catch::StartsWith("test.yaml:3: "));
}

TEST_CASE("parallel.schedule zb-v: 2 chunks per rank, manual splits count 2 x pp",
          "[core][config]") {
  const Config c = parse_config("parallel: {pp: 2, schedule: zb-v}\n", "test.yaml");
  CHECK(c.parallel.schedule == PipelineSchedule::kZbV);
  CHECK(parse_config("parallel: {pp: 2, schedule: zb-v, virtual_stages: 2}\n", "t.yaml")
            .parallel.virtual_stages == 2);
  CHECK_THAT(error_of("parallel: {pp: 2, schedule: zb-v, virtual_stages: 3}\n"),
             Catch::Contains("virtual_stages: 3") && Catch::Contains("zb-v runs 2"));
  // Chunks in model order: stage 0 holds the first and the last.
  CHECK(parse_config("parallel: {pp: 2, schedule: zb-v, partition: {manual: [3, 4, 4, 5]}}\n",
                     "t.yaml")
            .parallel.partition.manual.size() == 4);
  CHECK_THAT(error_of("parallel: {pp: 2, schedule: zb-v, partition: {manual: [8, 8]}}\n"),
             Catch::Contains("2 x pp under zb-v") && Catch::Contains("(4), got 2"));
}
