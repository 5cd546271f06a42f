// Size and checksum of a file, for checkpoint manifests. The checksum is XXH3-64 from Debian's
// libxxhash (xxHash 0.8): a non-cryptographic hash that detects accidental corruption (torn
// writes, flipped bits, truncation) at memory speed (tens of GB/s), so verifying a 100 GB
// checkpoint costs the read, not the hash; zlib's crc32 runs at ~1-2 GB/s. It does not protect
// against deliberate tampering (use a signature for that).
// Not here: hashing while writing (the digest reads back what is on disk, which is the point).
#pragma once

#include <cstdint>
#include <string>

namespace omnibal::checkpoint {

/// Bytes and XXH3-64 of a file's contents.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
  /// The hash as 16 lowercase hex digits (the form stored in manifest.json).
  std::string hex() const;
};

/// Reads `path` in 8 MiB blocks and returns its size and XXH3-64. Throws omnibal::Error naming
/// the path when it cannot be read.
FileDigest digest_file(const std::string& path);

/// XXH3-64 of an in-memory buffer (the manifest's own checksum).
uint64_t xxh3_of(const std::string& bytes);

/// 16 lowercase hex digits of `value`.
std::string to_hex64(uint64_t value);

}  // namespace omnibal::checkpoint
