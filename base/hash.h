// hash.h: FNV-1a, the one non-cryptographic hash of the project (cache keys, code hash, tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace convt3d {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;

// 64-bit FNV-1a of `size` bytes, continuing from `h` (chain calls to hash several parts).
inline uint64_t Fnv1a64(const void* data, size_t size, uint64_t h = kFnvOffset) {
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
inline uint64_t Fnv1a64(const std::string& s, uint64_t h = kFnvOffset) {
  return Fnv1a64(s.data(), s.size(), h);
}

// 16 lowercase hex digits.
inline std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace convt3d
