// lattice.h: strided problems run as stride-1 sub-problems by other kernels' templates.
#pragma once

#include <ostream>

#include "convt3d/convt3d.h"

namespace convt3d::gen {

// Two ways to hand a strided problem to a stride-1 kernel (Config::lattice):
//
// kSubLattice (stride == dilation in every dimension): output o = s*(i + k) - p, so every tap of
// every input reaches the outputs o = s*q + r (r = -p mod s) and no other output gets any
// product. The problem is a stride-1, dilation-1 transposed convolution (`sub`, padding
// (p + r) / s) whose output is every s-th element of the real output from offset r, plus bias
// (or zero) everywhere else (a fill kernel). At s = d = 2 in every dimension 7 of the 8 stride
// phases get no product, and the sub-problem never visits them.
//
// kPhaseChannels (any stride, "sub-pixel convolution"): output o = s*q + r of phase r reads
// input q + delta for each tap kk with d*kk = r + p - s*delta, so the S = sD*sH*sW phases become
// S times the output channels of one stride-1 problem on the input grid: sub channel
// co*S + ((rd*sH + rh)*sW + rw), sub tap k' = delta_max - delta (kernel delta_max - delta_min
// + 1, padding delta_max), its weight the real tap that meets (zero where none does). Every
// output is computed; taps that fit no phase cost products on zeros (a 3x3x3 kernel at stride 2:
// 8 sub taps per phase for 27/8 real ones on average), which tensor cores can afford on
// write-bound shapes.
struct Lattice {
  enum Kind { kNone = 0, kSubLattice = 1, kPhaseChannels = 2 };
  Kind kind = kNone;
  Problem sub;  // the stride-1 problem
  // kSubLattice: the output lattice's step (s) and offset (r) per dimension.
  int64_t step[3] = {1, 1, 1}, offset[3] = {0, 0, 0};
  // kPhaseChannels: the phases (S) and, per dimension, delta_max (the sub padding).
  int64_t phases = 1;
  int64_t dmax[3] = {0, 0, 0};
  // kPhaseChannels: the real tap of dimension i that sub tap kk of phase r reads, or -1.
  int64_t RealTap(const Problem& p, int i, int64_t r, int64_t kk) const;
};
// The kSubLattice form of p, if p has one: stride == dilation everywhere and > 1 somewhere, and
// the lattice's extent is the sub-problem's natural output (it is unless output_padding reaches
// past the last lattice row, or the lattice is empty).
Lattice LatticeOf(const Problem& p);
// The kPhaseChannels form of p: any problem with a stride > 1 that has no kSubLattice form. The
// sub-problem may carry output_padding >= 1 at stride 1 (its extent must reach ceil(out / s)
// rows; the last ones may get no tap at all), which Validate would refuse from a user but the
// kernels compute as the plain sum it is. None where a dimension's RealTap table would exceed
// 4096 entries (stride x sub taps) or the phases take C_out past ProblemLimits::kChannels.
Lattice PhaseChannelsOf(const Problem& p);
// The form candidate kind `lattice` (Config::lattice: 1 or 2) of p refers to.
Lattice LatticeFor(const Problem& p, int lattice);

// Preamble for a kernel whose problem is l's sub-problem of `full` (l null: a plain kernel):
// the full output's extents kYDout kYHout kYWout, per dimension the lattice step kL* and offset
// kO* (1 and 0 unless kSubLattice), and two functions the tensor-core templates use:
// WeightIndex(g, ci, co, kd, kh, kw), the user's weight element behind a sub-problem weight
// (-1: zero; for ci < C_in/G the element of input channel ci is that of channel 0 plus ci x
// kWeightCiStep, or -1 for every ci), and OutputIndex(n, g, co, od, oh, ow, at, bias_co), where a sub-problem output
// lands in y (false: past y's end).
void OutputMapPreamble(const Problem& full, const Lattice* l, std::ostream& os);

}  // namespace convt3d::gen
