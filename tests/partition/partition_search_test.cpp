#include "partition/partition_search.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "core/error.h"

using namespace omnibal::partition;

TEST_CASE("neighbourhood has (2r+1)^(P-1) cut vectors before filtering", "[partition][search]") {
  const int P = GENERATE(2, 3, 4, 5);
  const int r = GENERATE(1, 2);
  const Partition anchor = uniform_partition(40, P);
  const auto cuts = neighbourhood_cuts(anchor, r);
  CHECK(cuts.size() == static_cast<size_t>(std::pow(2 * r + 1, P - 1)));
  CHECK(cuts.front() == anchor.boundaries());
  CHECK(std::set<std::vector<int>>(cuts.begin(), cuts.end()).size() == cuts.size());
  for (const auto& c : cuts)
    for (size_t k = 0; k < c.size(); ++k) CHECK(std::abs(c[k] - anchor.boundaries()[k]) <= r);
}

TEST_CASE("the paper's 27 candidates for 4 stages with r = 1", "[partition][search]") {
  CHECK(neighbourhood_cuts(Partition{{5, 5, 5, 5}}, 1).size() == 27);
}

TEST_CASE("search drops empty stages and over-budget candidates and ranks by score",
          "[partition][search]") {
  PartitionSearchInput in;
  in.unit_seconds = {1, 1, 1, 1, 1, 1};
  in.output_bytes = {0, 0, 0, 0, 0, 0};
  in.stages = 3;
  in.radius = 1;
  in.top_k = 4;
  // Anchor [2, 2, 2] (cuts 2, 4): 9 cut vectors, of which cuts (3, 3) leave stage 1 empty; the
  // greedy and refined anchors are the same, so their 2 x 9 are duplicates.
  in.rank_by = PartitionSearchInput::RankBy::kVarianceTraffic;
  auto r = search_partitions(in);
  CHECK(r.exact_anchor.sizes == std::vector<int>{2, 2, 2});
  CHECK(r.refined_anchor.sizes == std::vector<int>{2, 2, 2});
  CHECK(r.generated == 27);
  CHECK(r.non_empty == 8);
  CHECK(r.fitting == 8);
  REQUIRE(r.top.size() == 4);
  CHECK(r.top[0].partition.sizes == std::vector<int>{2, 2, 2});
  CHECK(r.top[0].stage_std_s == Approx(0).margin(1e-12));
  // Next best: one unit moved (stage times {1,3,2} etc.): std sqrt(2/3).
  CHECK(r.top[1].stage_std_s == Approx(std::sqrt(2.0 / 3.0)));
  // A unit of the anchor made heavy on memory: everything with a stage of 3 units "does not fit".
  in.fits = [](const Partition& p) {
    for (int s : p.sizes)
      if (s > 2) return false;
    return true;
  };
  r = search_partitions(in);
  CHECK(r.fitting == 1);
  in.fits = [](const Partition&) { return false; };
  CHECK_THROWS_WITH(search_partitions(in), Catch::Contains("fits the memory budget"));
}

TEST_CASE("pipeline time sees stage position: front-heavy beats back-heavy",
          "[partition][search]") {
  // Hand-computed 1F1B, m = 2: heavy stage first (f 2, b 4; then f 1, b 2) ends at 13 s,
  // heavy stage last at 15 s, although both have the same stage-time variance.
  PartitionSearchInput in;
  in.stages = 2;
  in.micro_batches = 2;
  in.output_bytes = {0, 0};
  in.unit_seconds = {6, 3};
  in.unit_forward_s = {2, 1};
  CHECK(pipeline_seconds(Partition{{1, 1}}, in) == Approx(13));
  in.unit_seconds = {3, 6};
  in.unit_forward_s = {1, 2};
  CHECK(pipeline_seconds(Partition{{1, 1}}, in) == Approx(15));
}

TEST_CASE("pipeline time adds a host cost per micro-batch to its rank's forwards",
          "[partition][search]") {
  // The 13 s case above (stage 0: f 2, b 4; stage 1: f 1, b 2; m 2). 1 s of host work per
  // micro-batch on stage 0: F0 [0, 3], F1 [3, 6]; stage 1 F0 [3, 4], B0 [4, 6]; stage 0 B0
  // [6, 10]; stage 1 F1 [6, 7], B1 [7, 9]; stage 0 B1 [10, 14]. 2 s on stage 1 instead: its
  // forwards take 3 s, stage 0's B1 runs [12, 16].
  PartitionSearchInput in;
  in.stages = 2;
  in.micro_batches = 2;
  in.output_bytes = {0, 0};
  in.unit_seconds = {6, 3};
  in.unit_forward_s = {2, 1};
  in.rank_micro_batch_s = {1, 0};
  CHECK(pipeline_seconds(Partition{{1, 1}}, in) == Approx(14));
  in.rank_micro_batch_s = {0, 2};
  CHECK(pipeline_seconds(Partition{{1, 1}}, in) == Approx(16));
  in.rank_micro_batch_s = {0, 0, 0};
  CHECK_THROWS_WITH(pipeline_seconds(Partition{{1, 1}}, in), Catch::Contains("3 host costs"));
  in.rank_micro_batch_s = {-1, 0};
  CHECK_THROWS_WITH(pipeline_seconds(Partition{{1, 1}}, in), Catch::Contains("negative host"));
  // Ten equal units (f 1, b 2), m 4: [5, 5] is the fastest split; 6 s of host work per
  // micro-batch on stage 0 (two units' worth) makes [4, 6] (18 s per micro-batch on each stage)
  // the search's pick.
  PartitionSearchInput ten;
  ten.stages = 2;
  ten.micro_batches = 4;
  ten.unit_seconds.assign(10, 3.0);
  ten.unit_forward_s.assign(10, 1.0);
  ten.output_bytes.assign(10, 0.0);
  CHECK(search_partitions(ten).top.at(0).partition.sizes == std::vector<int>{5, 5});
  ten.rank_micro_batch_s = {6, 0};
  const auto r = search_partitions(ten);
  CHECK(r.top.at(0).partition.sizes == std::vector<int>{4, 6});
  // Stage 1 is busy 4 x 18 s from the end of stage 0's first forward (4 + 6 s) on; stage 0's
  // last backward (8 s) follows: 10 + 72 + 8 = 90 s.
  CHECK(r.top.at(0).pipeline_s == Approx(90));
}

TEST_CASE("refined anchor is a local optimum of pipeline time", "[partition][search]") {
  PartitionSearchInput in;
  in.stages = 4;
  in.micro_batches = 4;
  for (int u = 0; u < 24; ++u) {
    in.unit_seconds.push_back(u < 10 ? 3.0 : 2.0);  // a heavy "ViT" then a light "LLM"
    in.output_bytes.push_back(1e8);
  }
  in.link_bandwidth = 1e10;
  const auto r = search_partitions(in);
  const double best = pipeline_seconds(r.refined_anchor, in);
  CHECK(best <= pipeline_seconds(r.exact_anchor, in) + 1e-12);
  CHECK(best <= pipeline_seconds(uniform_partition(24, 4), in) + 1e-12);
  const auto cuts = r.refined_anchor.boundaries();
  for (size_t k = 0; k < cuts.size(); ++k)
    for (int d : {-1, 1}) {
      auto c = cuts;
      c[k] += d;
      if (c[k] <= (k ? c[k - 1] : 0) || c[k] >= (k + 1 < c.size() ? c[k + 1] : 24)) continue;
      CHECK(pipeline_seconds(Partition::from_boundaries(c, 24), in) >= best - 1e-12);
    }
  // Ranked by pipeline time, best first.
  for (size_t i = 1; i < r.top.size(); ++i) CHECK(r.top[i - 1].pipeline_s <= r.top[i].pipeline_s);
}

TEST_CASE("communication breaks ties between equally balanced splits", "[partition][search]") {
  PartitionSearchInput in;
  in.unit_seconds = {1, 1, 1, 1};
  in.output_bytes = {8e9, 1e9, 8e9, 0};  // cutting after unit 1 is cheap
  in.link_bandwidth = 1e10;
  in.stages = 2;
  in.top_k = 3;
  in.rank_by = PartitionSearchInput::RankBy::kVarianceTraffic;
  const auto r = search_partitions(in);
  REQUIRE(!r.top.empty());
  // [2, 2] is perfectly balanced and sends 1 GB: score 0 + 2 * 0.1 s.
  CHECK(r.top[0].partition.sizes == std::vector<int>{2, 2});
  CHECK(r.top[0].score == Approx(0.2));
  // [1, 3] (std 1 s + 1.6 s) and [3, 1] (std 1 s + 1.6 s) rank after.
  CHECK(r.top[1].score == Approx(1.0 + 1.6));
}
