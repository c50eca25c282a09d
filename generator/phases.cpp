// phases.cpp: computes the per-dimension phase tables described in phases.h.
#include "generator/phases.h"

#include <algorithm>
#include <numeric>

#include "base/math.h"

namespace convt3d::gen {

DimPhases PhasesOf(int64_t /*in*/, int64_t k, int64_t s, int64_t p, int64_t d, int64_t out) {
  DimPhases dp;
  const int64_t g = std::gcd(s, d);
  dp.s = static_cast<int>(s);
  dp.s_red = static_cast<int>(s / g);
  dp.d_red = static_cast<int>(d / g);
  for (int64_t r = 0; r < s; ++r) {
    DimPhase ph;
    ph.r = static_cast<int>(r);
    ph.q_lo = std::max<int64_t>(0, CeilDiv(p - r, s));
    ph.q_count = std::max<int64_t>(0, FloorDiv(out - 1 + p - r, s) - ph.q_lo + 1);
    if (r % g == 0) {
      // kk0 is the unique kk in [0, s') with kk*d == r (mod s).
      for (int64_t kk = 0; kk < dp.s_red; ++kk) {
        if ((kk * d) % s == r) {
          ph.kk0 = static_cast<int>(kk);
          break;
        }
      }
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
