// preamble.h: how the generator writes a compile-time constant into a kernel's preamble.
#pragma once

#include <cstdint>
#include <ostream>

namespace convt3d::gen {

// "constexpr int kName = v;": shape constants that fit an int.
inline void DefInt(std::ostream& os, const char* name, int64_t v) {
  os << "constexpr int " << name << " = " << v << ";\n";
}
// "constexpr long long kName = vLL;": block and tile counts, offsets.
inline void DefLong(std::ostream& os, const char* name, int64_t v) {
  os << "constexpr long long " << name << " = " << v << "LL;\n";
}

}  // namespace convt3d::gen
