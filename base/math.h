// math.h: integer division that rounds toward minus or plus infinity, for any signs.
#pragma once

#include <cstdint>

namespace convt3d {

constexpr int64_t FloorDiv(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}
constexpr int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

}  // namespace convt3d
