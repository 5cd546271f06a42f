#include "core/model_preset.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"

TEST_CASE("every shipped preset loads and derives InternVL token counts", "[core][preset]") {
  const auto tiny = omnibal::load_model_preset("tiny");
  CHECK(tiny.name == "tiny");
  CHECK(tiny.tokens_per_tile() == 4);       // (56/14)^2 * 0.25
  CHECK(tiny.vit_tokens_per_tile() == 17);  // 16 patches + CLS
  const auto big = omnibal::load_model_preset("internvl-1.5-6b-20b");
  CHECK(big.tokens_per_tile() == 256);  // docs/paper.md: 256 per tile
  CHECK(big.vit_tokens_per_tile() == 1025);
  CHECK(big.llm.width == 6144);
  CHECK(big.vit.depth == 45);
  CHECK(omnibal::load_model_preset("internvl-1.5-6b-34b").llm.depth == 60);
  CHECK(omnibal::load_model_preset("base-100m").llm.kv_heads == 4);
}

TEST_CASE("a missing preset names the path it looked for", "[core][preset]") {
  CHECK_THROWS_WITH(omnibal::load_model_preset("nope"),
                    Catch::Contains("models/presets/nope.yaml"));
}

TEST_CASE("vit.norm is read as a choice, and another name is refused naming the key",
          "[core][preset]") {
  CHECK(omnibal::load_model_preset("tiny").vit.norm == omnibal::VitNorm::kLayerNorm);
  const auto path = std::filesystem::temp_directory_path() / "omnibal_bad_norm_preset.yaml";
  std::ofstream(path) << "name: bad\nvit: {norm: batchnorm}\n";
  CHECK_THROWS_WITH(omnibal::load_model_preset(path.string()),
                    Catch::Contains("vit.norm: expected layernorm | rmsnorm, got 'batchnorm'"));
  std::filesystem::remove(path);
}
