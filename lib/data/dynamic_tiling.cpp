#include "data/dynamic_tiling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace omnibal::data {

std::vector<TileGrid> candidate_grids(int min_tiles, int max_tiles) {
  std::vector<TileGrid> grids;
  for (int cols = 1; cols <= max_tiles; ++cols) {
    for (int rows = 1; rows <= max_tiles; ++rows) {
      const int n = cols * rows;
      if (n >= min_tiles && n <= max_tiles) grids.push_back({cols, rows});
    }
  }
  std::stable_sort(grids.begin(), grids.end(), [](const TileGrid& a, const TileGrid& b) {
    return a.blocks() != b.blocks() ? a.blocks() < b.blocks() : a.cols < b.cols;
  });
  return grids;
}

TileGrid find_closest_grid(int width, int height, const TilingOptions& options) {
  OMNIBAL_CHECK(width > 0 && height > 0, "find_closest_grid: image size must be positive, got ",
                width, "x", height);
  // Same double arithmetic as InternVL's find_closest_aspect_ratio, so ties resolve alike.
  const double aspect = static_cast<double>(width) / static_cast<double>(height);
  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double tile_area = static_cast<double>(options.tile_size) * options.tile_size;
  double best_diff = std::numeric_limits<double>::infinity();
  TileGrid best{1, 1};
  for (const auto& g : candidate_grids(options.min_tiles, options.max_tiles)) {
    const double diff = std::abs(aspect - static_cast<double>(g.cols) / g.rows);
    if (diff < best_diff) {
      best_diff = diff;
      best = g;
    } else if (diff == best_diff && area > 0.5 * tile_area * g.cols * g.rows) {
      best = g;
    }
  }
  return best;
}

int tile_count(const TileGrid& grid, const TilingOptions& options) {
  return grid.blocks() + (options.thumbnail && grid.blocks() > 1 ? 1 : 0);
}

TilingOptions options_for_image(const TilingOptions& options, int num_images) {
  TilingOptions o = options;
  if (num_images > 1) o.max_tiles = options.max_tiles / num_images;
  return o;
}

namespace {

// Copies one tile x tile window of `image` at (x0, y0) into out as normalised CHW floats.
void copy_tile(const RgbImage& image, int x0, int y0, int tile, const PixelNorm& norm, float* out) {
  const size_t plane = static_cast<size_t>(tile) * tile;
  for (int y = 0; y < tile; ++y) {
    const uint8_t* row = image.pixels.data() + (static_cast<size_t>(y0 + y) * image.width + x0) * 3;
    for (int x = 0; x < tile; ++x) {
      for (int c = 0; c < 3; ++c) {
        out[c * plane + static_cast<size_t>(y) * tile + x] =
            (row[x * 3 + c] / 255.0f - norm.mean[c]) / norm.std[c];
      }
    }
  }
}

}  // namespace

int tile_pixels(const RgbImage& image, const TilingOptions& options, const PixelNorm& norm,
                float* out) {
  const TileGrid grid = find_closest_grid(image.width, image.height, options);
  const int tile = options.tile_size;
  const size_t tile_floats = static_cast<size_t>(3) * tile * tile;
  const RgbImage resized = resize_image(image, tile * grid.cols, tile * grid.rows);
  int n = 0;
  for (int i = 0; i < grid.blocks(); ++i, ++n) {  // row-major, as InternVL's crop boxes
    copy_tile(resized, (i % grid.cols) * tile, (i / grid.cols) * tile, tile, norm,
              out + n * tile_floats);
  }
  if (options.thumbnail && grid.blocks() > 1) {
    copy_tile(resize_image(image, tile, tile), 0, 0, tile, norm, out + n * tile_floats);
    ++n;
  }
  return n;
}

void dummy_tile_pixels(const TilingOptions& options, const PixelNorm& norm, float* out) {
  const size_t plane = static_cast<size_t>(options.tile_size) * options.tile_size;
  for (int c = 0; c < 3; ++c) {
    std::fill(out + c * plane, out + (c + 1) * plane, (1.0f - norm.mean[c]) / norm.std[c]);
  }
}

}  // namespace omnibal::data
