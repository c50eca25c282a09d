// pixel_shuffle.h: which layers are pixel shuffles (every output has exactly one tap), the
// shape the shuffle families (shuffle_wgmma, shuffle_simt) run as one GEMM per group.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/math.h"
#include "generator/candidates.h"

namespace convt3d::gen {

// Per dimension kernel == stride, or an input of extent 1 (whose outputs are the taps: a latent
// vector's first layer), with no padding or output_padding and dilation 1 where the kernel is
// longer than 1; at least two taps in all.
inline bool IsPixelShuffle(const Problem& p) {
  for (int i = 0; i < 3; ++i) {
    if ((p.kernel[i] != p.stride[i] && p.in[i] != 1) || p.padding[i] != 0 ||
        p.output_padding[i] != 0)
      return false;
    if (p.kernel[i] > 1 && p.dilation[i] != 1) return false;
  }
  return p.kernel[0] * p.kernel[1] * p.kernel[2] > 1;
}

// The share of a shuffle tiling's score both families use (lower is better): the column padding
// of `slices` slices of `slice_cols` over `ncols` columns, the row padding of row tiles of
// `tile_rows` over `rows` rows per sample, the input reread once per slice past the first (as
// a share of the layer's traffic, weighted by `reread_weight`), and the idle share of the last
// wave of `units` over `slots`.
inline double ShuffleTilingWaste(const Problem& p, int64_t ncols, int64_t slices,
                                 int64_t slice_cols, int64_t rows, int64_t tile_rows, int64_t units,
                                 int64_t slots, double reread_weight = 2.0) {
  const double waste_n = 1.0 - static_cast<double>(ncols) / (slices * slice_cols);
  const double waste_m = 1.0 - static_cast<double>(rows) / (CeilDiv(rows, tile_rows) * tile_rows);
  const double fill = static_cast<double>(units) / (CeilDiv(units, slots) * slots);
  const double reread = static_cast<double>(slices - 1) * p.InputElements() /
                        (p.InputElements() + p.OutputElements() + p.WeightElements());
  return waste_n + waste_m + reread_weight * reread + (1.0 - fill);
}

// Whether each of `slices` column slices may read the input again: the rereads past the first
// slice add at most the layer's own traffic.
inline bool SliceRereadsWithinTraffic(const Problem& p, int64_t slices) {
  return (slices - 1) * p.InputElements() <=
         p.InputElements() + p.OutputElements() + p.WeightElements();
}

// The `most` lowest-scored candidates, ties in the order given.
inline std::vector<Config> LowestScored(std::vector<std::pair<double, Config>> scored,
                                        size_t most) {
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Config> out;
  for (size_t i = 0; i < scored.size() && i < most; ++i) out.push_back(scored[i].second);
  return out;
}

}  // namespace convt3d::gen
