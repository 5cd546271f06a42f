// Start-up checks shared by `omnibal-plan scan` and the trainer's load path: a tokenizer larger
// than the preset's vocabulary, datasets of a meta file without a usable sample (error, or a
// warning under data.allow_empty_datasets), and images over data.max_image_pixels found by the
// scan, named by annotation file:line with their size.
#include <catch2/catch.hpp>

#include "core/model_preset.h"
#include "data/input_checks.h"
#include "data/length_scanner.h"
#include "data_fixtures.h"

using namespace omnibal::data;

namespace {

const char* kRecord =
    R"({"image": "ok.png", "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Sneaker"}]})";

SampleOptions options(int64_t max_image_pixels = 89478485) {
  SampleOptions o;
  o.tiling.tile_size = 56;
  o.tiling.max_tiles = 6;
  o.tokens_per_tile = 4;
  o.max_tokens = 1024;
  o.max_image_pixels = max_image_pixels;
  return o;
}

std::vector<SampleLengths> flat(const ScanResult& scan) {
  std::vector<SampleLengths> all;
  for (const auto& l : scan.lengths) all.insert(all.end(), l.begin(), l.end());
  return all;
}

/// A meta file of datasets "full" (two records of ok.png) and "extra" with annotation
/// `extra_lines` (written to extra.jsonl).
std::string two_datasets(const testing::TempDir& dir, const std::string& extra_lines) {
  testing::write_split_png(dir.file("ok.png"), 56, 56, 0, 255);
  testing::write_text(dir.file("full.jsonl"), std::string(kRecord) + "\n" + kRecord + "\n");
  testing::write_text(dir.file("extra.jsonl"), extra_lines);
  testing::write_text(
      dir.file("meta.json"),
      R"({"full": {"annotation": "full.jsonl"}, "extra": {"annotation": "extra.jsonl"}})");
  return dir.file("meta.json");
}

}  // namespace

TEST_CASE("input checks: a tokenizer larger than the preset's vocabulary is refused",
          "[data][input]") {
  const Tokenizer tok(testing::test_tokenizer());
  omnibal::ModelPreset preset = omnibal::load_model_preset("tiny");
  CHECK_NOTHROW(check_tokenizer_fits(tok, preset, "tiny"));
  preset.llm.vocab_size = tok.vocab_size();  // exactly enough rows
  CHECK_NOTHROW(check_tokenizer_fits(tok, preset, "tiny"));
  preset.llm.vocab_size = 300;
  REQUIRE(tok.vocab_size() > 300);
  const std::string pieces = std::to_string(tok.vocab_size());
  CHECK_THROWS_WITH(check_tokenizer_fits(tok, preset, "tiny"),
                    Catch::Contains("data.tokenizer '" + testing::test_tokenizer() + "' has " +
                                    pieces +
                                    " pieces, more than llm.vocab_size 300 of "
                                    "model.preset 'tiny'") &&
                        Catch::Contains("preset with llm.vocab_size >= " + pieces));
}

TEST_CASE("input checks: a dataset with no samples is an error, or a warning when allowed",
          "[data][input]") {
  testing::TempDir dir;
  const std::string meta = two_datasets(dir, "");
  const Tokenizer tok(testing::test_tokenizer());
  const SampleProcessor proc(tok, options());
  const auto ds = ConversationDataset::load(meta, OnBadSample::kError);
  REQUIRE(ds.size() == 2);
  const auto lengths = flat(scan_lengths(ds, proc, OnBadSample::kError, 1));
  CHECK_THROWS_WITH(check_empty_datasets(meta, ds, lengths, false),
                    Catch::Contains("meta file '" + meta +
                                    "' lists 1 dataset without a usable "
                                    "sample:") &&
                        Catch::Contains("dataset 'extra' (annotation '" + dir.file("extra.jsonl") +
                                        "') has no samples") &&
                        Catch::Contains("data.allow_empty_datasets: true") &&
                        !Catch::Contains("'full'"));
  const auto warnings = check_empty_datasets(meta, ds, lengths, true);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::StartsWith("warning: meta file '" + meta + "': dataset 'extra'") &&
                              Catch::Contains("has no samples"));

  // Nothing to say about a meta file whose datasets all have samples.
  testing::write_text(dir.file("extra.jsonl"), std::string(kRecord) + "\n");
  const auto full = ConversationDataset::load(meta, OnBadSample::kError);
  CHECK(check_empty_datasets(meta, full, flat(scan_lengths(full, proc, OnBadSample::kError, 1)),
                             false)
            .empty());
}

TEST_CASE("input checks: a dataset whose every sample was skipped is empty too", "[data][input]") {
  testing::TempDir dir;
  const std::string bad =
      R"({"image": "nope.png", "conversations": [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "Bag"}]})";
  const std::string meta = two_datasets(dir, bad + "\n" + bad + "\n");
  const Tokenizer tok(testing::test_tokenizer());
  const SampleProcessor proc(tok, options());
  const auto ds = ConversationDataset::load(meta, OnBadSample::kSkip);
  const auto scan = scan_lengths(ds, proc, OnBadSample::kSkip, 2);
  CHECK(scan.bad.count(BadSampleReason::kMissingImage) == 2);
  CHECK_THROWS_WITH(check_empty_datasets(meta, ds, flat(scan), false),
                    Catch::Contains("dataset 'extra' (annotation '" + dir.file("extra.jsonl") +
                                    "') has 2 samples, all skipped as bad under "
                                    "data.on_bad_sample: skip"));
  CHECK(check_empty_datasets(meta, ds, flat(scan), true).size() == 1);
}

TEST_CASE("input checks: the scan names an image over max_image_pixels by file:line and size",
          "[data][input][image]") {
  testing::TempDir dir;
  testing::write_claiming_png(dir.file("big.png"), 30000, 30000);
  const std::string big =
      R"({"image": "big.png", "conversations": [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "Bag"}]})";
  const std::string meta = two_datasets(dir, std::string(kRecord) + "\n" + big + "\n");
  const Tokenizer tok(testing::test_tokenizer());
  const std::string want = dir.file("extra.jsonl") + ":2: bad sample (image_too_large): image '" +
                           dir.file("big.png") +
                           "' is 30000 x 30000 = 900000000 pixels, over data.max_image_pixels "
                           "89478485 (raise it, 0 = no limit, or remove the image)";
  {
    const SampleProcessor proc(tok, options());
    const auto ds = ConversationDataset::load(meta, OnBadSample::kError);
    CHECK_THROWS_WITH(scan_lengths(ds, proc, OnBadSample::kError, 2), want);
    const auto skipped = scan_lengths(ds, proc, OnBadSample::kSkip, 2);
    CHECK(skipped.bad.count(BadSampleReason::kImageTooLarge) == 1);
    CHECK(skipped.bad.total() == 1);
    CHECK(skipped.lengths[1][1] == kSkippedLengths);
    CHECK_THAT(skipped.bad.report(), Catch::Contains("image_too_large 1 (first: " + want));
  }
  {  // 0 = no limit: the header is small enough for stb, so the scan passes it
    const SampleProcessor proc(tok, options(0));
    const auto ds = ConversationDataset::load(meta, OnBadSample::kError);
    CHECK(scan_lengths(ds, proc, OnBadSample::kError, 1).lengths[1][1].vit_num > 0);
  }
  {  // a record's width/height are checked against the limit without opening the file
    testing::write_text(
        dir.file("extra.jsonl"),
        R"({"image": "ok.png", "width": 20000, "height": 5000, "conversations": [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "Bag"}]})"
        "\n");
    const SampleProcessor proc(tok, options());
    const auto ds = ConversationDataset::load(meta, OnBadSample::kError);
    CHECK_THROWS_WITH(scan_lengths(ds, proc, OnBadSample::kError, 1),
                      Catch::Contains(":1: bad sample (image_too_large): image '" +
                                      dir.file("ok.png") +
                                      "' is 20000 x 5000 = 100000000 pixels (the record's width "
                                      "and height), over data.max_image_pixels 89478485"));
  }
}
