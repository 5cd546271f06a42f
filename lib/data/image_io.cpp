#include "data/image_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>

#include "core/error.h"
#include "data/image_header.h"

// stb implementations, file-local (static) so they cannot collide with another copy.
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_RESIZE_STATIC
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb_image.h>
#include <stb_image_resize.h>
#include <stb_image_write.h>
#pragma GCC diagnostic pop

namespace omnibal::data {

namespace {

std::string stb_reason() {
  const char* r = stbi_failure_reason();
  return r != nullptr && *r != '\0' ? r : "no reason given";
}

// stb's reasons when an image is over its own limits (2^24 per side, 2^30 bytes) or memory ran
// out while decoding.
bool stb_says_too_large(const std::string& reason) {
  return reason == "too large" || reason == "outofmem";
}

// stbi_info tries each format in turn and, when all fail, reports the last one's reason
// ("unknown image type") whatever was wrong; for a file the header reader identified as PNG or
// JPEG, that format's own reader (stb internals, compiled into this file) gives the reason that
// applies.
int stb_info_as(ImageFormat format, stbi__context* s, int* w, int* h, int* c) {
  return format == ImageFormat::kPng ? stbi__png_info(s, w, h, c) : stbi__jpeg_info(s, w, h, c);
}

std::nullopt_t image_failed(ImageError& error, ImageFault fault, std::string why) {
  error = {fault, std::move(why)};
  return std::nullopt;
}

// "image file 'p' (PNG, 640 x 480)".
std::string described(const std::string& path, ImageFormat format, int64_t w, int64_t h) {
  std::string s = "image file '" + path + "' (";
  if (format != ImageFormat::kUnknown) s += std::string(format_name(format)) + ", ";
  return s + std::to_string(w) + " x " + std::to_string(h) + ")";
}

// The size of an image from its header, or std::nullopt with `error` saying what is wrong.
// `stb_info(format, &w, &h, &c)` reads the header with stb: with kUnknown over every format it
// knows (files that are not PNG or JPEG), else with that format's reader (`confirm`).
template <class StbInfo>
std::optional<ImageSize> size_from_header(const std::string& path, const ImageHeader& h,
                                          int64_t max_pixels, StbInfo&& stb_info, bool confirm,
                                          ImageError& error) {
  const std::string file = "image file '" + path + "'";
  int w = 0, ht = 0, c = 0;
  switch (h.status) {
    case HeaderStatus::kEmpty: return image_failed(error, ImageFault::kCorrupt, file + " is empty");
    case HeaderStatus::kTruncated:
      return image_failed(error, ImageFault::kCorrupt, file + " is truncated: " + h.problem);
    case HeaderStatus::kCorrupt:
      return image_failed(error, ImageFault::kCorrupt,
                          file + " has a corrupt " + format_name(h.format) +
                              " header: " + h.problem);
    case HeaderStatus::kUnknownFormat:
      if (!stb_info(ImageFormat::kUnknown, &w, &ht, &c))
        return image_failed(error, ImageFault::kCorrupt,
                            file + " is " + h.problem +
                                ", nor another format stb reads (stb: " + stb_reason() + ")");
      if (over_pixel_limit(w, ht, max_pixels))
        return image_failed(error, ImageFault::kTooLarge,
                            over_pixel_limit_message(path, w, ht, max_pixels, ""));
      return ImageSize{w, ht};
    case HeaderStatus::kOk: break;
  }
  if (over_pixel_limit(h.width, h.height, max_pixels))
    return image_failed(error, ImageFault::kTooLarge,
                        over_pixel_limit_message(path, h.width, h.height, max_pixels, ""));
  if (confirm && !stb_info(h.format, &w, &ht, &c)) {
    const std::string reason = stb_reason();
    const std::string what = described(path, h.format, h.width, h.height);
    if (stb_says_too_large(reason))
      return image_failed(error, ImageFault::kTooLarge,
                          what + " is too large for stb to decode (stb: " + reason + ")");
    return image_failed(error, ImageFault::kCorrupt,
                        what + " has a header stb cannot read (stb: " + reason + ")");
  }
  return ImageSize{static_cast<int>(h.width), static_cast<int>(h.height)};
}

bool read_whole_file(const std::string& path, std::vector<uint8_t>& bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  bytes.resize(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(in) || bytes.empty();
}

}  // namespace

std::string over_pixel_limit_message(const std::string& path, int64_t width, int64_t height,
                                     int64_t max_pixels, const std::string& source) {
  return "image '" + path + "' is " + std::to_string(width) + " x " + std::to_string(height) +
         " = " + std::to_string(width * height) + " pixels" +
         (source.empty() ? "" : " (" + source + ")") + ", over data.max_image_pixels " +
         std::to_string(max_pixels) + " (raise it, 0 = no limit, or remove the image)";
}

std::optional<ImageSize> probe_image(const std::string& path, int64_t max_pixels,
                                     ImageError& error) {
  if (!std::filesystem::is_regular_file(path))
    return image_failed(error, ImageFault::kMissing, "image file '" + path + "' does not exist");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file)
    return image_failed(error, ImageFault::kCorrupt,
                        "image file '" + path + "' cannot be opened: " + std::strerror(errno));
  const ImageHeader header = read_image_header(file.get());
  auto stb_info = [&](ImageFormat format, int* w, int* h, int* c) {
    std::fseek(file.get(), 0, SEEK_SET);
    if (format == ImageFormat::kUnknown) return stbi_info_from_file(file.get(), w, h, c);
    stbi__context s;
    stbi__start_file(&s, file.get());
    return stb_info_as(format, &s, w, h, c);
  };
  return size_from_header(path, header, max_pixels, stb_info, /*confirm=*/true, error);
}

std::optional<RgbImage> decode_image(const std::string& path, int64_t max_pixels,
                                     ImageError& error) {
  if (!std::filesystem::is_regular_file(path))
    return image_failed(error, ImageFault::kMissing, "image file '" + path + "' does not exist");
  std::vector<uint8_t> bytes;
  if (!read_whole_file(path, bytes))
    return image_failed(error, ImageFault::kCorrupt,
                        "image file '" + path + "' cannot be read: " + std::strerror(errno));
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
    return image_failed(error, ImageFault::kTooLarge,
                        "image file '" + path + "' holds " + std::to_string(bytes.size()) +
                            " bytes, more than stb decodes (2 GiB)");
  const int length = static_cast<int>(bytes.size());
  const ImageHeader header = read_image_header(bytes.data(), bytes.size());
  auto stb_info = [&](ImageFormat, int* w, int* h, int* c) {
    return stbi_info_from_memory(bytes.data(), length, w, h, c);
  };
  const auto size = size_from_header(path, header, max_pixels, stb_info, /*confirm=*/false, error);
  if (!size) return std::nullopt;
  int w = 0, h = 0, c = 0;
  stbi_uc* data = stbi_load_from_memory(bytes.data(), length, &w, &h, &c, 3);
  if (data == nullptr) {
    const std::string reason = stb_reason();
    const std::string what = described(path, header.format, size->width, size->height);
    if (stb_says_too_large(reason))
      return image_failed(error, ImageFault::kTooLarge,
                          what + " is too large for stb to decode (stb: " + reason + ")");
    return image_failed(error, ImageFault::kCorrupt,
                        what + " has truncated or corrupt image data (stb: " + reason + ")");
  }
  RgbImage image{w, h, std::vector<uint8_t>(data, data + static_cast<size_t>(w) * h * 3)};
  stbi_image_free(data);
  return image;
}

RgbImage resize_image(const RgbImage& image, int width, int height) {
  RgbImage out{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  if (width == image.width && height == image.height) {
    out.pixels = image.pixels;
    return out;
  }
  const int ok = stbir_resize_uint8(image.pixels.data(), image.width, image.height, 0,
                                    out.pixels.data(), width, height, 0, 3);
  OMNIBAL_CHECK(ok, "stb resize from ", image.width, "x", image.height, " to ", width, "x", height,
                " failed");
  return out;
}

void write_png(const std::string& path, int width, int height, int channels,
               const uint8_t* pixels) {
  OMNIBAL_CHECK(channels == 1 || channels == 3, "write_png: channels must be 1 or 3, got ",
                channels);
  const int ok = stbi_write_png(path.c_str(), width, height, channels, pixels, width * channels);
  OMNIBAL_CHECK(ok, "cannot write PNG '", path, "'");
}

}  // namespace omnibal::data
