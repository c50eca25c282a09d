// phases.cpp: computes the per-dimension phase tables described in phases.h.
#include "generator/phases.h"

#include <algorithm>
#include <numeric>
#include <tuple>
#include <utility>

#include "base/math.h"

namespace convt3d::gen {
namespace {

// The inverse of a modulo m (gcd(a, m) == 1, m >= 1) in [0, m), by the extended Euclid.
int64_t InverseMod(int64_t a, int64_t m) {
  int64_t r0 = m, r1 = a % m, t0 = 0, t1 = 1;
  while (r1 != 0) {
    const int64_t q = r0 / r1;
    std::tie(r0, r1) = std::pair(r1, r0 - q * r1);
    std::tie(t0, t1) = std::pair(t1, t0 - q * t1);
  }
  return ((t0 % m) + m) % m;
}

}  // namespace

// O(s): one entry per phase, each in constant time.
DimPhases PhasesOf(int64_t k, int64_t s, int64_t p, int64_t d, int64_t out) {
  DimPhases dp;
  const int64_t g = std::gcd(s, d);
  dp.s = static_cast<int>(s);
  dp.s_red = static_cast<int>(s / g);
  dp.d_red = static_cast<int>(d / g);
  // kk*d == r (mod s) <=> kk*d' == r/g (mod s'), and d' is invertible mod s'.
  const int64_t d_inv = InverseMod(dp.d_red, dp.s_red);
  dp.phases.reserve(static_cast<size_t>(s));
  for (int64_t r = 0; r < s; ++r) {
    DimPhase ph;
    ph.r = static_cast<int>(r);
    ph.q_lo = std::max<int64_t>(0, CeilDiv(p - r, s));
    ph.q_count = std::max<int64_t>(0, FloorDiv(out - 1 + p - r, s) - ph.q_lo + 1);
    if (r % g == 0) {
      // kk0 is the unique kk in [0, s') with kk*d == r (mod s).
      ph.kk0 = static_cast<int>((r / g) % dp.s_red * d_inv % dp.s_red);
      ph.taps = ph.kk0 < k ? static_cast<int>(CeilDiv(k - ph.kk0, dp.s_red)) : 0;
      ph.c = (r - ph.kk0 * d) / s;  // exact by construction
    }
    dp.max_taps = std::max(dp.max_taps, ph.taps);
    dp.max_q_count = std::max(dp.max_q_count, ph.q_count);
    dp.phases.push_back(ph);
  }
  return dp;
}

}  // namespace convt3d::gen
