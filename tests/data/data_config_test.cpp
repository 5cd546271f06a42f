// The data.* config keys: defaults, validation, and how they reach the sample pipeline.
#include <catch2/catch.hpp>

#include "core/config.h"
#include "core/model_preset.h"
#include "data/sample_processor.h"

using namespace omnibal;

TEST_CASE("data config: keys parse, validate and feed sample_options", "[data][config]") {
  const Config c = parse_config(
      "data:\n  tokenizer: t.model\n  template: internlm2-chat\n  min_tiles: 2\n  max_tiles: 12\n"
      "  workers: 3\n  eval_meta: e.json\n",
      "test.yaml");
  CHECK(c.data.tokenizer == "t.model");
  CHECK(c.data.eval_meta == "e.json");
  CHECK(c.data.workers == 3);
  const auto o = data::sample_options(c.data, load_model_preset("tiny"));
  CHECK(o.tiling.tile_size == 56);
  CHECK(o.tiling.min_tiles == 2);
  CHECK(o.tiling.max_tiles == 12);
  CHECK(o.tokens_per_tile == 4);
  CHECK(o.max_tokens == 1024);
  CHECK(o.norm.mean[0] == Approx(0.286f));
  CHECK(o.norm.std[2] == Approx(0.353f));

  auto error_of = [](const std::string& yaml) {
    try {
      parse_config(yaml, "bad.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of("data:\n  max_tiles: 0\n"), Catch::Contains("max_tiles"));
  CHECK_THAT(error_of("data:\n  min_tiles: 0\n"), Catch::Contains("min_tiles"));
  CHECK_THAT(error_of("data:\n  workers: 0\n"), Catch::Contains("workers"));
  CHECK_THAT(error_of("data:\n  template: vicuna\n"), Catch::Contains("template"));
}
