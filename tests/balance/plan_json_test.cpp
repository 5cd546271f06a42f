#include "balance/plan_json.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "test_tables.h"

using namespace omnibal::balance;
using omnibal::balance::testing::synthetic_table;
using omnibal::balance::testing::TempFile;

TEST_CASE("plan file round trip keeps every pack and the hash", "[balance][plan]") {
  const int m = GENERATE(1, 2);
  const SampleTable t = synthetic_table(3000, 6, 3);
  PlannerOptions o;
  o.dp = 4;
  o.micro_batches = m;
  o.budgets = {20, 6144, 6016};
  o.seed = 77;
  const MethodResult r = plan_method(t, Method::kIsf, o);
  TempFile f("plan.json", "");
  write_plan_json(f.path, t, r, o);
  const PlanFile p = read_plan_json(f.path);
  CHECK(p.method == "isf");
  CHECK(p.dp == 4);
  CHECK(p.micro_batches == m);
  CHECK(p.seed == 77);
  CHECK(p.budgets.q_tok == 6144);
  CHECK(p.datasets.size() == 3);
  CHECK(p.hash == plan_hash(t, r.packing.packs, r.plan));
  REQUIRE(p.steps() == r.plan.steps());
  REQUIRE(p.carried.size() == r.plan.carried.size());
  for (size_t s = 0; s < p.steps(); ++s)
    for (int rank = 0; rank < 4; ++rank)
      for (int k = 0; k < m; ++k) {
        const auto& got = p.pack(s, rank, k);
        const uint32_t pk = r.plan.pack(s, rank, k);
        REQUIRE(got.size() == static_cast<size_t>(r.packing.packs.load(pk).count));
        const uint32_t first = *r.packing.packs.begin(pk);
        REQUIRE(got[0] == SampleRef{t.dataset[first], t.index[first]});
      }
}

TEST_CASE("plan file: an edited plan fails its hash check", "[balance][plan]") {
  const SampleTable t = synthetic_table(500, 1);
  PlannerOptions o;
  o.dp = 2;
  o.budgets = {20, 6144, 6016};
  const MethodResult r = plan_method(t, Method::kIsf, o);
  TempFile f("plan.json", "");
  write_plan_json(f.path, t, r, o);
  std::stringstream buf;
  buf << std::ifstream(f.path).rdbuf();
  std::string text = buf.str();
  const auto pos = text.find("\"steps\":[[[[[0,");
  REQUIRE(pos != std::string::npos);
  text.replace(pos + 13, 1, "1");  // move the first sample to another dataset id
  TempFile g("edited.json", text);
  CHECK_THROWS_WITH(read_plan_json(g.path), Catch::Contains("does not match the plan's content"));
  TempFile h("not_plan.json", R"({"format": "other"})");
  CHECK_THROWS_WITH(read_plan_json(h.path), Catch::Contains("not a data plan"));
}

TEST_CASE("plan hash changes with the placement", "[balance][plan]") {
  const SampleTable t = synthetic_table(2000, 2);
  PlannerOptions o;
  o.dp = 8;
  o.budgets = {20, 6144, 6016};
  const MethodResult a = plan_method(t, Method::kIsf, o);
  o.seed = 1025;
  const MethodResult b = plan_method(t, Method::kIsf, o);
  CHECK(plan_hash(t, a.packing.packs, a.plan) != plan_hash(t, b.packing.packs, b.plan));
  o.seed = 1024;
  const MethodResult c = plan_method(t, Method::kIsf, o);
  CHECK(plan_hash(t, a.packing.packs, a.plan) == plan_hash(t, c.packing.packs, c.plan));
}
