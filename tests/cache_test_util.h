// cache_test_util.h: the keys, winners and raw file bytes the cache's test files share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cache/cache.h"

namespace convt3d::cache {

inline Key MakeKey(const std::string& problem =
                       "f32_n1_ci4_co4_i8x8x8_k3x3x3_s2x2x2_p1x1x1_op0x0x0_d1x1x1_g1_b0") {
  Key k;
  k.problem = problem;
  k.arch = "sm_90";
  k.gpu_name = "NVIDIA H200";
  k.driver_version = 13000;
  k.nvrtc_version = 13000;
  k.code_hash = "0123456789abcdef";
  return k;
}

// Bytes that include NULs and high bits, so text/blob confusions show up.
inline std::vector<char> MakeCubin(int seed, size_t size = 3000) {
  std::vector<char> c(size);
  uint32_t x = 2463534242u + seed;
  for (char& b : c) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    b = static_cast<char>(x);
  }
  if (size > 1) c[1] = 0;
  return c;
}

inline Winner MakeWinner(int seed, size_t cubin_size = 3000) {
  Winner w;
  w.candidate = "direct_phase_f32_x64y2_o2_c" + std::to_string(seed);
  w.params_json = R"({"tile":[64,2],"seed":)" + std::to_string(seed) + "}";
  w.kernel_symbol = "convt3d_kernel_" + std::to_string(seed);
  w.cubin = MakeCubin(seed, cubin_size);
  w.median_ms = 0.125 + seed;
  w.rel_err = 1e-7;
  return w;
}

inline std::vector<char> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

inline void WriteBytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace convt3d::cache
