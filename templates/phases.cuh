// phases.cuh: the stride-phase table entry shared by every kernel family.
//
// Per dimension, phase r (= (o + p) mod s) has taps kk = kk0 + j*s' (j < taps) reading input
// i = q + c - j*d', for q in [q_lo, q_lo + q_count) (generator/phases.h). The preamble's
// CONVT3D_PHASE_TABLES defines kPhD[kSD], kPhH[kSH], kPhW[kSW] of this type.
struct Phase {
  int kk0, taps, c;
  long long q_lo, q_count;
};
CONVT3D_PHASE_TABLES
