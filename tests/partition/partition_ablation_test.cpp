// The paper's ablation, reproduced on the shared InternVL length files (a real-data test: it
// fails when the data is missing). Checks the ablation's invariants and an acceptance
// band, not particular numbers.
#include "apps/omnibal-plan/partition_ablation.h"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/paths.h"

using namespace omnibal;

TEST_CASE("InternVL 6B+20B ablation on the shared length files", "[partition][ablation][real]") {
  plan::AblationOptions o;
  o.model = "internvl-1.5-6b-20b";
  for (const char* f : {"ai2d_train_12k_wh_token_lengths.json", "chartqa_train_18k_wh_token_lengths.json",
                        "docvqa_train_10k_wh_token_lengths.json"})
    o.lengths.push_back(require_shared_file(std::string("internvl-chat-1.2-lengths/") + f));
  o.dp = 32;
  o.pp = 8;
  o.micro_batches = 8;
  o.global_batch = 1024;
  const auto res = plan::run_partition_ablation(o);
  REQUIRE(res.rows.size() >= 4);
  CHECK(res.epoch_samples == 40941);
  CHECK(res.samples_per_pack == 4);
  // Every step of the chain helps, every row fits its memory budget.
  for (size_t i = 1; i < 4; ++i) CHECK(res.rows[i].epoch_seconds < res.rows[i - 1].epoch_seconds);
  for (const auto& r : res.rows) CHECK(r.fits);
  // The acceptance band for the whole chain (the paper: 2.9x).
  CHECK(res.rows[3].speedup >= 2.0);
  CHECK(res.rows[3].speedup <= 3.5);
  // The breakdown adds up to the difference from the baseline; packs have no padding.
  for (const auto& r : res.rows) {
    CHECK(r.delta.total() == Approx(r.epoch_seconds - res.rows[0].epoch_seconds).margin(1e-6));
    CHECK(r.components.total() == Approx(r.epoch_seconds));
  }
  CHECK(res.rows[1].components.padding_s == 0);
  CHECK(res.rows[0].components.padding_s > 0);
  // Balanced split: no worse than the parameter split it replaces under the same data.
  CHECK(res.rows[2].epoch_seconds < res.rows[1].epoch_seconds);
  const auto j = nlohmann::json::parse(plan::ablation_json(res, o));
  CHECK(j["rows"][3]["name"] == "+ adaptive recompute");
  CHECK(j["rows"][0]["breakdown"]["padding_s"] == 0.0);
}

TEST_CASE("ablation options are checked", "[partition][ablation]") {
  plan::AblationOptions o;
  o.model = "internvl-1.5-6b-20b";
  o.lengths = {"x.json"};
  o.dp = 3;
  o.micro_batches = 5;
  CHECK_THROWS_WITH(plan::run_partition_ablation(o), Catch::Contains("not a multiple of dp * m"));
  o.lengths.clear();
  CHECK_THROWS_WITH(plan::run_partition_ablation(o), Catch::Contains("--lengths"));
}
