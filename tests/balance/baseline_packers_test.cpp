#include "balance/baseline_packers.h"

#include <catch2/catch.hpp>

#include "core/error.h"
#include "test_tables.h"

using namespace omnibal::balance;
using omnibal::balance::testing::require_partition;
using omnibal::balance::testing::synthetic_table;

namespace {

SampleTable tokens_table(const std::vector<int32_t>& tokens) {
  SampleTable t;
  t.add_dataset({"d", "p", 0, 0, 1.0});
  for (uint32_t i = 0; i < tokens.size(); ++i) t.add(0, i, Load{{1, tokens[i]}}, 1);
  return t;
}

std::vector<uint32_t> members(const PackList& p, size_t k) { return {p.begin(k), p.end(k)}; }

}  // namespace

TEST_CASE("random micro-batches: all samples, batch sized, deterministic", "[balance][baseline]") {
  const size_t n = GENERATE(1, 10, 1001);
  const int batch = GENERATE(1, 4, 7);
  const SampleTable t = synthetic_table(n, n);
  const PackResult r = random_micro_batches(t, batch, 3);
  require_partition(r, n);
  CHECK(r.packs.layout() == PackLayout::kPadded);
  CHECK(r.packs.size() == (n + batch - 1) / batch);
  for (size_t p = 0; p + 1 < r.packs.size(); ++p) CHECK(r.packs.load(p).count == batch);
  CHECK(random_micro_batches(t, batch, 3).packs.members() == r.packs.members());
}

TEST_CASE("length-grouped: LLaVA split_to_even_chunks by hand", "[balance][baseline]") {
  // dp = 2, batch = 2, m = 1: one megabatch of 4 (all samples), sorted 90, 70, 40, 10.
  // 90 -> chunk 0 (totals 90, 0); 70 -> chunk 1 (90, 70); 40 -> chunk 1, now full;
  // 10 -> chunk 0. Ranks get {90, 10} and {70, 40}.
  const SampleTable t = tokens_table({40, 90, 10, 70});
  const PackResult r = length_grouped_micro_batches(t, 2, 2, 1, 1);
  REQUIRE(r.packs.size() == 2);
  CHECK(members(r.packs, 0) == std::vector<uint32_t>{1, 2});
  CHECK(members(r.packs, 1) == std::vector<uint32_t>{3, 0});
}

TEST_CASE("length-grouped: all samples and step layout", "[balance][baseline]") {
  const int dp = GENERATE(1, 4);
  const int m = GENERATE(1, 3);
  const SampleTable t = synthetic_table(997, 2);
  const PackResult r = length_grouped_micro_batches(t, 4, dp, m, 5);
  require_partition(r, t.size());
  const size_t full_steps = 997 / (4 * dp * m);
  for (size_t p = 0; p < full_steps * dp * m; ++p) REQUIRE(r.packs.load(p).count == 4);
}

TEST_CASE("best-fit decreasing on tokens by hand", "[balance][baseline]") {
  // Q_t = 10, tokens 6 5 4 3 2: 6 -> bin0 (room 4); 5 -> bin1 (room 5); 4 -> bin0 (fullest
  // that fits, room 0); 3 -> bin1 (room 2); 2 -> bin1 (room 0).
  const SampleTable t = tokens_table({3, 6, 2, 5, 4});
  const PackResult r = best_fit_packing(t, 10, OnBadSample::kError, 1);
  REQUIRE(r.packs.size() == 2);
  std::vector<std::vector<uint32_t>> got = {members(r.packs, 0), members(r.packs, 1)};
  for (auto& g : got) std::sort(g.begin(), g.end());
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<std::vector<uint32_t>>{{0, 2, 3}, {1, 4}});
}

TEST_CASE("best-fit: budget kept, over-budget policy", "[balance][baseline]") {
  const SampleTable t = synthetic_table(2000, 8);
  const PackResult r = best_fit_packing(t, 4096, OnBadSample::kSkip, 2);
  require_partition(r, t.size());
  for (size_t p = 0; p < r.packs.size(); ++p) REQUIRE(r.packs.load(p).sum[kTokens] <= 4096);
  const SampleTable big = tokens_table({100, 5000});
  CHECK_THROWS_WITH(best_fit_packing(big, 4096, OnBadSample::kError, 1),
                    Catch::Contains("sample 1 of dataset 'd'") && Catch::Contains("Q_t = 4096"));
  CHECK(best_fit_packing(big, 4096, OnBadSample::kSkip, 1).skipped == std::vector<uint32_t>{1});
}

TEST_CASE("random micro-batches close a pack before the token cap", "[balance][baseline][cap]") {
  // 24 samples per pack of ~1,300 tokens each would be ~31K tokens: a 4,096 cap closes early.
  const int64_t cap = GENERATE(1500, 4096, 10000);
  const int batch = GENERATE(1, 4, 24);
  const SampleTable t = synthetic_table(1000, 5);  // tokens 276 .. 2,099
  const PackResult r = random_micro_batches(t, batch, 3, cap, OnBadSample::kSkip);
  require_partition(r, t.size());
  for (size_t p = 0; p < r.packs.size(); ++p) {
    REQUIRE(r.packs.load(p).sum[kTokens] <= cap);
    REQUIRE(r.packs.load(p).count <= batch);
  }
  for (uint32_t id : r.skipped) CHECK(t.load[id].tokens() > cap);
  CHECK((cap >= 2100) == r.skipped.empty());
}

TEST_CASE("random micro-batches under a cap, by hand", "[balance][baseline][cap]") {
  // batch 3, cap 100: in shuffled order a pack closes at 3 samples or before going over 100.
  const SampleTable t = tokens_table({60, 30, 50, 10, 40, 20});
  const PackResult r = random_micro_batches(t, 3, 9, 100);
  require_partition(r, t.size());
  const auto& order = r.packs.members();  // the shuffled order, cut into packs
  size_t k = 0;
  for (size_t p = 0; p < r.packs.size(); ++p) {
    int64_t sum = 0;
    for (const uint32_t* it = r.packs.begin(p); it != r.packs.end(p); ++it, ++k)
      sum += t.load[*it].tokens();
    CHECK(sum <= 100);
    // The pack closed because it was full, or because the next sample would not fit.
    if (k < order.size())
      CHECK((r.packs.load(p).count == 3 || sum + t.load[order[k]].tokens() > 100));
  }
}

TEST_CASE("length-grouped micro-batches keep the token cap", "[balance][baseline][cap]") {
  const int dp = GENERATE(1, 4);
  const int m = GENERATE(1, 3);
  const SampleTable t = synthetic_table(997, 2);
  const PackResult r = length_grouped_micro_batches(t, 8, dp, m, 5, 4096, OnBadSample::kError);
  require_partition(r, t.size());
  for (size_t p = 0; p < r.packs.size(); ++p) {
    REQUIRE(r.packs.load(p).sum[kTokens] <= 4096);
    REQUIRE(r.packs.load(p).count <= 8);
  }
  // Without the cap the same call builds packs over it (so the cap did the work).
  const PackResult free = length_grouped_micro_batches(t, 8, dp, m, 5);
  bool over = false;
  for (size_t p = 0; p < free.packs.size(); ++p) over |= free.packs.load(p).sum[kTokens] > 4096;
  CHECK(over);
}

TEST_CASE("a sample over the cap: an error naming it, or a counted skip",
          "[balance][baseline][cap]") {
  const SampleTable t = tokens_table({100, 1500, 200});
  for (int method = 0; method < 2; ++method) {
    auto run = [&](OnBadSample policy) {
      return method == 0 ? random_micro_batches(t, 4, 1, 1024, policy)
                         : length_grouped_micro_batches(t, 4, 1, 1, 1, 1024, policy);
    };
    INFO((method == 0 ? "random" : "length-group"));
    CHECK_THROWS_WITH(run(OnBadSample::kError), Catch::Contains("sample 1 of dataset 'd'") &&
                                                    Catch::Contains("1500 tokens") &&
                                                    Catch::Contains("llm.max_seq_len 1024"));
    const PackResult r = run(OnBadSample::kSkip);
    CHECK(r.skipped == std::vector<uint32_t>{1});
    require_partition(r, t.size());
  }
}
