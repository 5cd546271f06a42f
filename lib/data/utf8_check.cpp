#include "data/utf8_check.h"

#include <fmt/format.h>

#include <algorithm>

namespace omnibal::data {

std::string Utf8Error::hex() const {
  std::string out = "(";
  for (size_t i = 0; i < bytes.size(); ++i)
    out += fmt::format("{}0x{:02X}", i ? " " : "", bytes[i]);
  return out + ")";
}

std::optional<Utf8Error> find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    // Length and the allowed range of the second byte (Unicode Table 3-7).
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b == 0xE0) len = 3, lo = 0xA0;  // no overlong 3-byte forms
    else if (b == 0xED) len = 3, hi = 0x9F;  // no surrogates
    else if (b >= 0xE1 && b <= 0xEF) len = 3;
    else if (b == 0xF0) len = 4, lo = 0x90;  // no overlong 4-byte forms
    else if (b == 0xF4) len = 4, hi = 0x8F;  // nothing above U+10FFFF
    else if (b >= 0xF1 && b <= 0xF3) len = 4;
    if (len == 0) return Utf8Error{i, {b}};  // 0x80..0xC1 or 0xF5..0xFF cannot start a sequence
    for (size_t k = 1; k < len; ++k) {
      const bool ok =
          i + k < n && s[i + k] >= (k == 1 ? lo : 0x80) && s[i + k] <= (k == 1 ? hi : 0xBF);
      if (!ok) {
        const size_t end = std::min(n, i + k + 1);  // include the wrong byte when there is one
        return Utf8Error{i, std::vector<uint8_t>(s + i, s + end)};
      }
    }
    i += len;
  }
  return std::nullopt;
}

}  // namespace omnibal::data
