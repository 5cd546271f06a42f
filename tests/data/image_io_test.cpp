// Image headers and the pixel limit (data.max_image_pixels): omnibal's own PNG / JPEG header
// reader, what probe_image and decode_image say about each kind of bad file (empty, truncated
// header, damaged signature, unknown format, truncated image data, over the limit, over stb's
// own limits), and that the limit is applied from the header before any decoding.
#include <catch2/catch.hpp>

#include "data/image_header.h"
#include "data/image_io.h"
#include "data_fixtures.h"

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb_image_write.h>
#pragma GCC diagnostic pop

using namespace omnibal::data;

namespace {

constexpr int64_t kNoLimit = 0;
constexpr int64_t kPilLimit = 89478485;

ImageHeader header_of(const std::vector<uint8_t>& bytes) {
  return read_image_header(bytes.data(), bytes.size());
}

// A JPEG header: SOI, an APP0 segment of `app_bytes` payload bytes, fill bytes, then a
// progressive frame header (SOF2) of width x height, and nothing after it.
std::vector<uint8_t> jpeg_header(int width, int height, int app_bytes) {
  std::vector<uint8_t> b = {0xFF,
                            0xD8,
                            0xFF,
                            0xE0,
                            static_cast<uint8_t>((app_bytes + 2) >> 8),
                            static_cast<uint8_t>(app_bytes + 2)};
  b.insert(b.end(), static_cast<size_t>(app_bytes), 'x');
  b.insert(b.end(), {0xFF, 0xFF, 0xC2, 0x00, 0x11, 0x08, static_cast<uint8_t>(height >> 8),
                     static_cast<uint8_t>(height), static_cast<uint8_t>(width >> 8),
                     static_cast<uint8_t>(width), 0x03});
  return b;
}

// probe_image's error for `path` (fails the test when the probe succeeds).
ImageError probe_error(const std::string& path, int64_t max_pixels) {
  ImageError error;
  const auto size = probe_image(path, max_pixels, error);
  CHECK_FALSE(size.has_value());
  return error;
}

ImageError decode_error(const std::string& path, int64_t max_pixels) {
  ImageError error;
  const auto image = decode_image(path, max_pixels, error);
  CHECK_FALSE(image.has_value());
  return error;
}

}  // namespace

TEST_CASE("image header: PNG and JPEG sizes from their headers", "[data][image]") {
  testing::TempDir dir;
  testing::write_split_png(dir.file("a.png"), 96, 40, 0, 255);
  const ImageHeader png = header_of(testing::read_bytes(dir.file("a.png")));
  CHECK(png.status == HeaderStatus::kOk);
  CHECK(png.format == ImageFormat::kPng);
  CHECK(png.width == 96);
  CHECK(png.height == 40);

  // Segments before the frame header (EXIF and the like) are skipped by their lengths.
  const ImageHeader jpeg = header_of(jpeg_header(1920, 1080, 300));
  CHECK(jpeg.status == HeaderStatus::kOk);
  CHECK(jpeg.format == ImageFormat::kJpeg);
  CHECK(jpeg.width == 1920);
  CHECK(jpeg.height == 1080);

  // The file reader reads the same as the memory reader.
  testing::write_bytes(dir.file("b.jpg"), jpeg_header(33, 17, 5000));
  std::FILE* f = std::fopen(dir.file("b.jpg").c_str(), "rb");
  REQUIRE(f != nullptr);
  const ImageHeader from_file = read_image_header(f);
  std::fclose(f);
  CHECK(from_file.status == HeaderStatus::kOk);
  CHECK(from_file.width == 33);
  CHECK(from_file.height == 17);
}

TEST_CASE("image header: each kind of bad header is named", "[data][image]") {
  testing::TempDir dir;
  testing::write_split_png(dir.file("a.png"), 8, 8, 0, 255);
  const std::vector<uint8_t> png = testing::read_bytes(dir.file("a.png"));
  std::vector<uint8_t> zero = png;
  zero[19] = 0;  // width 8 -> 0 (CRC not checked: the size is refused first)
  std::vector<uint8_t> text_mode = png;
  text_mode[4] = '\n';  // CR LF -> LF, as a text-mode copy does
  const std::vector<uint8_t> jpeg = jpeg_header(64, 64, 10);
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    HeaderStatus status;
    const char* problem;
  };
  const std::vector<Case> cases = {
      {"empty", {}, HeaderStatus::kEmpty, "empty (0 bytes)"},
      {"text",
       {'<', 'h', 't', 'm', 'l', '>'},
       HeaderStatus::kUnknownFormat,
       "not a PNG or JPEG file (it starts with 3c 68 74 6d 6c 3e)"},
      {"png signature cut",
       {png.begin(), png.begin() + 5},
       HeaderStatus::kTruncated,
       "ends inside the PNG signature (5 of 8 bytes)"},
      {"png header cut",
       {png.begin(), png.begin() + 20},
       HeaderStatus::kTruncated,
       "ends inside the PNG header (20 of 24 bytes)"},
      {"png signature damaged", text_mode, HeaderStatus::kCorrupt, "damaged PNG signature"},
      {"png zero width", zero, HeaderStatus::kCorrupt, "impossible size of 0 x 8"},
      {"jpeg cut before frame",
       {jpeg.begin(), jpeg.begin() + 10},
       HeaderStatus::kTruncated,
       "ends before the JPEG frame header"},
      {"jpeg without frame",
       {0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02},
       HeaderStatus::kCorrupt,
       "scan data (SOS) starts before any frame header"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const ImageHeader h = header_of(c.bytes);
    CHECK(h.status == c.status);
    CHECK_THAT(h.problem, Catch::Contains(c.problem));
  }
}

TEST_CASE("probe_image: what is wrong with a file, in words", "[data][image]") {
  testing::TempDir dir;
  testing::write_split_png(dir.file("ok.png"), 64, 64, 0, 255);
  const std::vector<uint8_t> png = testing::read_bytes(dir.file("ok.png"));
  testing::write_bytes(dir.file("cut.png"), {png.begin(), png.begin() + 20});
  testing::write_text(dir.file("empty.png"), "");
  testing::write_text(dir.file("text.png"), "this is not an image");

  ImageError e = probe_error(dir.file("none.png"), kPilLimit);
  CHECK(e.fault == ImageFault::kMissing);
  CHECK_THAT(e.why, Catch::Contains("none.png' does not exist"));
  e = probe_error(dir.file("cut.png"), kPilLimit);
  CHECK(e.fault == ImageFault::kCorrupt);
  CHECK_THAT(e.why, Catch::Contains("cut.png' is truncated: the file ends inside the PNG header"));
  e = probe_error(dir.file("empty.png"), kPilLimit);
  CHECK_THAT(e.why, Catch::Contains("empty.png' is empty"));
  e = probe_error(dir.file("text.png"), kPilLimit);
  CHECK(e.fault == ImageFault::kCorrupt);
  CHECK_THAT(e.why, Catch::Contains("text.png' is not a PNG or JPEG file (it starts with 74 68 "
                                    "69 73") &&
                        Catch::Contains("nor another format stb reads (stb: unknown image type)"));
  ImageError none;
  const auto size = probe_image(dir.file("ok.png"), kPilLimit, none);
  REQUIRE(size.has_value());
  CHECK(size->width == 64);
  CHECK(size->height == 64);
}

TEST_CASE("pixel limit: from the header, before decoding; 0 = no limit", "[data][image]") {
  testing::TempDir dir;
  testing::write_split_png(dir.file("100.png"), 100, 100, 0, 255);
  ImageError e;
  CHECK(probe_image(dir.file("100.png"), 10000, e).has_value());  // the limit itself is allowed
  CHECK(probe_image(dir.file("100.png"), kNoLimit, e).has_value());
  e = probe_error(dir.file("100.png"), 9999);
  CHECK(e.fault == ImageFault::kTooLarge);
  CHECK(e.why == "image '" + dir.file("100.png") +
                     "' is 100 x 100 = 10000 pixels, over data.max_image_pixels 9999 (raise it, "
                     "0 = no limit, or remove the image)");
  CHECK(decode_error(dir.file("100.png"), 9999).fault == ImageFault::kTooLarge);
  CHECK(decode_image(dir.file("100.png"), 10000, e).has_value());

  // 4 rows of data under a header of 30000 x 30000: refused by its header at the default limit
  // (before this, stb read it as "unknown image type").
  testing::write_claiming_png(dir.file("bomb.png"), 30000, 30000);
  e = probe_error(dir.file("bomb.png"), kPilLimit);
  CHECK(e.fault == ImageFault::kTooLarge);
  CHECK_THAT(e.why, Catch::Contains("is 30000 x 30000 = 900000000 pixels, over "
                                    "data.max_image_pixels 89478485"));
  e = decode_error(dir.file("bomb.png"), kPilLimit);
  CHECK(e.fault == ImageFault::kTooLarge);
  CHECK_THAT(e.why, Catch::Contains("30000 x 30000 = 900000000 pixels"));
  // Without a limit, grey 30000 x 30000 fits stb's limits: the probe passes it.
  CHECK(probe_image(dir.file("bomb.png"), kNoLimit, e).has_value());

  // RGB 30000 x 30000 is over stb's own 2^30-byte limit: too large, with stb's reason.
  std::vector<uint8_t> rgb(64 * 4 * 3, 128);
  write_png(dir.file("rgb.png"), 64, 4, 3, rgb.data());
  testing::patch_png_size(dir.file("rgb.png"), 30000, 30000);
  e = probe_error(dir.file("rgb.png"), kNoLimit);
  CHECK(e.fault == ImageFault::kTooLarge);
  CHECK_THAT(e.why, Catch::Contains("(PNG, 30000 x 30000) is too large for stb to decode (stb: "
                                    "too large)"));
}

TEST_CASE("decode_image: a readable header over bad data is truncated or corrupt data",
          "[data][image]") {
  testing::TempDir dir;
  // A header that claims more rows than the data holds.
  testing::write_claiming_png(dir.file("short.png"), 64, 64);
  ImageError e;
  const auto size = probe_image(dir.file("short.png"), kPilLimit, e);  // the header is fine
  REQUIRE(size.has_value());
  CHECK(size->height == 64);
  e = decode_error(dir.file("short.png"), kPilLimit);
  CHECK(e.fault == ImageFault::kCorrupt);
  CHECK_THAT(e.why, Catch::Contains("short.png' (PNG, 64 x 64) has truncated or corrupt image "
                                    "data (stb: "));
  CHECK_THAT(e.why, !Catch::Contains("header"));

  // A file cut inside its image data.
  testing::write_split_png(dir.file("full.png"), 64, 64, 0, 255);
  std::vector<uint8_t> bytes = testing::read_bytes(dir.file("full.png"));
  bytes.resize(bytes.size() - 20);
  testing::write_bytes(dir.file("cut.png"), bytes);
  e = decode_error(dir.file("cut.png"), kPilLimit);
  CHECK(e.fault == ImageFault::kCorrupt);
  CHECK_THAT(e.why, Catch::Contains("has truncated or corrupt image data (stb: "));

  // A real JPEG decodes; its header is read by omnibal's reader.
  std::vector<uint8_t> px(40 * 24 * 3, 200);
  REQUIRE(stbi_write_jpg(dir.file("a.jpg").c_str(), 40, 24, 3, px.data(), 90));
  const auto jpeg = decode_image(dir.file("a.jpg"), kPilLimit, e);
  REQUIRE(jpeg.has_value());
  CHECK(jpeg->width == 40);
  CHECK(jpeg->height == 24);
  CHECK(header_of(testing::read_bytes(dir.file("a.jpg"))).width == 40);
  CHECK(probe_error(dir.file("a.jpg"), 959).fault == ImageFault::kTooLarge);
}
