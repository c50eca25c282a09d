// preamble.h: how the generator writes a compile-time constant into a kernel's preamble.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace convt3d::gen {

// "constexpr int kName = v;": shape constants that fit an int.
inline void DefInt(std::ostream& os, std::string_view name, int64_t v) {
  os << "constexpr int " << name << " = " << v << ";\n";
}
// "constexpr long long kName = vLL;": block and tile counts, offsets.
inline void DefLong(std::ostream& os, std::string_view name, int64_t v) {
  os << "constexpr long long " << name << " = " << v << "LL;\n";
}
// The name of dimension i's constant (0, 1, 2: D, H, W): DimName("kQ", 1, "Tiles") is
// "kQHTiles".
inline std::string DimName(std::string_view prefix, int i, std::string_view suffix = "") {
  return std::string(prefix) + "DHW"[i] + std::string(suffix);
}

}  // namespace convt3d::gen
