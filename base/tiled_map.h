// tiled_map.h: the shape of a TMA tiled tensor map (what the generator asks for, what the runtime
// encodes with cuTensorMapEncodeTiled).
#pragma once

#include <cstdint>

namespace convt3d {

// A tensor of `rank` (1-5) dimensions of unsigned integers of `elem_bytes` (2 or 4), innermost
// first, read in boxes of `box` elements per dimension into shared memory swizzled with a span
// of `swizzle_bytes` (32, 64 or 128; the box's innermost extent is that many bytes), or unswizzled
// (0: the box lands as it lies, innermost first). Elements outside the tensor read as zeros.
struct TiledMapShape {
  int rank = 0;  // 0: no map
  int elem_bytes = 4;
  uint64_t dims[5] = {1, 1, 1, 1, 1};
  uint64_t strides_bytes[4] = {0, 0, 0, 0};  // of dimensions 1 .. rank-1
  uint32_t box[5] = {1, 1, 1, 1, 1};
  int swizzle_bytes = 128;
};

}  // namespace convt3d
