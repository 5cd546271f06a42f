#include "data/image_header.h"

#include <algorithm>
#include <cstring>

namespace omnibal::data {

namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
constexpr int64_t kPngMaxSide = 0x7FFFFFFF;  // PNG spec: width and height < 2^31

// A sequential byte source from where the header starts; rewind() goes back to that start.
class HeaderSource {
 public:
  virtual ~HeaderSource() = default;
  /// Reads up to n bytes into dst; returns how many were read.
  virtual size_t read(uint8_t* dst, size_t n) = 0;
  /// Skips n bytes (a short source shows at the next read).
  virtual void skip(size_t n) = 0;
  virtual void rewind() = 0;
};

class FileHeaderSource : public HeaderSource {
 public:
  explicit FileHeaderSource(std::FILE* f) : f_(f), start_(std::ftell(f)) {}
  size_t read(uint8_t* dst, size_t n) override { return std::fread(dst, 1, n, f_); }
  void skip(size_t n) override { std::fseek(f_, static_cast<long>(n), SEEK_CUR); }
  void rewind() override { std::fseek(f_, start_, SEEK_SET); }

 private:
  std::FILE* f_;
  long start_;
};

class MemoryHeaderSource : public HeaderSource {
 public:
  MemoryHeaderSource(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t read(uint8_t* dst, size_t n) override {
    const size_t k = std::min(n, size_ - pos_);
    if (k > 0) std::memcpy(dst, data_ + pos_, k);
    pos_ += k;
    return k;
  }
  void skip(size_t n) override { pos_ += std::min(n, size_ - pos_); }
  void rewind() override { pos_ = 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

uint32_t big_endian(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

ImageHeader failed(ImageHeader h, HeaderStatus status, std::string problem) {
  h.status = status;
  h.problem = std::move(problem);
  return h;
}

// PNG: the 8-byte signature, then the IHDR chunk (length, "IHDR", width, height, ...). Apple's
// CgBI chunk, which stb accepts in front of IHDR, is skipped.
ImageHeader read_png_header(HeaderSource& src, ImageHeader h) {
  uint8_t b[24];
  const size_t n = src.read(b, 8);
  if (n < 8)
    return failed(h, HeaderStatus::kTruncated,
                  "the file ends inside the PNG signature (" + std::to_string(n) + " of 8 bytes)");
  if (std::memcmp(b, kPngSignature, 8) != 0)
    return failed(h, HeaderStatus::kCorrupt,
                  "damaged PNG signature " + hex_bytes({b, b + 8}) +
                      " (expected 89 50 4e 47 0d 0a 1a 0a; was it copied as text?)");
  size_t got = src.read(b + 8, 8);
  if (got == 8 && std::memcmp(b + 12, "CgBI", 4) == 0) {
    src.skip(big_endian(b + 8, 4) + 4);  // chunk data and CRC
    got = src.read(b + 8, 8);
  }
  if (got == 8 && std::memcmp(b + 12, "IHDR", 4) != 0)
    return failed(h, HeaderStatus::kCorrupt,
                  "the first PNG chunk is '" + std::string(reinterpret_cast<char*>(b + 12), 4) +
                      "', not IHDR");
  if (got == 8) got += src.read(b + 16, 8);
  if (got < 16)
    return failed(h, HeaderStatus::kTruncated,
                  "the file ends inside the PNG header (" + std::to_string(8 + got) +
                      " of 24 bytes)");
  h.width = big_endian(b + 16, 4);
  h.height = big_endian(b + 20, 4);
  if (h.width == 0 || h.height == 0 || h.width > kPngMaxSide || h.height > kPngMaxSide)
    return failed(h, HeaderStatus::kCorrupt,
                  "the PNG header gives an impossible size of " + std::to_string(h.width) + " x " +
                      std::to_string(h.height));
  h.status = HeaderStatus::kOk;
  return h;
}

bool is_jpeg_frame_marker(uint8_t m) {  // SOF0..SOF15 without DHT (C4), JPG (C8), DAC (CC)
  return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

// JPEG: SOI, then marker segments up to the first frame header SOFn, which holds the height and
// width. Segments before it (APPn with EXIF, tables) are skipped by their lengths.
ImageHeader read_jpeg_header(HeaderSource& src, ImageHeader h) {
  uint8_t b[5];
  src.read(b, 2);  // SOI, checked by the caller
  const std::string truncated = "the file ends before the JPEG frame header (SOFn)";
  for (;;) {
    if (src.read(b, 1) < 1) return failed(h, HeaderStatus::kTruncated, truncated);
    if (b[0] != 0xFF)
      return failed(h, HeaderStatus::kCorrupt,
                    "byte " + hex_bytes({b[0]}) + " where a JPEG marker should start");
    do {  // fill bytes 0xFF may precede a marker
      if (src.read(b, 1) < 1) return failed(h, HeaderStatus::kTruncated, truncated);
    } while (b[0] == 0xFF);
    const uint8_t m = b[0];
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // markers without a segment
    if (m == 0xD9 || m == 0xDA)
      return failed(h, HeaderStatus::kCorrupt,
                    std::string("the JPEG ") +
                        (m == 0xD9 ? "ends (EOI)" : "scan data (SOS) starts") +
                        " before any frame header (SOFn)");
    if (src.read(b, 2) < 2) return failed(h, HeaderStatus::kTruncated, truncated);
    const uint32_t length = big_endian(b, 2);
    if (length < 2)
      return failed(h, HeaderStatus::kCorrupt,
                    "JPEG segment " + hex_bytes({0xFF, m}) + " has length " +
                        std::to_string(length));
    if (!is_jpeg_frame_marker(m)) {
      src.skip(length - 2);
      continue;
    }
    if (src.read(b, 5) < 5)
      return failed(h, HeaderStatus::kTruncated, "the file ends inside the JPEG frame header");
    h.height = big_endian(b + 1, 2);
    h.width = big_endian(b + 3, 2);
    if (h.width == 0 || h.height == 0)  // height 0 = defined later by DNL, which stb refuses too
      return failed(h, HeaderStatus::kCorrupt,
                    "the JPEG frame header gives a size of " + std::to_string(h.width) + " x " +
                        std::to_string(h.height));
    h.status = HeaderStatus::kOk;
    return h;
  }
}

ImageHeader read_header(HeaderSource& src) {
  ImageHeader h;
  uint8_t b[8];
  const size_t n = src.read(b, 8);
  h.leading.assign(b, b + n);
  src.rewind();
  if (n == 0) return failed(h, HeaderStatus::kEmpty, "the file is empty (0 bytes)");
  if (n >= 4 && std::memcmp(b, kPngSignature, 4) == 0) {
    h.format = ImageFormat::kPng;
    return read_png_header(src, std::move(h));
  }
  if (n >= 2 && b[0] == 0xFF && b[1] == 0xD8) {
    h.format = ImageFormat::kJpeg;
    return read_jpeg_header(src, std::move(h));
  }
  return failed(h, HeaderStatus::kUnknownFormat,
                "not a PNG or JPEG file (it starts with " + hex_bytes(h.leading) + ")");
}

}  // namespace

const char* format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

ImageHeader read_image_header(std::FILE* file) {
  FileHeaderSource src(file);
  return read_header(src);
}

ImageHeader read_image_header(const uint8_t* data, size_t size) {
  MemoryHeaderSource src(data, size);
  return read_header(src);
}

std::string hex_bytes(const std::vector<uint8_t>& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (const uint8_t c : bytes) {
    if (!s.empty()) s += ' ';
    s += kDigits[c >> 4];
    s += kDigits[c & 15];
  }
  return s;
}

}  // namespace omnibal::data
