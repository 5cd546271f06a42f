// Named choices: every enum value has exactly one name, parse and print are inverses, and the
// config reader, writer and errors all use the one table.
#include <catch2/catch.hpp>

#include <set>

#include "core/choices.h"
#include "core/config.h"

using namespace omnibal;

namespace {

// Every value 0..count-1 of E has a name, names are unique, and each parsed name round-trips.
template <class E> void check_table(int count) {
  std::set<std::string> names;
  for (int i = 0; i < count; ++i) {
    const auto name = choice_name(static_cast<E>(i));
    CHECK(name != "?");
    names.insert(name);
  }
  CHECK(static_cast<int>(names.size()) == count);
  CHECK(Choices<E>::names.size() == static_cast<size_t>(count));
  for (size_t i = 0; i < Choices<E>::parsed; ++i) {
    const auto& [value, name] = Choices<E>::names[i];
    CHECK(parse_choice<E>(name, "k") == value);
    CHECK(choice_name(value) == name);
  }
}

}  // namespace

TEST_CASE("choices: one name per value, parse and print are inverses", "[core][choices]") {
  check_table<PartitionMethod>(4);
  check_table<RecomputeMode>(4);
  check_table<BalanceMethod>(6);
  check_table<OnBadSample>(2);
  check_table<PlaceBy>(2);
  check_table<HfStyle>(4);
  check_table<VitNorm>(2);
  check_table<LossReduction>(3);
  check_table<ChatTemplateName>(1);
  check_table<UnitGroup>(3);
  check_table<FailWhere>(4);
}

TEST_CASE("choices: an unknown name lists the choices and names the key", "[core][choices]") {
  CHECK_THROWS_WITH(parse_choice<RecomputeMode>("ful", "memory.recompute"),
                    Catch::Contains(
                        "memory.recompute: expected adaptive | full | none, got 'ful'"));
  // The list and mapping forms are never names.
  CHECK_THROWS_WITH(parse_choice<RecomputeMode>("per_stage", "memory.recompute"),
                    Catch::Contains("got 'per_stage'"));
  CHECK_THROWS_WITH(parse_choice<PartitionMethod>("manual", "parallel.partition"),
                    Catch::Contains("expected balanced | uniform | parameters, got 'manual'"));
  CHECK(choice_list<BalanceMethod>() == "isf | random | length-group | best-fit | multi-source");
}

TEST_CASE("choices: the config reads, writes and refuses them by name", "[core][choices]") {
  const auto c = parse_config(
      "model: {hf_style: llama-fused}\ndata: {on_bad_sample: skip}\ndebug: {fail_at: {where: "
      "loader}}\n"
      "memory: {recompute: none}\nparallel: {partition: parameters}\n",
      "c.yaml");
  CHECK(c.model.hf_style == HfStyle::kLlamaFused);
  CHECK(c.data.on_bad_sample == OnBadSample::kSkip);
  CHECK(c.debug.fail_at.where == FailWhere::kLoader);
  CHECK(c.memory.recompute.mode == RecomputeMode::kNone);
  CHECK(c.parallel.partition.method == PartitionMethod::kParameters);
  const auto yaml = to_yaml(c);
  CHECK_THAT(yaml, Catch::Contains("hf_style: llama-fused"));
  CHECK_THAT(yaml, Catch::Contains("where: loader"));
  CHECK_THAT(yaml, Catch::Contains("recompute: none"));
  CHECK(to_yaml(parse_config(yaml, "again.yaml")) == yaml);
  CHECK_THROWS_WITH(parse_config("memory:\n  recompute: ful\n", "c.yaml"),
                    Catch::Contains("c.yaml:2: memory.recompute: expected adaptive | full | none | "
                                    "[recomputed units per stage], got 'ful'"));
  CHECK_THROWS_WITH(
      parse_config("model:\n  hf_style: qwen\n", "c.yaml"),
      Catch::Contains("c.yaml:2: model.hf_style: expected auto | internlm2 | llama | llama-fused"));
  CHECK(parse_config("balance: {place_by: time}\n", "c.yaml").balance.place_by == PlaceBy::kTime);
  CHECK(parse_config("balance: {}\n", "c.yaml").balance.place_by == PlaceBy::kCount);
  CHECK_THROWS_WITH(parse_config("balance:\n  place_by: size\n", "c.yaml"),
                    Catch::Contains(
                        "c.yaml:2: balance.place_by: expected count | time, got 'size'"));
  // The ablation-only method is a name of the table but not a training method.
  CHECK_THROWS_WITH(parse_config("balance: {method: isf-random-placement}\n", "c.yaml"),
                    Catch::Contains("balance.method: expected isf | random"));
}
