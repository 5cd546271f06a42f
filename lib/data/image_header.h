// The header of an image file read by omnibal itself, before stb sees the file: the format
// from the first bytes, and width and height of PNG (IHDR) and JPEG (the SOFn frame header).
// It tells what is wrong with a bad file (empty, truncated inside its header, corrupt header,
// not a PNG or JPEG) and gives the size that data.max_image_pixels is checked against before any
// decoding, so a small file claiming a huge image is refused from its header alone. Other
// formats stb reads (GIF, BMP, ...) are left to stbi_info (image_io.h). Reads at most the
// header: the PNG signature and IHDR (24 bytes), or a JPEG's markers up to its frame header.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace omnibal::data {

/// Container format, from the file's first bytes.
enum class ImageFormat {
  kUnknown,  ///< neither PNG nor JPEG (possibly another format stb reads)
  kPng,
  kJpeg
};

/// "PNG", "JPEG" or "unknown".
const char* format_name(ImageFormat format);

/// How reading the header went.
enum class HeaderStatus {
  kOk,             ///< PNG or JPEG with a width and height > 0
  kEmpty,          ///< the file has 0 bytes
  kUnknownFormat,  ///< not PNG or JPEG by its first bytes
  kTruncated,      ///< PNG or JPEG whose file ends inside the header
  kCorrupt         ///< PNG or JPEG whose header is malformed (zero size, bad chunk, no frame)
};

/// What the first bytes of an image file say.
struct ImageHeader {
  HeaderStatus status = HeaderStatus::kUnknownFormat;
  ImageFormat format = ImageFormat::kUnknown;
  int64_t width = 0;             ///< pixels, when status is kOk
  int64_t height = 0;            ///< pixels, when status is kOk
  std::string problem;           ///< what is wrong when status is not kOk ("the file ends ...")
  std::vector<uint8_t> leading;  ///< up to the first 8 bytes (for messages on unknown formats)
};

/// Reads the header from the current position of an open file (left where reading stopped).
ImageHeader read_image_header(std::FILE* file);

/// Reads the header of an image held in memory.
ImageHeader read_image_header(const uint8_t* data, size_t size);

/// "3c 68 74 6d" of `bytes` (messages).
std::string hex_bytes(const std::vector<uint8_t>& bytes);

}  // namespace omnibal::data
