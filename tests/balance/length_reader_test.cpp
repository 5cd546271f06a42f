#include "balance/length_reader.h"

#include <catch2/catch.hpp>

#include "core/error.h"
#include "test_tables.h"

using namespace omnibal::balance;
using Catch::Contains;
using omnibal::balance::testing::TempFile;

namespace {
const char* kGood = R"([{"vit_num": 5, "token_num": 1341, "image_flags": 5},
                        {"vit_num": -1, "token_num": 0, "image_flags": 0},
                        {"vit_num": 1, "token_num": 300, "image_flags": 0},
                        {"vit_num": 3, "token_num": 811}])";
}

TEST_CASE("length file: loads, provenance and failed statistics", "[balance][reader]") {
  TempFile f("ai2d_token_lengths.json", kGood);
  SampleTable t;
  read_length_file(f.path, "ai2d", 1.0, 1024, t);
  REQUIRE(t.size() == 3);        // the vit_num = -1 record is skipped ...
  CHECK(t.failed_stats() == 1);  // ... and counted
  CHECK(t.load[0].tiles() == 5);
  CHECK(t.load[0].tokens() == 1341);
  CHECK(t.index[1] == 2);  // in-file element index survives the skip
  CHECK(t.image_flags[1] == 0);
  CHECK(t.image_flags[2] == 3);  // image_flags defaults to vit_num
  CHECK(t.datasets[0].name == "ai2d");
  CHECK(t.datasets[0].records == 4);
  CHECK(t.describe(1) == "sample 2 of dataset 'ai2d' (" + f.path + ")");
}

TEST_CASE("length file: a failed-statistics record as omnibal-plan scan writes it (-1, -1)",
          "[balance][reader]") {
  TempFile f("scan.json", R"([{"vit_num": 2, "token_num": 300, "image_flags": 1},
                              {"vit_num": -1, "token_num": -1, "image_flags": 0}])");
  SampleTable t;
  read_length_file(f.path, "scan", 1.0, 1024, t);
  CHECK(t.size() == 1);
  CHECK(t.failed_stats() == 1);
  TempFile bad("bad.json", R"([{"vit_num": 2, "token_num": -1}])");
  CHECK_THROWS_WITH(read_length_file(bad.path, "bad", 1.0, 1024, t),
                    Contains("field \"token_num\" = -1 out of range"));
}

TEST_CASE("length file: repeat_time copies and seeded subsets", "[balance][reader]") {
  TempFile f("x.json", kGood);
  SampleTable twice, half, one_half;
  read_length_file(f.path, "x", 2, 1024, twice);
  CHECK(twice.size() == 6);                        // 2 x (3 usable records) ...
  CHECK(twice.failed_stats() == 2);                // ... and the failed one counted per copy
  CHECK(twice.index[3] == 0);                      // the second copy starts again at element 0
  read_length_file(f.path, "x", 0.5, 1024, half);  // floor(4 * 0.5) = 2 seeded records
  CHECK(static_cast<int64_t>(half.size()) + half.failed_stats() == 2);
  read_length_file(f.path, "x", 1.5, 1024, one_half);  // non-integer above 1: 4 + 2 records
  CHECK(static_cast<int64_t>(one_half.size()) + one_half.failed_stats() == 6);
  CHECK(one_half.datasets[0].repeat_time == 1.5);
  CHECK(one_half.datasets[0].records == 4);  // the file's records, before repeat_time
}

TEST_CASE("length file: 48 records at repeat_time 2 and 0.5 give 96 and 24 samples",
          "[balance][reader]") {
  std::string doc = "[";
  for (int i = 0; i < 48; ++i)
    doc += std::string(i ? "," : "") + R"({"vit_num": 1, "token_num": )" + std::to_string(100 + i) +
           "}";
  TempFile f("48.json", doc + "]");
  for (const auto& [r, n] : {std::pair{2.0, 96}, {0.5, 24}, {1.0, 48}}) {
    SampleTable t;
    read_length_file(f.path, "x", r, 1024, t);
    CHECK(static_cast<int>(t.size()) == n);
  }
  SampleTable a, b, c;
  read_length_file(f.path, "x", 0.5, 1024, a);
  read_length_file(f.path, "x", 0.5, 1024, b);
  read_length_file(f.path, "x", 0.5, 7, c);
  CHECK(a.index == b.index);  // same seed, same records
  CHECK(a.index != c.index);  // another seed draws others
}

TEST_CASE("length file: malformed input names file and element", "[balance][reader]") {
  struct Case {
    const char* content;
    const char* message;
  };
  const Case cases[] = {
      {R"({"vit_num": 1})", "expected a JSON array"},
      {R"([{"vit_num": 1, "token_num": 5}, 7])", "element 1: expected an object"},
      {R"([{"vit_num": 1, "token_num": 5}, {"token_num": 5}])",
       "element 1: missing field \"vit_num\""},
      {R"([{"vit_num": 1, "token_num": -4}])", "element 0: field \"token_num\" = -4 out of range"},
      {R"([{"vit_num": -2, "token_num": 4}])", "element 0: field \"vit_num\" = -2 out of range"},
      {R"([{"vit_num": 1.5, "token_num": 4}])", "element 0: field \"vit_num\" must be an integer"},
      {R"([{"vit_num": "3", "token_num": 4}])", "must be an integer, got \"3\""},
      {R"([{"vit_num": 2, "token_num": 4, "image_flags": 3}])",
       "element 0: image_flags 3 exceeds vit_num 2"},
      {R"([{"vit_num": 2, "token_num": 4},)", "not valid JSON"},
  };
  for (const auto& c : cases) {
    TempFile f("bad.json", c.content);
    SampleTable t;
    INFO(c.content);
    REQUIRE_THROWS_AS(read_length_file(f.path, "bad", 1.0, 1024, t), omnibal::Error);
    SampleTable t2;
    REQUIRE_THROWS_WITH(read_length_file(f.path, "bad", 1.0, 1024, t2),
                        Contains(f.path) && Contains(c.message));
  }
  SampleTable t;
  CHECK_THROWS_WITH(read_length_file("/nonexistent/l.json", "x", 1.0, 1024, t),
                    Contains("/nonexistent/l.json: cannot open"));
  TempFile ok("ok.json", kGood);
  CHECK_THROWS_WITH(read_length_file(ok.path, "x", 0, 1024, t),
                    Contains(ok.path) && Contains("repeat_time must be a number > 0, got 0"));
}

TEST_CASE("meta file: datasets in file order, relative paths, repeat_time", "[balance][reader]") {
  TempFile a("a_token_lengths.json", R"([{"vit_num": 1, "token_num": 10, "image_flags": 1}])");
  TempFile b("b_token_lengths.json", kGood);
  const std::string b_name = std::filesystem::path(b.path).filename().string();
  TempFile meta("meta.json",
                R"({"zeta": {"root": "r", "annotation": "x.jsonl", "token_lengths": ")" + a.path +
                    R"(", "repeat_time": 3},
                                 "alpha": {"token_lengths": ")" +
                    b_name + R"("}})");
  const SampleTable t = read_meta_file(meta.path, 1024);
  REQUIRE(t.datasets.size() == 2);
  CHECK(t.datasets[0].name == "zeta");  // file order, not sorted
  CHECK(t.datasets[1].name == "alpha");
  CHECK(t.size() == 3 + 3);
  CHECK(t.dataset[3] == 1);
  CHECK(t.failed_stats() == 1);
}

TEST_CASE("meta file: malformed entries name the key", "[balance][reader]") {
  TempFile m1("m1.json", R"({"ds": {"annotation": "a"}})");
  CHECK_THROWS_WITH(read_meta_file(m1.path, 1024),
                    Contains("dataset \"ds\": missing string key \"token_lengths\""));
  TempFile m2("m2.json", R"({"ds": {"token_lengths": "x.json", "repeat_time": "2"}})");
  CHECK_THROWS_WITH(read_meta_file(m2.path, 1024), Contains("\"repeat_time\" must be a number"));
  TempFile m3("m3.json", R"([1, 2])");
  CHECK_THROWS_WITH(read_meta_file(m3.path, 1024),
                    Contains(m3.path) && Contains("expected a non-empty JSON object"));
  TempFile m4("m4.json", R"({"ds": {"token_lengths": "does_not_exist.json"}})");
  CHECK_THROWS_WITH(read_meta_file(m4.path, 1024),
                    Contains("does_not_exist.json: cannot open length file"));
  TempFile m5("m5.json", R"({"ds": {"token_lengths": "x.json", "repeat_time": -0.5}})");
  CHECK_THROWS_WITH(read_meta_file(m5.path, 1024),
                    Contains(m5.path) &&
                        Contains("dataset \"ds\": \"repeat_time\" must be > 0, got -0.5"));
}

TEST_CASE("dataset names come from the file stem", "[balance][reader]") {
  CHECK(dataset_name_from_path("/d/ai2d_train_12k_wh_token_lengths.json") == "ai2d_train_12k_wh");
  CHECK(dataset_name_from_path("x/other.json") == "other");
}
