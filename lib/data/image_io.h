// Image files through stb (Debian libstb-dev): header probing without decoding (image_header.h,
// then stb), decoding JPEG/PNG to 8-bit RGB under a pixel limit (data.max_image_pixels, checked
// from the header before decoding), resizing, and PNG writing for fixtures and the demo data.
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

/// Why an image file cannot be used (the sample's BadSampleReason follows it).
enum class ImageFault {
  kMissing,  ///< no such file
  kCorrupt,  ///< not an image stb reads, a truncated or corrupt header, or corrupt pixel data
  kTooLarge  ///< over data.max_image_pixels, or too large for stb to decode
};

/// An image file that cannot be used: the fault and a message naming the file, what is wrong
/// with it and, where stb refused it, stb's own reason ("(stb: bad zlib header)").
struct ImageError {
  ImageFault fault = ImageFault::kCorrupt;
  std::string why;
};

/// Width and height from the file's header without decoding: omnibal's own header reader for
/// PNG and JPEG (image_header.h) then stb's for the same format (so a variant stb cannot decode
/// is refused here, with stb's reason), stbi_info for the other formats stb reads. Refuses an
/// image of more than `max_pixels` width x height (0 = no limit) from its header alone. Returns
/// std::nullopt with `error` set when the file cannot be used.
std::optional<ImageSize> probe_image(const std::string& path, int64_t max_pixels,
                                     ImageError& error);

/// Decodes any stb-supported file (JPEG, PNG, BMP, ...) to RGB. The file is read once; its
/// header is checked against `max_pixels` (0 = no limit) before stb decodes a pixel, since the
/// file may have changed since the scan. Returns std::nullopt with `error` set as for
/// probe_image; data that stb cannot decode under a readable header reads "truncated or corrupt
/// image data (stb: ...)".
std::optional<RgbImage> decode_image(const std::string& path, int64_t max_pixels,
                                     ImageError& error);

/// The message for an image of width x height over `max_pixels`: "image 'p' is 30000 x 30000
/// = 900000000 pixels, over data.max_image_pixels 89478485 (raise it, 0 = no limit, or remove
/// the image)"; `source` (may be empty) says where the size comes from.
std::string over_pixel_limit_message(const std::string& path, int64_t width, int64_t height,
                                     int64_t max_pixels, const std::string& source);

/// Whether width x height is over `max_pixels` (0 = no limit).
inline bool over_pixel_limit(int64_t width, int64_t height, int64_t max_pixels) {
  return max_pixels > 0 && width * height > max_pixels;
}

/// Resizes `image` to width x height (stb Catmull-Rom / Mitchell filters, linear colour space).
RgbImage resize_image(const RgbImage& image, int width, int height);

/// Writes an 8-bit image with `channels` (1 grey or 3 RGB) as PNG. Throws omnibal::Error on
/// failure.
void write_png(const std::string& path, int width, int height, int channels, const uint8_t* pixels);

}  // namespace omnibal::data
