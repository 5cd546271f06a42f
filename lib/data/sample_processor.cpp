#include "data/sample_processor.h"

#include <filesystem>

#include "core/error.h"

namespace omnibal::data {

SampleOptions sample_options(const DataConfig& config, const ModelPreset& preset) {
  SampleOptions o;
  o.tiling.tile_size = preset.vit.tile_size;
  o.tiling.min_tiles = config.min_tiles;
  o.tiling.max_tiles = config.max_tiles;
  for (int c = 0; c < 3; ++c) {
    o.norm.mean[c] = static_cast<float>(preset.vit.mean.at(c));
    o.norm.std[c] = static_cast<float>(preset.vit.std.at(c));
  }
  o.tokens_per_tile = preset.tokens_per_tile();
  o.max_tokens = preset.llm.max_seq_len;
  o.max_image_pixels = config.max_image_pixels;
  o.template_name = choice_name(config.template_name);
  return o;
}

std::ostream& operator<<(std::ostream& os, const SampleLengths& l) {
  return os << "{vit_num " << l.vit_num << ", token_num " << l.token_num << ", image_flags "
            << l.image_flags << "}";
}

namespace {

BadSampleReason reason_of(ImageFault fault) {
  switch (fault) {
    case ImageFault::kMissing: return BadSampleReason::kMissingImage;
    case ImageFault::kCorrupt: return BadSampleReason::kCorruptImage;
    case ImageFault::kTooLarge: return BadSampleReason::kImageTooLarge;
  }
  return BadSampleReason::kCorruptImage;
}

}  // namespace

std::string image_path(const std::string& root, const std::string& path) {
  const std::filesystem::path p(path);
  return p.is_absolute() ? path : (std::filesystem::path(root) / p).string();
}

SampleProcessor::SampleProcessor(const Tokenizer& tokenizer, SampleOptions options)
    : tokenizer_(tokenizer),
      options_(std::move(options)),
      template_(tokenizer, options_.template_name) {}

std::vector<int> SampleProcessor::tiles_per_image(const std::vector<ImageSize>& sizes) const {
  const auto per_image = options_for_image(options_.tiling, static_cast<int>(sizes.size()));
  std::vector<int> tiles;
  for (const auto& s : sizes) {
    tiles.push_back(tile_count(find_closest_grid(s.width, s.height, per_image), per_image));
  }
  return tiles;
}

std::vector<ImageSize> SampleProcessor::sizes_without_decoding(const SampleRecord& record,
                                                               const std::string& root) const {
  std::vector<ImageSize> sizes;
  for (size_t k = 0; k < record.images.size(); ++k) {
    const std::string path = image_path(root, record.images[k]);
    if (!record.sizes.empty()) {
      if (!std::filesystem::is_regular_file(path)) {
        throw BadSampleError(BadSampleReason::kMissingImage, record.origin,
                             "image file '" + path + "' does not exist");
      }
      const ImageSize& s = record.sizes[k];
      if (over_pixel_limit(s.width, s.height, options_.max_image_pixels)) {
        throw BadSampleError(BadSampleReason::kImageTooLarge, record.origin,
                             over_pixel_limit_message(path, s.width, s.height,
                                                      options_.max_image_pixels,
                                                      "the record's width and height"));
      }
      sizes.push_back(s);
      continue;
    }
    ImageError error;
    const auto size = probe_image(path, options_.max_image_pixels, error);
    if (!size) throw BadSampleError(reason_of(error.fault), record.origin, error.why);
    sizes.push_back(*size);
  }
  return sizes;
}

void SampleProcessor::check_budget(const SampleRecord& record, int64_t tokens) const {
  if (tokens > options_.max_tokens) {
    throw BadSampleError(BadSampleReason::kOverBudget, record.origin,
                         std::to_string(tokens) +
                             " tokens after image expansion exceed the pack "
                             "budget of " +
                             std::to_string(options_.max_tokens) +
                             " (llm.max_seq_len); samples are never truncated");
  }
}

SampleLengths SampleProcessor::measure(const SampleRecord& record, const std::string& root) const {
  const auto tiles = tiles_per_image(sizes_without_decoding(record, root));
  const auto tokens = template_.render(record, tiles, options_.tokens_per_tile);
  const auto n = static_cast<int64_t>(tokens.input_ids.size());
  check_budget(record, n);
  if (record.text_only()) return {1, n, 0};
  int64_t vit = 0;
  for (int t : tiles) vit += t;
  return {vit, n, vit};
}

namespace {

// Decodes every image of a record (each header checked against `max_pixels` first), checking
// it against the record's width/height when given.
std::vector<RgbImage> decode_all(const SampleRecord& record, const std::string& root,
                                 int64_t max_pixels) {
  std::vector<RgbImage> images;
  for (size_t k = 0; k < record.images.size(); ++k) {
    const std::string path = image_path(root, record.images[k]);
    ImageError error;
    auto image = decode_image(path, max_pixels, error);
    if (!image) throw BadSampleError(reason_of(error.fault), record.origin, error.why);
    if (!record.sizes.empty() &&
        (record.sizes[k].width != image->width || record.sizes[k].height != image->height)) {
      throw BadSampleError(BadSampleReason::kCorruptImage, record.origin,
                           "image '" + path + "' is " + std::to_string(image->width) + "x" +
                               std::to_string(image->height) + " but the record says " +
                               std::to_string(record.sizes[k].width) + "x" +
                               std::to_string(record.sizes[k].height));
    }
    images.push_back(std::move(*image));
  }
  return images;
}

}  // namespace

ProcessedSample SampleProcessor::process(const SampleRecord& record, const std::string& root,
                                         const SampleParts& parts) const {
  ProcessedSample out;
  std::vector<RgbImage> images;
  std::vector<ImageSize> sizes;
  if (parts.pixels) {
    images = decode_all(record, root, options_.max_image_pixels);
    for (const auto& im : images) sizes.push_back({im.width, im.height});
  } else {
    sizes = sizes_without_decoding(record, root);
  }
  const auto tiles = tiles_per_image(sizes);
  auto tokens = template_.render(record, tiles, options_.tokens_per_tile);
  out.token_num = static_cast<int64_t>(tokens.input_ids.size());
  check_budget(record, out.token_num);
  if (parts.tokens) out.tokens = std::move(tokens);
  int64_t total_tiles = 0;
  for (int t : tiles) total_tiles += t;
  out.image_flags.assign(record.text_only() ? 1 : total_tiles, record.text_only() ? 0 : 1);
  if (!parts.pixels) return out;
  const size_t tile_floats =
      3 * static_cast<size_t>(options_.tiling.tile_size) * options_.tiling.tile_size;
  out.pixels.resize(out.image_flags.size() * tile_floats);
  if (record.text_only()) {
    dummy_tile_pixels(options_.tiling, options_.norm, out.pixels.data());
    return out;
  }
  const auto per_image = options_for_image(options_.tiling, static_cast<int>(images.size()));
  size_t done = 0;
  for (const auto& im : images) {
    done += tile_pixels(im, per_image, options_.norm, out.pixels.data() + done * tile_floats);
  }
  OMNIBAL_CHECK(done == out.image_flags.size(), record.origin.to_string(), ": tiled ", done,
                " tiles, expected ", out.image_flags.size());
  return out;
}

}  // namespace omnibal::data
