#include "partition/micro_batch_load.h"

#include <algorithm>

#include "core/error.h"

namespace omnibal::partition {

int64_t MicroBatchLoad::tiles() const {
  int64_t t = 0;
  for (auto v : sample_tiles) t += v;
  return t;
}

int64_t MicroBatchLoad::real_tokens() const {
  int64_t t = 0;
  for (auto v : sample_tokens) t += v;
  return t;
}

int64_t MicroBatchLoad::computed_tokens() const {
  return padded_len > 0 ? samples() * padded_len : real_tokens();
}

double MicroBatchLoad::attention_square_sum() const {
  if (padded_len > 0) return static_cast<double>(samples()) * padded_len * padded_len;
  double s = 0;
  for (auto v : sample_tokens) s += static_cast<double>(v) * v;
  return s;
}

MicroBatchLoad MicroBatchLoad::unpadded() const {
  MicroBatchLoad copy = *this;
  copy.padded_len = 0;
  return copy;
}

MicroBatchLoad MicroBatchLoad::packed(std::vector<int32_t> tiles, std::vector<int32_t> tokens) {
  OMNIBAL_CHECK(tiles.size() == tokens.size(), "micro-batch load: ", tiles.size(),
                " tile counts but ", tokens.size(), " token counts");
  MicroBatchLoad load;
  load.sample_tiles = std::move(tiles);
  load.sample_tokens = std::move(tokens);
  return load;
}

MicroBatchLoad MicroBatchLoad::padded_to_longest(std::vector<int32_t> tiles,
                                                 std::vector<int32_t> tokens) {
  MicroBatchLoad load = packed(std::move(tiles), std::move(tokens));
  for (auto v : load.sample_tokens) load.padded_len = std::max(load.padded_len, v);
  return load;
}

}  // namespace omnibal::partition
