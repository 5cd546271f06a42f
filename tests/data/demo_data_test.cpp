// The embedded demo set (a small split made by scripts/make_demo_data.sh as a CTest fixture):
// the lengths `omnibal-plan scan` writes equal what pack materialisation produces, sample by
// sample, and the set has the variety the demo needs.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>

#include "core/model_preset.h"
#include "data/length_scanner.h"
#include "data/pack_builder.h"
#include "data_fixtures.h"

using namespace omnibal::data;

namespace {
std::string demo_dir() {
  const char* dir = std::getenv("OMNIBAL_DEMO_DATA");
  OMNIBAL_CHECK(dir && *dir,
                "OMNIBAL_DEMO_DATA is not set (CTest sets it with the data_demo_small "
                "fixture)");
  return dir;
}
}  // namespace

TEST_CASE("demo: scan lengths equal materialised packs, sample by sample", "[data][demo]") {
  const std::string dir = demo_dir();
  omnibal::DataConfig config;
  config.max_tiles = 12;
  const auto preset = omnibal::load_model_preset("tiny");
  const Tokenizer tok(dir + "/tokenizer.model");
  REQUIRE(tok.vocab_size() <= preset.llm.vocab_size);
  const SampleProcessor proc(tok, sample_options(config, preset));
  const auto ds = ConversationDataset::load(dir + "/train_meta.json", OnBadSample::kError);
  REQUIRE(ds.num_datasets() == 4);
  const auto scan = scan_lengths(ds, proc, OnBadSample::kError, 2);
  CHECK(scan.bad.total() == 0);

  const PackBuilder builder(ds, proc, OnBadSample::kError);
  std::set<int64_t> tile_counts;
  int64_t text_only = 0, multi_image = 0, total_tokens = 0;
  std::vector<int64_t> all_ids;
  for (int d = 0; d < ds.num_datasets(); ++d) {
    for (size_t e = 0; e < scan.lengths[d].size(); ++e) {
      const SampleLengths& l = scan.lengths[d][e];
      const int64_t id = ds.offset(d) + static_cast<int64_t>(e);
      const auto pack = builder.build({id}, PackParts::all());
      INFO(ds.entry(id).origin.to_string());
      REQUIRE(pack.input_ids.size(0) == l.token_num);
      REQUIRE(pack.pixel_values.size(0) == l.vit_num);
      REQUIRE(pack.image_flags.sum().item<int64_t>() == l.image_flags);
      tile_counts.insert(l.vit_num);
      text_only += l.image_flags == 0;
      multi_image += ds.entry(id).record->images.size() > 1;
      total_tokens += l.token_num;
      all_ids.push_back(id);
    }
  }
  // One pack of every sample: the boundaries add up to the scanned totals.
  const auto all = builder.build(all_ids, PackParts::for_stage(1, 2));
  CHECK(all.cu_seqlens[-1].item<int64_t>() == total_tokens);
  CHECK(text_only > 0);
  CHECK(multi_image > 0);
  CHECK(tile_counts.count(1) == 1);
  CHECK(*tile_counts.rbegin() >= 10);
  CHECK(tile_counts.size() >= 6);
}

TEST_CASE("demo: scan output files round-trip", "[data][demo]") {
  const std::string dir = demo_dir();
  omnibal::DataConfig config;
  const auto preset = omnibal::load_model_preset("tiny");
  const Tokenizer tok(dir + "/tokenizer.model");
  const SampleProcessor proc(tok, sample_options(config, preset));
  const auto ds = ConversationDataset::load(dir + "/eval_meta.json", OnBadSample::kError);
  const auto scan = scan_lengths(ds, proc, OnBadSample::kError, 3);
  testing::TempDir out;
  const auto files = write_scan(out.path() + "/scan", ds, scan);
  REQUIRE(files.size() == static_cast<size_t>(ds.num_datasets()) + 1);
  const auto meta = load_dataset_meta(files.back());
  REQUIRE(meta.size() == static_cast<size_t>(ds.num_datasets()));
  for (int d = 0; d < ds.num_datasets(); ++d) {
    CHECK(meta[d].name == ds.meta(d).name);
    const auto back = read_length_file(meta[d].token_lengths);
    CHECK(back == scan.lengths[d]);
  }
  const auto single = write_scan(out.file("all.json"), ds, scan);
  CHECK(read_length_file(single.at(0)).size() == static_cast<size_t>(ds.size()));

  // The scanned meta drives training: packs are checked against its lengths; a stale length
  // file (here: one token off) is caught when the pack is built.
  const auto scanned = ConversationDataset::load(files.back(), OnBadSample::kError);
  auto lengths = load_meta_lengths(scanned);
  REQUIRE(lengths.size() == static_cast<size_t>(scanned.size()));
  PackBuilder builder(scanned, proc, OnBadSample::kError);
  builder.expect_lengths(lengths);
  CHECK(builder.build({0, 1, 2}, PackParts::for_stage(1, 2)).num_samples() == 3);
  lengths[1].token_num += 1;
  builder.expect_lengths(lengths);
  CHECK_THROWS_WITH(builder.build({0, 1, 2}, PackParts::for_stage(1, 2)),
                    Catch::Contains("length file says") && Catch::Contains("stale"));
}
