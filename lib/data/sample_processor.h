// The per-sample pipeline shared by the length scan and pack materialisation, so the lengths
// the planner packs are by construction the lengths training sees: image sizes -> tile counts
// (dynamic tiling) -> template + image expansion -> tokens, and, when pixels are wanted, decode
// + tile + normalise. Bad input raises BadSampleError naming the file, line and reason; a sample
// longer than the pack budget is rejected, never truncated (so no image span is ever cut).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/model_preset.h"
#include "data/chat_template.h"
#include "data/dynamic_tiling.h"

namespace omnibal::data {

/// Settings of the per-sample pipeline (from DataConfig + ModelPreset via sample_options()).
struct SampleOptions {
  TilingOptions tiling;       ///< tile size from the preset, min/max tiles from data.*
  PixelNorm norm;             ///< preset vit.mean / vit.std
  int tokens_per_tile = 256;  ///< ModelPreset::tokens_per_tile()
  int64_t max_tokens = 4096;  ///< pack token budget: a longer sample is bad (over_budget)
  /// data.max_image_pixels: most width x height of one image (0 = no limit); a larger image
  /// makes its sample bad (image_too_large), checked from the header before any decoding.
  int64_t max_image_pixels = DataConfig{}.max_image_pixels;
  std::string template_name = "internlm2-chat";
};

/// Options for `config` and `preset`: tile size, normalisation, tokens per tile and max_seq_len
/// from the preset; min/max tiles, the pixel limit and the template from `config`.
SampleOptions sample_options(const DataConfig& config, const ModelPreset& preset);

/// One sample's loads in the OmniBal length format (docs/paper.md). A sample skipped as bad is
/// written as vit_num = token_num = -1, image_flags = 0, which the planner never packs.
struct SampleLengths {
  int64_t vit_num = 0;      ///< tiles the ViT sees (thumbnails and the dummy tile included)
  int64_t token_num = 0;    ///< LLM tokens after image expansion
  int64_t image_flags = 0;  ///< real (non-dummy) tiles
  bool operator==(const SampleLengths& o) const {
    return vit_num == o.vit_num && token_num == o.token_num && image_flags == o.image_flags;
  }
};

/// Prints "{vit_num 5, token_num 80, image_flags 5}" (test and log messages).
std::ostream& operator<<(std::ostream& os, const SampleLengths& l);

/// The lengths that mark a skipped sample.
inline constexpr SampleLengths kSkippedLengths{-1, -1, 0};

/// What of a sample to build.
struct SampleParts {
  bool pixels = true;  ///< decode and tile images (the first pipeline stage)
  bool tokens = true;  ///< input ids and labels
};

/// One sample ready to be packed.
struct ProcessedSample {
  TokenizedSample tokens;            ///< empty unless SampleParts::tokens
  std::vector<float> pixels;         ///< [tiles, 3, tile, tile] normalised; empty unless pixels
  std::vector<int64_t> image_flags;  ///< [tiles] 1 real, 0 dummy (always filled)
  int64_t token_num = 0;             ///< tokens (always filled, also without SampleParts::tokens)
};

/// Runs the per-sample pipeline with one tokenizer and template. Thread-safe (const methods).
class SampleProcessor {
 public:
  SampleProcessor(const Tokenizer& tokenizer, SampleOptions options);

  /// Lengths without decoding pixels: image sizes from the record's width/height when present,
  /// else from the file headers (image_io.h's probe_image), either checked against
  /// max_image_pixels. Throws BadSampleError (missing_image, corrupt_image, image_too_large,
  /// over_budget).
  SampleLengths measure(const SampleRecord& record, const std::string& root) const;

  /// Builds `parts` of a sample. With pixels, images are decoded (and must match the record's
  /// width/height when given), each header checked against max_image_pixels first; without,
  /// sizes come as in measure(). Throws BadSampleError.
  ProcessedSample process(const SampleRecord& record, const std::string& root,
                          const SampleParts& parts) const;

  /// The options in use.
  const SampleOptions& options() const { return options_; }

 private:
  std::vector<int> tiles_per_image(const std::vector<ImageSize>& sizes) const;
  std::vector<ImageSize> sizes_without_decoding(const SampleRecord& record,
                                                const std::string& root) const;
  void check_budget(const SampleRecord& record, int64_t tokens) const;

  const Tokenizer& tokenizer_;
  SampleOptions options_;
  ChatTemplate template_;
};

/// Path of image `path` of a record whose dataset root is `root` (absolute paths kept).
std::string image_path(const std::string& root, const std::string& path);

}  // namespace omnibal::data
