// Every bad-input case under both on_bad_sample policies, through the scan and through pack
// materialisation: error names file, line and reason; skip counts the reason and keeps going.
#include <catch2/catch.hpp>

#include "core/model_preset.h"
#include "data/length_scanner.h"
#include "data/pack_builder.h"
#include "data/utf8_check.h"
#include "data_fixtures.h"

using namespace omnibal::data;

namespace {

const char* kGood =
    R"({"id": "ok", "image": "ok.png", "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Sneaker"}]})";

struct BadCase {
  const char* name;
  std::string line;
  BadSampleReason reason;
  const char* detail;  ///< part of the message
};

std::vector<BadCase> bad_cases() {
  return {
      {"malformed json", R"({"id": "x", "conversations": [)", BadSampleReason::kMalformedJson,
       "not valid JSON"},
      {"invalid utf-8",  // Latin-1 'é' then '(' : 0xC3 must start a 2-byte sequence
       std::string(R"({"id": ")") + "\xC3\x28" +
           R"(", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yes."}]})",
       BadSampleReason::kMalformedJson, "invalid UTF-8 at byte offset 8 of the line (0xC3 0x28)"},
      {"missing image",
       R"({"image": "nope.png", "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Bag"}]})",
       BadSampleReason::kMissingImage, "nope.png"},
      {"corrupt image",
       R"({"image": "corrupt.png", "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Bag"}]})",
       BadSampleReason::kCorruptImage, "corrupt.png"},
      {"placeholder count",
       R"({"image": ["ok.png", "ok.png"], "conversations": [{"from": "human", "value": "<image>\nWhich image shows a bag?"}, {"from": "gpt", "value": "Image 2."}]})",
       BadSampleReason::kImageCountMismatch, "1 <image> placeholder(s) but the record has 2"},
      {"placeholder in text-only",
       R"({"conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Bag"}]})",
       BadSampleReason::kImageCountMismatch, "has 0 image(s)"},
      {"empty conversation", R"({"image": "ok.png", "conversations": []})",
       BadSampleReason::kEmptyConversation, "no turns"},
      {"no reply", R"({"conversations": [{"from": "human", "value": "Is it footwear?"}]})",
       BadSampleReason::kEmptyConversation, "no gpt reply"},
      {"gpt first",
       R"({"conversations": [{"from": "gpt", "value": "Yes."}, {"from": "human", "value": "Is it footwear?"}]})",
       BadSampleReason::kNonAlternating, "turn 0 is from gpt"},
      {"two human turns",
       R"({"conversations": [{"from": "human", "value": "Is it footwear?"}, {"from": "human", "value": "Is it?"}, {"from": "gpt", "value": "Yes."}]})",
       BadSampleReason::kNonAlternating, "turn 1 is from human"},
      {"over budget",
       R"({"image": "wide.png", "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Bag"}]})",
       BadSampleReason::kOverBudget, "exceed the pack budget of 40"},
  };
}

/// A dataset folder: ok.png (56x56, 1 tile), wide.png (336x112, 13 tiles), corrupt.png, and
/// a.jsonl with the good record on line 1 and `bad` on line 2.
std::string make_dataset(const testing::TempDir& dir, const std::string& bad) {
  testing::write_split_png(dir.file("ok.png"), 56, 56, 0, 255);
  testing::write_split_png(dir.file("wide.png"), 336, 112, 0, 255);
  testing::write_text(dir.file("corrupt.png"), "\x89PNG this is not an image");
  testing::write_text(dir.file("a.jsonl"), std::string(kGood) + "\n" + bad + "\n");
  testing::write_text(dir.file("meta.json"), R"({"d": {"root": ".", "annotation": "a.jsonl"}})");
  return dir.file("meta.json");
}

SampleOptions small_budget() {
  SampleOptions o;
  o.tiling.tile_size = 56;
  o.tiling.max_tiles = 12;
  o.tokens_per_tile = 4;
  o.max_tokens = 40;  // the good sample has ~20 tokens; wide.png alone brings 13 * 4 + 2
  return o;
}

}  // namespace

TEST_CASE("bad samples: on_bad_sample error stops with file, line and reason", "[data][bad]") {
  const auto c = GENERATE(from_range(bad_cases()));
  INFO(c.name);
  testing::TempDir dir;
  const std::string meta = make_dataset(dir, c.line);
  const Tokenizer tok(testing::test_tokenizer());
  const SampleProcessor proc(tok, small_budget());
  const std::string where = dir.file("a.jsonl") + ":2: bad sample (" + reason_name(c.reason) + ")";
  auto expect = [&](auto&& fn) {
    try {
      fn();
      FAIL("no error raised");
    } catch (const BadSampleError& e) {
      CHECK(e.reason() == c.reason);
      CHECK(e.origin().line == 2);
      CHECK_THAT(e.what(), Catch::Contains(where) && Catch::Contains(c.detail));
    }
  };
  // Load (structural problems) or scan (images, budget) fails on line 2.
  expect([&] {
    const auto ds = ConversationDataset::load(meta, OnBadSample::kError);
    scan_lengths(ds, proc, OnBadSample::kError, 2);
  });
  // Materialising a pack that holds the sample fails the same way.
  const auto ds = ConversationDataset::load(meta, OnBadSample::kSkip);
  const PackBuilder builder(ds, proc, OnBadSample::kError);
  expect([&] { builder.build({0, 1}, PackParts::all()); });
}

TEST_CASE("bad samples: on_bad_sample skip counts the reason and keeps the rest", "[data][bad]") {
  const auto c = GENERATE(from_range(bad_cases()));
  INFO(c.name);
  testing::TempDir dir;
  const std::string meta = make_dataset(dir, c.line);
  const Tokenizer tok(testing::test_tokenizer());
  const SampleProcessor proc(tok, small_budget());
  const auto ds = ConversationDataset::load(meta, OnBadSample::kSkip);
  REQUIRE(ds.size() == 2);  // the bad line keeps its place: lengths stay aligned with lines

  const auto scan = scan_lengths(ds, proc, OnBadSample::kSkip, 2);
  CHECK(scan.lengths[0][1] == kSkippedLengths);
  CHECK(scan.lengths[0][0].vit_num == 1);
  CHECK(scan.lengths[0][0].image_flags == 1);
  CHECK(scan.bad.total() == 1);
  CHECK(scan.bad.count(c.reason) == 1);
  CHECK_THAT(scan.bad.report(), Catch::Contains(std::string(reason_name(c.reason)) + " 1") &&
                                    Catch::Contains(dir.file("a.jsonl") + ":2"));

  const PackBuilder builder(ds, proc, OnBadSample::kSkip);
  BadSampleCounts counts;
  const auto pack = builder.build({0, 1}, PackParts::all(), &counts);
  CHECK(pack.sample_ids == std::vector<int64_t>{0});
  CHECK(pack.cu_seqlens.size(0) == 2);
  CHECK(pack.cu_seqlens[1].item<int64_t>() == scan.lengths[0][0].token_num);
  CHECK(pack.pixel_values.size(0) == 1);
  CHECK(counts.count(c.reason) == 1);
  // A pack of only the bad sample is empty, not an error.
  const auto empty = builder.build({1}, PackParts::all(), &counts);
  CHECK(empty.num_samples() == 0);
  CHECK(empty.input_ids.numel() == 0);
  CHECK(counts.count(c.reason) == 2);
}

TEST_CASE("bad samples: decoded size must match the record's width/height", "[data][bad]") {
  testing::TempDir dir;
  const std::string meta = make_dataset(
      dir,
      R"({"image": "ok.png", "width": 100, "height": 50, "conversations": [{"from": "human", "value": "What item is shown?"}, {"from": "gpt", "value": "Bag"}]})");
  const Tokenizer tok(testing::test_tokenizer());
  const SampleProcessor proc(tok, small_budget());
  const auto ds = ConversationDataset::load(meta, OnBadSample::kError);
  const PackBuilder builder(ds, proc, OnBadSample::kError);
  CHECK_THROWS_WITH(builder.build({1}, PackParts::all()),
                    Catch::Contains("is 56x56 but the record says 100x50"));
  // Later stages do not decode, so they trust width/height as the scan did.
  CHECK_NOTHROW(builder.build({1}, PackParts::for_stage(1, 2)));
}

TEST_CASE("utf-8: well-formed text passes, each kind of ill-formed sequence is located",
          "[data][bad][utf8]") {
  CHECK_FALSE(find_invalid_utf8("plain ascii"));
  CHECK_FALSE(find_invalid_utf8(
      "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"));  // é € 😀 U+10FFFF
  struct Case {
    std::string text;
    size_t offset;
    const char* hex;
  };
  const Case cases[] = {
      {"ab\xC3\x28", 2, "(0xC3 0x28)"},                   // lead byte, then no continuation
      {"\x80", 0, "(0x80)"},                              // continuation without a lead byte
      {"x\xFF", 1, "(0xFF)"},                             // never valid
      {"\xC0\xAF", 0, "(0xC0)"},                          // overlong '/'
      {"\xE0\x80\xAF", 0, "(0xE0 0x80)"},                 // overlong 3-byte form
      {"\xED\xA0\x80", 0, "(0xED 0xA0)"},                 // UTF-16 surrogate U+D800
      {"\xF4\x90\x80\x80", 0, "(0xF4 0x90)"},             // above U+10FFFF
      {"ok \xE2\x82", 3, "(0xE2 0x82)"},                  // truncated at the end
      {"\xE2\x82\xACz\xE2\x82(", 4, "(0xE2 0x82 0x28)"},  // the second character is cut
  };
  for (const auto& c : cases) {
    INFO(c.hex);
    const auto bad = find_invalid_utf8(c.text);
    REQUIRE(bad);
    CHECK(bad->offset == c.offset);
    CHECK(bad->hex() == c.hex);
  }
}

TEST_CASE("utf-8: a JSON-array annotation file names the line and byte", "[data][bad][utf8]") {
  testing::TempDir dir;
  testing::write_text(dir.file("a.json"),
                      "[\n" + std::string(kGood) + ",\n{\"id\": \"\xE9\"}\n]\n");
  const std::string want = dir.file("a.json") + ":3: invalid UTF-8 at byte offset " +
                           std::to_string(2 + std::string(kGood).size() + 2 + 8) +
                           " of the file (0xE9 0x22)";
  CHECK_THROWS_WITH(read_annotation_file(dir.file("a.json")), Catch::Contains(want));
}

TEST_CASE("annotations: a UTF-8 byte-order mark does not turn a JSON array into JSONL",
          "[data][bad][utf8]") {
  testing::TempDir dir;
  const std::string bom = "\xEF\xBB\xBF";
  testing::write_text(dir.file("a.json"),
                      bom + "[\n" + std::string(kGood) + ",\n" + std::string(kGood) + "\n]\n");
  const auto array = read_annotation_file(dir.file("a.json"));
  REQUIRE(array.size() == 2);
  CHECK_FALSE(array[0].error.has_value());
  CHECK(array[1].origin.is_element);
  testing::write_text(dir.file("b.jsonl"),
                      bom + std::string(kGood) + "\n" + std::string(kGood) + "\n");
  const auto lines = read_annotation_file(dir.file("b.jsonl"));
  REQUIRE(lines.size() == 2);
  CHECK_FALSE(lines[0].error.has_value());
}
