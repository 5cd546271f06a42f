// Pack materialisation (shapes, restarting positions, cu_seqlens, dummy tile, per-stage parts)
// and the threaded loader (order, worker errors surfacing on the consumer, early shutdown, pinning).
#include <catch2/catch.hpp>

#include <torch/cuda.h>

#include "data/length_scanner.h"
#include "data/pack_loader.h"
#include "data_fixtures.h"

using namespace omnibal::data;

namespace {

struct Fixture {
  testing::TempDir dir;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<SampleProcessor> proc;
  std::unique_ptr<ConversationDataset> ds;

  explicit Fixture(const std::string& extra_line = "") {
    testing::write_split_png(dir.file("one.png"), 56, 56, 0, 255);   // 1 tile
    testing::write_split_png(dir.file("two.png"), 112, 56, 0, 255);  // 2x1 + thumbnail
    std::string lines =
        R"({"image": "one.png", "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Sneaker"}]})"
        "\n"
        R"({"image": "two.png", "width": 112, "height": 56, "conversations": [{"from": "human", "value": "List the items in row 1."}, {"from": "gpt", "value": "Coat, Bag"}]})"
        "\n"
        R"({"conversations": [{"from": "human", "value": "Is it footwear?"}, {"from": "gpt", "value": "Yes."}]})"
        "\n";
    testing::write_text(dir.file("a.jsonl"), lines + extra_line);
    testing::write_text(dir.file("meta.json"), R"({"d": {"annotation": "a.jsonl"}})");
    tok = std::make_unique<Tokenizer>(testing::test_tokenizer());
    SampleOptions o;
    o.tiling.tile_size = 56;
    o.tiling.max_tiles = 6;
    o.tokens_per_tile = 4;
    o.max_tokens = 1024;
    o.norm.mean = {0.5f, 0.5f, 0.5f};
    o.norm.std = {0.5f, 0.5f, 0.5f};
    proc = std::make_unique<SampleProcessor>(*tok, o);
    ds = std::make_unique<ConversationDataset>(
        ConversationDataset::load(dir.file("meta.json"), OnBadSample::kSkip));
  }
};

}  // namespace

TEST_CASE("pack: three samples concatenated with restarting positions", "[data][pack]") {
  Fixture f;
  const PackBuilder builder(*f.ds, *f.proc, OnBadSample::kError);
  const auto scan = scan_lengths(*f.ds, *f.proc, OnBadSample::kError, 1);
  const auto& len = scan.lengths[0];
  CHECK(len[0] == SampleLengths{1, len[0].token_num, 1});
  CHECK(len[1] == SampleLengths{3, len[1].token_num, 3});
  CHECK(len[2] == SampleLengths{1, len[2].token_num, 0});

  const auto pack = builder.build({2, 0, 1}, PackParts::all());
  const int64_t n2 = len[2].token_num, n0 = len[0].token_num, n1 = len[1].token_num;
  CHECK(pack.sample_ids == std::vector<int64_t>{2, 0, 1});
  CHECK(pack.pixel_values.sizes() == torch::IntArrayRef({5, 3, 56, 56}));
  CHECK(pack.pixel_values.dtype() == torch::kFloat32);
  CHECK(torch::equal(pack.image_flags, torch::tensor({0, 1, 1, 1, 1}, torch::kInt64)));
  CHECK(torch::equal(pack.cu_seqlens, torch::tensor({int64_t{0}, n2, n2 + n0, n2 + n0 + n1})));
  CHECK(pack.input_ids.size(0) == n0 + n1 + n2);
  CHECK(pack.labels.size(0) == n0 + n1 + n2);
  CHECK(torch::equal(pack.position_ids,
                     torch::cat({torch::arange(n2), torch::arange(n0), torch::arange(n1)})));
  // The dummy tile is white: (1 - 0.5) / 0.5 = 1 everywhere; tile 1 (one.png) has black pixels.
  CHECK(torch::allclose(pack.pixel_values[0], torch::ones({3, 56, 56})));
  CHECK(pack.pixel_values[1][0][0][0].item<float>() == Approx(-1.0f));
  // Labels: the reply of each sample is trained, the rest is masked.
  const auto trained = (pack.labels != kIgnoreLabel).sum().item<int64_t>();
  CHECK(trained > 3);
  CHECK(trained < pack.labels.size(0) / 2);
  CHECK(torch::equal(pack.labels.masked_select(pack.labels != kIgnoreLabel),
                     pack.input_ids.masked_select(pack.labels != kIgnoreLabel)));
}

TEST_CASE("pack: only the parts a pipeline stage needs are built", "[data][pack]") {
  Fixture f;
  const PackBuilder builder(*f.ds, *f.proc, OnBadSample::kError);
  // The first stage needs its labels too: UnitState::from_pack reads them and the activation it
  // sends carries them to the last stage (the trainer has always loaded them there).
  const auto first = builder.build({0, 1}, PackParts::for_stage(0, 3));
  CHECK(first.pixel_values.defined());
  CHECK(first.input_ids.defined());
  CHECK(first.labels.defined());
  const auto middle = builder.build({0, 1}, PackParts::for_stage(1, 3));
  CHECK_FALSE(middle.pixel_values.defined());
  CHECK_FALSE(middle.input_ids.defined());
  CHECK_FALSE(middle.labels.defined());
  CHECK(torch::equal(middle.cu_seqlens, first.cu_seqlens));
  CHECK(torch::equal(middle.position_ids, first.position_ids));
  CHECK(middle.image_flags.size(0) == 4);
  const auto last = builder.build({0, 1}, PackParts::for_stage(2, 3));
  CHECK(last.labels.defined());
  CHECK_FALSE(last.pixel_values.defined());
  CHECK_FALSE(last.input_ids.defined());
  CHECK(torch::equal(last.labels, first.labels));
  // One stage: everything.
  const auto only = PackParts::for_stage(0, 1);
  CHECK((only.pixels && only.input_ids && only.labels));
}

TEST_CASE("loader: packs come back in plan order from worker threads", "[data][loader]") {
  Fixture f;
  const PackBuilder builder(*f.ds, *f.proc, OnBadSample::kError);
  const int workers = GENERATE(1, 2, 3);
  const std::vector<std::vector<int64_t>> plan = {{0}, {1, 2}, {2, 0, 1}, {1}, {0, 2}};
  PackLoader loader(builder, plan, LoaderOptions{workers, 2, PackParts::all()});
  for (const auto& expected : plan) {
    const auto pack = loader.next();
    REQUIRE(pack.has_value());
    CHECK(pack->sample_ids == expected);
  }
  CHECK_FALSE(loader.next().has_value());
  CHECK_FALSE(loader.next().has_value());
}

TEST_CASE("loader: a worker's error is rethrown on the consumer, then loading goes on",
          "[data][loader]") {
  Fixture f(
      R"({"image": "missing.png", "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Bag"}]})"
      "\n");
  const PackBuilder builder(*f.ds, *f.proc, OnBadSample::kError);
  const int workers = GENERATE(1, 2);
  PackLoader loader(builder, {{0}, {1, 3}, {2}}, LoaderOptions{workers, 3, PackParts::all()});
  CHECK(loader.next()->sample_ids == std::vector<int64_t>{0});
  CHECK_THROWS_AS(loader.next(), BadSampleError);
  CHECK(loader.next()->sample_ids == std::vector<int64_t>{2});
  CHECK_FALSE(loader.next().has_value());
}

TEST_CASE("loader: pin_memory pins each pack on the worker, or fails there without CUDA",
          "[data][loader]") {
  Fixture f;
  const PackBuilder builder(*f.ds, *f.proc, OnBadSample::kError);
  LoaderOptions o{1, 2, PackParts::all()};
  CHECK_FALSE(PackLoader(builder, {{0, 2}}, o).next()->input_ids.is_pinned());
  o.pin_memory = true;
  PackLoader loader(builder, {{0, 2}, {1}}, o);
  if (!torch::cuda::is_available()) {  // runtime.device: cuda refuses such a machine earlier
    CHECK_THROWS(loader.next());
    return;
  }
  const auto pack = loader.next();
  CHECK(pack->sample_ids == std::vector<int64_t>{0, 2});
  for (const auto* t : {&pack->pixel_values, &pack->image_flags, &pack->input_ids, &pack->labels,
                        &pack->position_ids})
    CHECK(t->is_pinned());
  CHECK_FALSE(pack->cu_seqlens.is_pinned());  // read on the host
}

TEST_CASE("loader: skip policy counts bad samples; early destruction does not hang",
          "[data][loader]") {
  Fixture f(
      R"({"image": "missing.png", "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Bag"}]})"
      "\n");
  const PackBuilder builder(*f.ds, *f.proc, OnBadSample::kSkip);
  {
    PackLoader loader(builder, {{3, 0}, {1, 3}}, LoaderOptions{2, 2, PackParts::all()});
    CHECK(loader.next()->sample_ids == std::vector<int64_t>{0});
    CHECK(loader.next()->sample_ids == std::vector<int64_t>{1});
    CHECK(loader.bad_samples().count(BadSampleReason::kMissingImage) == 2);
  }
  std::vector<std::vector<int64_t>> many(64, std::vector<int64_t>{0, 1, 2});
  PackLoader unused(builder, many, LoaderOptions{2, 4, PackParts::all()});
  CHECK(unused.size() == 64);
}  // `unused` is destroyed with most packs unbuilt

TEST_CASE("pack: under skip a pack whose every sample is bad is an empty micro-batch naming them",
          "[data][pack]") {
  Fixture f(
      R"({"image": "missing.png", "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Bag"}]})"
      "\n");
  const PackBuilder builder(*f.ds, *f.proc, OnBadSample::kSkip);
  BadSampleCounts counts;
  const auto parts = GENERATE(PackParts::all(), PackParts::for_stage(1, 2));
  const auto pack = builder.build({3, 3}, parts, &counts);
  CHECK(pack.num_samples() == 0);
  CHECK(pack.cu_seqlens.sizes() == torch::IntArrayRef{1});
  CHECK(pack.cu_seqlens[0].item<int64_t>() == 0);
  CHECK(pack.position_ids.numel() == 0);
  CHECK(pack.image_flags.numel() == 0);
  if (parts.pixels) CHECK(pack.pixel_values.size(0) == 0);
  REQUIRE(pack.skipped.size() == 2);
  CHECK_THAT(pack.skipped[0], Catch::Contains("a.jsonl:4") && Catch::Contains("missing_image"));
  CHECK(counts.count(BadSampleReason::kMissingImage) == 2);
  // A pack with one good sample keeps it and names only the bad one.
  const auto mixed = builder.build({3, 2}, parts, &counts);
  CHECK(mixed.sample_ids == std::vector<int64_t>{2});
  CHECK(mixed.skipped.size() == 1);
}

TEST_CASE("pack: a sample found bad is remembered and not decoded again", "[data][pack][bad]") {
  // Line 4: a header that passes the scan over image data that cannot be decoded.
  Fixture f(
      R"({"image": "short.png", "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Bag"}]})"
      "\n");
  testing::write_claiming_png(f.dir.file("short.png"), 64, 64);
  const auto scan = scan_lengths(*f.ds, *f.proc, OnBadSample::kSkip, 1);
  CHECK(scan.bad.total() == 0);
  const PackBuilder builder(*f.ds, *f.proc, OnBadSample::kSkip);
  BadSampleCounts counts;
  auto pack = builder.build({3, 0}, PackParts::all(), &counts);
  CHECK(builder.samples_processed() == 2);
  CHECK(pack.sample_ids == std::vector<int64_t>{0});
  REQUIRE(pack.skipped.size() == 1);
  CHECK_THAT(pack.skipped[0],
             Catch::Contains("a.jsonl:4: bad sample (corrupt_image)") &&
                 Catch::Contains("(PNG, 64 x 64) has truncated or corrupt image data (stb: "));
  // The next epoch skips it again, counted, with the same message, without decoding it.
  pack = builder.build({0, 3}, PackParts::all(), &counts);
  CHECK(builder.samples_processed() == 3);
  REQUIRE(pack.skipped.size() == 1);
  CHECK_THAT(pack.skipped[0], Catch::Contains("has truncated or corrupt image data"));
  CHECK(counts.count(BadSampleReason::kCorruptImage) == 2);
  // Loader workers share the memory (thread-safe): 2 workers, 8 packs holding it.
  std::vector<std::vector<int64_t>> packs(8, std::vector<int64_t>{3, 1});
  PackLoader loader(builder, packs, LoaderOptions{2, 4, PackParts::for_stage(1, 2)});
  while (const auto p = loader.next()) CHECK(p->sample_ids == std::vector<int64_t>{1});
  CHECK(loader.bad_samples().count(BadSampleReason::kCorruptImage) == 8);
  CHECK(builder.samples_processed() == 3 + 8);  // sample 1 in each pack, never sample 3
  // Under error the remembered failure is rethrown as it was.
  const PackBuilder strict(*f.ds, *f.proc, OnBadSample::kError);
  CHECK_THROWS_WITH(strict.build({3}, PackParts::all()), Catch::Contains("a.jsonl:4"));
  CHECK_THROWS_WITH(strict.build({3}, PackParts::all()), Catch::Contains("corrupt image data"));
  CHECK(strict.samples_processed() == 1);
}

TEST_CASE("pack: max_image_pixels is checked again from the header before decoding",
          "[data][pack][image]") {
  // The record's width/height pass the scan; the file's header says otherwise (the file
  // changed, or the record is wrong): decoding refuses it from its header.
  Fixture f(
      R"({"image": "big.png", "width": 56, "height": 56, "conversations": [{"from": "human", "value": "<image>\nWhat item is shown?"}, {"from": "gpt", "value": "Bag"}]})"
      "\n");
  testing::write_claiming_png(f.dir.file("big.png"), 30000, 30000);
  CHECK(scan_lengths(*f.ds, *f.proc, OnBadSample::kError, 1).bad.total() == 0);
  const PackBuilder builder(*f.ds, *f.proc, OnBadSample::kError);
  CHECK_THROWS_WITH(builder.build({3}, PackParts::all()),
                    Catch::Contains("a.jsonl:4: bad sample (image_too_large): image '" +
                                    f.dir.file("big.png") +
                                    "' is 30000 x 30000 = 900000000 pixels, over "
                                    "data.max_image_pixels 89478485"));
}
