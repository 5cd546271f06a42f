// Shared helpers of the lib/data tests: temporary directories, PNG and text fixtures, and a
// small SentencePiece model trained once per test process with Debian's spm_train.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/image_io.h"

namespace omnibal::data::testing {

/// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "omnibal_data_XXXXXX").string();
    OMNIBAL_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// Path of `name` inside the directory.
  std::string file(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// Writes `text` to `path`.
inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  OMNIBAL_CHECK(out.good(), "cannot write ", path);
}

/// Writes a width x height grey PNG whose left half is `left` and right half `right`.
inline void write_split_png(const std::string& path, int width, int height, uint8_t left,
                            uint8_t right) {
  std::vector<uint8_t> px(static_cast<size_t>(width) * height);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x)
      px[static_cast<size_t>(y) * width + x] = x < width / 2 ? left : right;
  }
  write_png(path, width, height, 1, px.data());
}

/// The bytes of file `path`.
inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  OMNIBAL_CHECK(in.good(), "cannot read ", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Writes `bytes` to `path`.
inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  OMNIBAL_CHECK(out.good(), "cannot write ", path);
}

/// CRC-32 of PNG chunks (ISO 3309 / zlib polynomial 0xEDB88320).
inline uint32_t png_crc32(const uint8_t* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

/// Rewrites the IHDR width and height of the PNG at `path` (its CRC recomputed), so its header
/// claims width x height whatever its image data holds.
inline void patch_png_size(const std::string& path, uint32_t width, uint32_t height) {
  std::vector<uint8_t> b = read_bytes(path);
  OMNIBAL_CHECK(b.size() > 33 && b[12] == 'I' && b[13] == 'H', path, ": no IHDR at byte 12");
  for (int i = 0; i < 4; ++i) {
    b[16 + i] = static_cast<uint8_t>(width >> (24 - 8 * i));
    b[20 + i] = static_cast<uint8_t>(height >> (24 - 8 * i));
  }
  const uint32_t crc = png_crc32(b.data() + 12, 17);  // chunk type + 13 data bytes
  for (int i = 0; i < 4; ++i) b[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  write_bytes(path, b);
}

/// A PNG whose header claims width x height but whose data holds 4 rows of 64 grey pixels (a
/// decompression bomb as seen from its header; decoding it fails for want of pixels).
inline void write_claiming_png(const std::string& path, uint32_t width, uint32_t height) {
  write_split_png(path, 64, 4, 0, 255);
  patch_png_size(path, width, height);
}

/// Path of a BPE SentencePiece model with the special tokens, trained once per process on a
/// small fixed corpus (spm_train, as scripts/make_demo_data.sh does).
inline const std::string& test_tokenizer() {
  static const std::string path = [] {
    static TempDir dir;
    std::string corpus;
    for (int i = 0; i < 20; ++i) {
      corpus +=
          "What item is shown?\nSneaker\nIs it footwear?\nYes.\nNo.\nuser\nassistant\n"
          "Which image shows a bag?\nImage 2.\nList the items in row 1.\nCoat, Bag, Dress\n";
    }
    write_text(dir.file("corpus.txt"), corpus);
    const std::string cmd =
        "cd '" + dir.path() +
        "' && spm_train --input=corpus.txt --model_prefix=t --model_type=bpe --vocab_size=400 "
        "--hard_vocab_limit=false --character_coverage=1.0 --byte_fallback=true "
        "--normalization_rule_name=identity --remove_extra_whitespaces=false "
        "--add_dummy_prefix=false --random_seed=1 --minloglevel=2 "
        "'--user_defined_symbols=<img>,</img>,<IMG_CONTEXT>,<|im_start|>,<|im_end|>' "
        "> spm.log 2>&1";
    OMNIBAL_CHECK(std::system(cmd.c_str()) == 0, "spm_train failed: see ", dir.file("spm.log"));
    return dir.file("t.model");
  }();
  return path;
}

}  // namespace omnibal::data::testing
