// Grid choice of InternVL dynamic tiling on cases computed by hand from the rule (docs/paper.md),
// the tie rule, the multi-image budget split, the candidate order, and the pixels of the tiles.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "data/dynamic_tiling.h"

using namespace omnibal::data;

namespace {
TilingOptions opts(int tile, int min_tiles, int max_tiles) {
  TilingOptions o;
  o.tile_size = tile;
  o.min_tiles = min_tiles;
  o.max_tiles = max_tiles;
  return o;
}
}  // namespace

TEST_CASE("tiling: grid choice matches hand-computed cases", "[data][tiling]") {
  struct Case {
    int w, h, tile, min, max, cols, rows, tiles;
    const char* why;
  };
  // Each row was worked out from the rule: closest cols/rows to w/h; on an exact tie the later
  // (larger) grid wins when w*h > 0.5 * tile^2 * cols * rows; thumbnail when cols*rows > 1.
  const Case cases[] = {
      {448, 448, 448, 1, 6, 1, 1, 1, "1:1, area 200704 <= 0.5*448^2*4: stays 1x1"},
      {1000, 1000, 448, 1, 6, 2, 2, 5, "1:1 tie, 1e6 > 401408 takes 2x2; 3x3 is over max"},
      {1000, 1000, 448, 1, 12, 3, 3, 10, "1e6 > 903168 also takes 3x3"},
      {800, 400, 448, 1, 6, 2, 1, 3, "2:1 exact; 4x2 over max 6"},
      {800, 400, 448, 1, 12, 2, 1, 3, "4x2 ties but 320000 <= 802816"},
      {1800, 900, 448, 1, 12, 4, 2, 9, "1620000 > 802816 takes 4x2"},
      {600, 400, 448, 1, 6, 3, 2, 7, "1.5: 3x2 exact"},
      {600, 400, 448, 1, 4, 2, 1, 3, "1.5 without 3x2: 1x1 and 2x1 tie at 0.5, 240000 > 200704"},
      {300, 200, 448, 1, 2, 1, 1, 1, "same tie, 60000 <= 200704 keeps 1x1"},
      {500, 400, 448, 1, 4, 1, 1, 1, "1.25: 1x1 and 2x2 tie at 0.25, 200000 <= 401408"},
      {400, 1200, 448, 1, 6, 1, 3, 4, "1:3 portrait"},
      {448, 448, 448, 2, 6, 2, 2, 5, "min_tiles 2 removes 1x1"},
      {28, 28, 56, 1, 12, 1, 1, 1, "tiny preset: a Fashion-MNIST item"},
      {168, 84, 56, 1, 12, 4, 2, 9, "tiny: 14112 > 12544 takes 4x2"},
      {336, 112, 56, 1, 12, 6, 2, 13, "tiny: 3:1, 37632 > 18816 takes 6x2"},
      {168, 168, 56, 1, 12, 3, 3, 10, "tiny: 28224 > 14112 takes 3x3"},
  };
  for (const auto& c : cases) {
    INFO(c.w << "x" << c.h << " tile " << c.tile << " [" << c.min << ", " << c.max
             << "]: " << c.why);
    const auto o = opts(c.tile, c.min, c.max);
    const TileGrid g = find_closest_grid(c.w, c.h, o);
    CHECK(g.cols == c.cols);
    CHECK(g.rows == c.rows);
    CHECK(tile_count(g, o) == c.tiles);
  }
}

TEST_CASE("tiling: multi-image samples split the tile budget", "[data][tiling]") {
  const auto o = opts(448, 1, 12);
  CHECK(options_for_image(o, 1).max_tiles == 12);
  CHECK(options_for_image(o, 2).max_tiles == 6);
  CHECK(options_for_image(o, 5).max_tiles == 2);
  // 12 / 13 == 0: no candidate grid, so 1x1 (InternVL's default best ratio).
  const auto none = options_for_image(o, 13);
  CHECK(candidate_grids(none.min_tiles, none.max_tiles).empty());
  CHECK(find_closest_grid(2000, 1000, none) == TileGrid{1, 1});
  // 1000x1000 gets 3x3 alone but 2x2 as one of two images (max 6).
  CHECK(tile_count(find_closest_grid(1000, 1000, options_for_image(o, 2)), o) == 5);
}

TEST_CASE("tiling: the order of grids with equal tile counts never changes the choice",
          "[data][tiling]") {
  // InternVL orders same-product grids by Python set order; ours by cols. Reversing that order
  // must give the same grid for every size and budget (a sweep of the rule).
  auto reversed_choice = [](int w, int h, const TilingOptions& o) {
    auto grids = candidate_grids(o.min_tiles, o.max_tiles);
    std::stable_sort(grids.begin(), grids.end(), [](const TileGrid& a, const TileGrid& b) {
      return a.blocks() != b.blocks() ? a.blocks() < b.blocks() : a.cols > b.cols;
    });
    const double aspect = static_cast<double>(w) / h, area = static_cast<double>(w) * h;
    double best = std::numeric_limits<double>::infinity();
    TileGrid pick{1, 1};
    for (const auto& g : grids) {
      const double d = std::abs(aspect - static_cast<double>(g.cols) / g.rows);
      if (d < best) {
        best = d;
        pick = g;
      } else if (d == best && area > 0.5 * o.tile_size * o.tile_size * g.cols * g.rows) {
        pick = g;
      }
    }
    return pick;
  };
  const int max_tiles = GENERATE(range(1, 13));
  const auto o = opts(56, 1, max_tiles);
  for (int w = 8; w <= 400; w += 8) {
    for (int h = 8; h <= 400; h += 8) {
      REQUIRE(find_closest_grid(w, h, o) == reversed_choice(w, h, o));
    }
  }
}

TEST_CASE("tiling: tiles are row-major crops, then the thumbnail, normalised", "[data][tiling]") {
  // 112x56 grey image, left half 0, right half 255: grid 2x1, tile 0 black, tile 1 white, the
  // thumbnail (112x56 -> 56x56) black on the left edge and white on the right edge.
  RgbImage image{112, 56, std::vector<uint8_t>(112 * 56 * 3)};
  for (int y = 0; y < 56; ++y) {
    for (int x = 0; x < 112; ++x) {
      for (int c = 0; c < 3; ++c) image.pixels[(y * 112 + x) * 3 + c] = x < 56 ? 0 : 255;
    }
  }
  const auto o = opts(56, 1, 6);
  PixelNorm norm;
  norm.mean = {0.5f, 0.25f, 0.0f};
  norm.std = {0.5f, 0.25f, 1.0f};
  std::vector<float> out(3 * 3 * 56 * 56, -1e9f);
  REQUIRE(tile_pixels(image, o, norm, out.data()) == 3);
  auto at = [&](int tile, int c, int y, int x) { return out[((tile * 3 + c) * 56 + y) * 56 + x]; };
  for (int c = 0; c < 3; ++c) {
    const float black = (0.0f - norm.mean[c]) / norm.std[c];
    const float white = (1.0f - norm.mean[c]) / norm.std[c];
    CHECK(at(0, c, 0, 0) == Approx(black));
    CHECK(at(0, c, 55, 55) == Approx(black));
    CHECK(at(1, c, 0, 0) == Approx(white));
    CHECK(at(1, c, 30, 55) == Approx(white));
    CHECK(at(2, c, 10, 0) == Approx(black).margin(1e-2));
    CHECK(at(2, c, 10, 55) == Approx(white).margin(1e-2));
  }
  std::vector<float> dummy(3 * 56 * 56);
  dummy_tile_pixels(o, norm, dummy.data());
  CHECK(dummy[0] == Approx(1.0f));                 // (1 - 0.5) / 0.5
  CHECK(dummy[56 * 56] == Approx(3.0f));           // (1 - 0.25) / 0.25
  CHECK(dummy[2 * 56 * 56 + 99] == Approx(1.0f));  // (1 - 0) / 1
}
