// Shared helpers of the balance tests: synthetic length tables shaped like the InternVL-1.2
// records (tiles 1/3/4/5, about 256 tokens per tile plus text), temporary files, Spearman, and
// the check that a packing is a partition of its samples.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "balance/length_reader.h"
#include "balance/pack_list.h"
#include "balance/sample_table.h"
#include "core/paths.h"
#include "core/rng.h"

namespace omnibal::balance::testing {

/// The three shared InternVL-1.2 length files (40,941 samples) under $OMNIBAL_SHARED_DATA;
/// throws (the test fails, never skips) when they are missing.
inline SampleTable shared_table() {
  const std::string dir = "internvl-chat-1.2-lengths/";
  return read_length_files({require_shared_file(dir + "ai2d_train_12k_wh_token_lengths.json"),
                            require_shared_file(dir + "chartqa_train_18k_wh_token_lengths.json"),
                            require_shared_file(dir + "docvqa_train_10k_wh_token_lengths.json")});
}

/// Every sample id in [0, samples) is in exactly one pack or in r.skipped, no pack is empty.
inline void require_partition(const PackResult& r, size_t samples) {
  std::vector<int> seen(samples, 0);
  for (size_t p = 0; p < r.packs.size(); ++p) {
    REQUIRE(r.packs.end(p) - r.packs.begin(p) >= 1);
    for (const uint32_t* it = r.packs.begin(p); it != r.packs.end(p); ++it) ++seen.at(*it);
  }
  for (uint32_t id : r.skipped) ++seen.at(id);
  for (size_t i = 0; i < samples; ++i) REQUIRE(seen[i] == 1);
}

/// `n` samples in `datasets` datasets; tiles from {1, 3, 4, 5}, tokens 256 * tiles + [20, 20 +
/// text_max). Deterministic for `seed`.
inline SampleTable synthetic_table(size_t n, uint64_t seed, int datasets = 1, int text_max = 800) {
  SampleTable t;
  for (int d = 0; d < datasets; ++d)
    t.add_dataset({"ds" + std::to_string(d), "synthetic" + std::to_string(d), 0, 0, 1.0});
  Rng rng(seed);
  static constexpr int32_t kTiles[] = {1, 3, 4, 5, 5, 5};
  std::vector<uint32_t> next_index(datasets, 0);
  for (size_t i = 0; i < n; ++i) {
    const int32_t tiles = kTiles[rng.below(6)];
    const int32_t tokens = 256 * tiles + 20 + static_cast<int32_t>(rng.below(text_max));
    const auto ds = static_cast<uint32_t>(rng.below(datasets));
    t.add(ds, next_index[ds]++, Load{{tiles, tokens}}, tiles);
    ++t.datasets[ds].records;
  }
  return t;
}

/// A file under the system temp directory, removed when the object dies.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name, const std::string& content) {
    static int counter = 0;
    path = (std::filesystem::temp_directory_path() /
            ("omnibal_balance_test_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++) + "_" + name))
               .string();
    std::ofstream(path) << content;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

/// Ranks of `x` (average ranks for ties), 1-based.
inline std::vector<double> ranks(const std::vector<double>& x) {
  std::vector<size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && x[idx[j + 1]] == x[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = (static_cast<double>(i + j) / 2.0) + 1.0;
    i = j + 1;
  }
  return r;
}

/// Spearman rank correlation of two equally long series.
inline double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const auto ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n;
  const double mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    cov += (ra[i] - ma) * (rb[i] - mb);
    va += (ra[i] - ma) * (ra[i] - ma);
    vb += (rb[i] - mb) * (rb[i] - mb);
  }
  return cov / std::sqrt(va * vb);
}

}  // namespace omnibal::balance::testing
