// Image files through stb (Debian libstb-dev): header probing without decoding (stbi_info),
// decoding JPEG/PNG to 8-bit RGB, resizing, and PNG writing for fixtures and the demo data.
// The stb implementations are compiled static into image_io.cpp only, so no other target can
// clash with them and libstb.so is not needed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/sample_record.h"

namespace omnibal::data {

/// An 8-bit RGB image, rows top to bottom, pixels interleaved (size width * height * 3).
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

/// Width and height from the file header, or std::nullopt (with `why` set) when the file is
/// missing (`missing` true) or its header cannot be read.
std::optional<ImageSize> probe_image(const std::string& path, bool& missing, std::string& why);

/// Decodes any stb-supported file (JPEG, PNG, BMP, ...) to RGB, or std::nullopt with `missing`
/// and `why` set as for probe_image.
std::optional<RgbImage> decode_image(const std::string& path, bool& missing, std::string& why);

/// Resizes `image` to width x height (stb Catmull-Rom / Mitchell filters, linear colour space).
RgbImage resize_image(const RgbImage& image, int width, int height);

/// Writes an 8-bit image with `channels` (1 grey or 3 RGB) as PNG. Throws omnibal::Error on
/// failure.
void write_png(const std::string& path, int width, int height, int channels, const uint8_t* pixels);

}  // namespace omnibal::data
