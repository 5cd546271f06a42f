// InternVL dynamic-resolution tiling (docs/paper.md): choose the tile grid whose aspect ratio is
// closest to the image's among all grids with min_tiles <= cols * rows <= max_tiles, resize the
// image to (tile * cols, tile * rows), cut it row-major into tiles, and append a thumbnail (the
// whole image resized to one tile) when there is more than one tile. Multi-image samples split
// the tile budget: each image gets max_tiles / num_images. The grid choice and tile counts are
// pure arithmetic on width and height, so the scan never decodes pixels; tile_pixels() does the
// decoding side and must produce exactly tile_count() tiles.
#pragma once

#include <array>
#include <vector>

#include "data/image_io.h"

namespace omnibal::data {

/// Tiling settings: preset tile size, `data.min_tiles` / `data.max_tiles`, thumbnail on.
struct TilingOptions {
  int tile_size = 448;    ///< pixels per tile side (ModelPreset vit.tile_size)
  int min_tiles = 1;      ///< smallest cols * rows considered
  int max_tiles = 6;      ///< largest cols * rows considered (per sample; split across images)
  bool thumbnail = true;  ///< append a whole-image tile when the grid has more than one tile
};

/// A grid of cols x rows tiles (cols along the width).
struct TileGrid {
  int cols = 1;
  int rows = 1;
  /// Tiles in the grid, cols * rows (without the thumbnail).
  int blocks() const { return cols * rows; }
  bool operator==(const TileGrid& o) const { return cols == o.cols && rows == o.rows; }
};

/// Candidate grids in InternVL's order: every (cols, rows) with min_tiles <= cols*rows <=
/// max_tiles, sorted by cols*rows, then by cols. InternVL leaves the order within one cols*rows
/// to a Python set; tests/data/dynamic_tiling_test.cpp checks that the secondary key never changes
/// a choice for max_tiles <= 12. Empty when max < min.
std::vector<TileGrid> candidate_grids(int min_tiles, int max_tiles);

/// The grid for a width x height image: the smallest |cols/rows - width/height| over the
/// candidates; on an exact tie a later (larger) grid replaces the current one when the image
/// area exceeds half of the grid's pixel area, 0.5 * tile^2 * cols * rows (InternVL's rule).
/// Returns 1x1 when there are no candidates (e.g. max_tiles / num_images == 0).
TileGrid find_closest_grid(int width, int height, const TilingOptions& options);

/// Tiles the ViT sees for a grid: blocks(), plus one thumbnail when blocks() > 1 and enabled.
int tile_count(const TileGrid& grid, const TilingOptions& options);

/// The options one image of a sample with `num_images` images is tiled with: max_tiles becomes
/// max_tiles / num_images (integer division, as InternVL), min_tiles is unchanged.
TilingOptions options_for_image(const TilingOptions& options, int num_images);

/// Per-channel pixel normalisation (x / 255 - mean) / std, from the model preset.
struct PixelNorm {
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
};

/// Tiles `image` into `out`, which must hold tile_count(find_closest_grid(...)) * 3 * tile^2
/// floats, laid out [tiles, 3, tile, tile] (CHW, normalised). Returns the number of tiles.
int tile_pixels(const RgbImage& image, const TilingOptions& options, const PixelNorm& norm,
                float* out);

/// Writes the dummy tile of a text-only sample (a white tile, normalised) into `out`
/// ([3, tile, tile] floats). InternVL feeds a white image and drops its features (image_flags 0).
void dummy_tile_pixels(const TilingOptions& options, const PixelNorm& norm, float* out);

}  // namespace omnibal::data
