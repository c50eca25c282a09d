// phases.h: stride-phase decomposition of one spatial dimension of a transposed convolution.
//
// Output o receives tap kk from input i iff i*s + kk*d == o + p. Grouping outputs by the phase
// r = (o + p) mod s turns each phase into a stride-1 correlation on q = (o + p - r) / s:
//   taps kk = kk0 + j*s', j in [0, taps), read input i = q + c - j*d'
// with g = gcd(s, d), s' = s/g, d' = d/g. Phases with r mod g != 0 have no taps (bias only).
// See shared/design/algorithms.md section 1.2.
#pragma once

#include <cstdint>
#include <vector>

namespace convt3d::gen {

struct DimPhase {
  int r = 0;         // phase: (o + p) mod s
  int kk0 = 0;       // first tap
  int taps = 0;      // number of taps (0: the phase is empty)
  int64_t c = 0;     // input offset: i = q + c - j*d'
  int64_t q_lo = 0;  // first q whose output o = r - p + s*q is inside [0, out)
  int64_t q_count = 0;
};

struct DimPhases {
  int s = 1, s_red = 1, d_red = 1;  // stride, s' and d'
  int max_taps = 0;
  int64_t max_q_count = 0;
  std::vector<DimPhase> phases;  // indexed by r, size s
};

DimPhases PhasesOf(int64_t k, int64_t s, int64_t p, int64_t d, int64_t out);

}  // namespace convt3d::gen
