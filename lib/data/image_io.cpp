#include "data/image_io.h"

#include <filesystem>

#include "core/error.h"

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

std::optional<ImageSize> probe_image(const std::string& path, bool& missing, std::string& why) {
  missing = !std::filesystem::is_regular_file(path);
  if (missing) {
    why = "image file '" + path + "' does not exist";
    return std::nullopt;
  }
  int w = 0, h = 0, c = 0;
  if (!stbi_info(path.c_str(), &w, &h, &c) || w <= 0 || h <= 0) {
    why = "image file '" + path + "' has no readable JPEG/PNG header (" +
          (stbi_failure_reason() ? stbi_failure_reason() : "unknown") + ")";
    return std::nullopt;
  }
  return ImageSize{w, h};
}

std::optional<RgbImage> decode_image(const std::string& path, bool& missing, std::string& why) {
  missing = !std::filesystem::is_regular_file(path);
  if (missing) {
    why = "image file '" + path + "' does not exist";
    return std::nullopt;
  }
  int w = 0, h = 0, c = 0;
  stbi_uc* data = stbi_load(path.c_str(), &w, &h, &c, 3);
  if (data == nullptr) {
    why = "image file '" + path + "' cannot be decoded (" +
          (stbi_failure_reason() ? stbi_failure_reason() : "unknown") + ")";
    return std::nullopt;
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
