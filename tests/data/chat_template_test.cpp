// internlm2-chat template, <image> expansion and the label mask on a small conversation,
// checked id by id against the pieces encoded separately.
#include <catch2/catch.hpp>

#include "data/chat_template.h"
#include "data_fixtures.h"

using namespace omnibal::data;

namespace {

SampleRecord record(std::vector<std::string> images,
                    std::vector<std::pair<Role, std::string>> turns) {
  SampleRecord r;
  r.images = std::move(images);
  for (auto& [role, value] : turns) r.turns.push_back({role, value});
  r.origin = {"test.jsonl", 1, false};
  return r;
}

void append(std::vector<int32_t>& ids, std::vector<int32_t>& labels,
            const std::vector<int32_t>& add, bool trained) {
  for (int32_t id : add) {
    ids.push_back(id);
    labels.push_back(trained ? id : kIgnoreLabel);
  }
}

}  // namespace

TEST_CASE("template: two-turn conversation with one image, expansion and label mask",
          "[data][template]") {
  const Tokenizer tok(testing::test_tokenizer());
  const ChatTemplate tpl(tok, "internlm2-chat");
  const auto& sp = tok.special();
  const auto r = record({"a.png"}, {{Role::kHuman, "<image>\nWhat item is shown?"},
                                    {Role::kGpt, "Sneaker"},
                                    {Role::kHuman, "Is it footwear? "},
                                    {Role::kGpt, " Yes."}});
  const int tiles = 3, tokens_per_tile = 4;
  const auto got = tpl.render(r, {tiles}, tokens_per_tile);

  std::vector<int32_t> ids, labels;
  append(ids, labels, {sp.bos}, false);
  append(ids, labels, {sp.im_start}, false);
  append(ids, labels, tok.encode("user\n"), false);
  append(ids, labels, {sp.img_start}, false);
  append(ids, labels, std::vector<int32_t>(tiles * tokens_per_tile, sp.img_context), false);
  append(ids, labels, {sp.img_end}, false);
  append(ids, labels, tok.encode("\nWhat item is shown?"), false);
  append(ids, labels, {sp.im_end, sp.im_start}, false);
  append(ids, labels, tok.encode("assistant\n"), false);
  append(ids, labels, tok.encode("Sneaker"), true);
  append(ids, labels, {sp.im_end}, true);
  append(ids, labels, {sp.im_start}, false);
  append(ids, labels, tok.encode("user\n"), false);
  append(ids, labels, tok.encode("Is it footwear?"), false);  // values are stripped
  append(ids, labels, {sp.im_end, sp.im_start}, false);
  append(ids, labels, tok.encode("assistant\n"), false);
  append(ids, labels, tok.encode("Yes."), true);
  append(ids, labels, {sp.im_end}, true);

  CHECK(got.input_ids == ids);
  CHECK(got.labels == labels);
  REQUIRE(sp.bos >= 0);
  CHECK(got.input_ids.front() == sp.bos);
  // Exactly 12 <IMG_CONTEXT> between one <img> and one </img>, all masked.
  CHECK(std::count(got.input_ids.begin(), got.input_ids.end(), sp.img_context) == 12);
  // The trained tokens read back as the two replies, each closed by <|im_end|>.
  std::vector<int32_t> trained;
  for (int32_t l : got.labels) {
    if (l != kIgnoreLabel) trained.push_back(l);
  }
  CHECK(tok.decode(trained) == "Sneaker<|im_end|>Yes.<|im_end|>");
  // Every special token is one id and the tokenizer fits the tiny preset's vocabulary.
  CHECK(tok.encode("<IMG_CONTEXT>") == std::vector<int32_t>{sp.img_context});
  CHECK(tok.vocab_size() <= 1024);
}

TEST_CASE("template: a single image without <image> goes in front of the first turn",
          "[data][template]") {
  const Tokenizer tok(testing::test_tokenizer());
  const ChatTemplate tpl(tok, "internlm2-chat");
  const auto implicit =
      record({"a.png"}, {{Role::kHuman, "What item is shown?"}, {Role::kGpt, "Sneaker"}});
  const auto explicit_ =
      record({"a.png"}, {{Role::kHuman, "<image>\nWhat item is shown?"}, {Role::kGpt, "Sneaker"}});
  CHECK(tpl.render(implicit, {5}, 4).input_ids == tpl.render(explicit_, {5}, 4).input_ids);
}

TEST_CASE("template: multi-image expansion follows placeholder order; text-only has none",
          "[data][template]") {
  const Tokenizer tok(testing::test_tokenizer());
  const ChatTemplate tpl(tok, "internlm2-chat");
  const auto& sp = tok.special();
  const auto r =
      record({"a.png", "b.png"}, {{Role::kHuman, "<image> <image> Which image shows a bag?"},
                                  {Role::kGpt, "Image 2."}});
  const auto got = tpl.render(r, {1, 5}, 4);
  const auto first = std::find(got.input_ids.begin(), got.input_ids.end(), sp.img_start);
  REQUIRE(first != got.input_ids.end());
  CHECK(std::count(first + 1, first + 6, sp.img_context) == 4);
  CHECK(first[5] == sp.img_end);
  const auto second = std::find(first + 6, got.input_ids.end(), sp.img_start);
  REQUIRE(second != got.input_ids.end());
  CHECK(std::count(second + 1, second + 21, sp.img_context) == 20);
  CHECK(second[21] == sp.img_end);

  const auto text = record({}, {{Role::kHuman, "Is it footwear?"}, {Role::kGpt, "No."}});
  const auto t = tpl.render(text, {}, 4);
  CHECK(std::count(t.input_ids.begin(), t.input_ids.end(), sp.img_context) == 0);
  CHECK(std::count(t.input_ids.begin(), t.input_ids.end(), sp.img_start) == 0);
  CHECK_THROWS_WITH(ChatTemplate(tok, "vicuna"), Catch::Contains("internlm2-chat"));
}
