#include "checkpoint/file_digest.h"

#include "core/error.h"

#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace omnibal::checkpoint {

std::string to_hex64(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

std::string FileDigest::hex() const { return to_hex64(xxh3); }

uint64_t xxh3_of(const std::string& bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

FileDigest digest_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  OMNIBAL_CHECK(file != nullptr, "cannot read ", path, ": ", std::strerror(errno));
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                        &XXH3_freeState);
  OMNIBAL_CHECK(state != nullptr && XXH3_64bits_reset(state.get()) == XXH_OK,
                "cannot initialise XXH3 for ", path);
  std::vector<char> block(8 << 20);
  FileDigest digest;
  while (true) {
    const size_t n = std::fread(block.data(), 1, block.size(), file.get());
    if (n > 0) {
      XXH3_64bits_update(state.get(), block.data(), n);
      digest.bytes += n;
    }
    if (n < block.size()) break;
  }
  OMNIBAL_CHECK(!std::ferror(file.get()), "error while reading ", path, ": ", std::strerror(errno));
  digest.xxh3 = XXH3_64bits_digest(state.get());
  return digest;
}

}  // namespace omnibal::checkpoint
