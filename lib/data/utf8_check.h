// UTF-8 validation of annotation text, so that a record with bytes that are not UTF-8 (a Latin-1
// file, a truncated multi-byte character) is reported as such, with the byte offset and the
// offending bytes, instead of as "not valid JSON" (JSON text is UTF-8, RFC 8259 §8.1).
// Well-formed means RFC 3629 / Unicode Table 3-7: no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF — the same bytes nlohmann::json rejects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace omnibal::data {

/// The first ill-formed UTF-8 sequence of a text.
struct Utf8Error {
  size_t offset = 0;           ///< 0-based byte offset of the sequence's first byte
  std::vector<uint8_t> bytes;  ///< its bytes, up to and including the first one that is wrong
  /// "(0xC3 0x28)": the bytes in hex, as messages show them.
  std::string hex() const;
};

/// The first ill-formed sequence of `text`, or nullopt when all of it is well-formed UTF-8.
std::optional<Utf8Error> find_invalid_utf8(std::string_view text);

}  // namespace omnibal::data
