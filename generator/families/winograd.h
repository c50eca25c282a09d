// winograd.h: the winograd family's transforms, candidates and preamble (generator-internal).
#pragma once

#include <ostream>
#include <vector>

#include "generator/candidates.h"

namespace convt3d::gen {

// F(2, k) for one dimension (k = 1, 2 or 3 taps, alpha = k + 1 points; k = 1 is the identity on
// two points): y = AT [(G g) . (BT d)] is the correlation y_i = sum_j d_{i+j} g_j of alpha inputs
// d with the k taps g. Points 0, 1, -1 and infinity (Lavin & Gray's F(2,3)), exact in f32
// except G's halves, which are applied to the weights in f64.
struct WinoTransform {
  int alpha = 2, taps = 1;
  std::vector<std::vector<double>> bt, g, at;  // alpha x alpha, alpha x taps, 2 x alpha
};
WinoTransform WinoTransformOf(int taps);

// Derived sizes of a winograd candidate (templates/winograd.cu): F(2, k) per dimension with
// alpha = k + 1 transform points (k <= 3), p points in all; the block's raw input region, its
// shared-memory stage (raw input, transformed input, transformed
// weights; strides padded for conflict-free vector loads) and the epilogue's point sums, which
// reuse the stage's memory.
struct WinoShape {
  bool fits = false;  // false: the family does not apply, or the candidate is inconsistent
  int alpha[3] = {1, 1, 1}, points = 0, tiles_per_block = 0, threads = 0;
  int region[3] = {0, 0, 0}, region_ws = 0;  // raw input extents, W row stride
  int vs = 0, us = 0, ms = 0;                // per-point strides of V, U and the epilogue sums
  int cpad = 0;                              // input channels rounded up to whole stages
  int sum_stages = 0;  // stages per run of the point sums, each run summed apart (0: plain sums)
  int smem_bytes = 0;
  int64_t tiles[3] = {1, 1, 1}, blocks_per_dim[3] = {1, 1, 1}, co_blocks = 1, blocks = 1;
  int64_t phases = 1;           // stride phases (product of the strides), each with kJ taps
  int64_t workspace_words = 0;  // transformed weights, [phase][g][co block][cpad][point][bn]
};
WinoShape WinoShapeOf(const Problem& p, const Config& c);
// Whether the winograd family applies to p at all (f32, dilation 1, every kernel a multiple of its
// stride with at most 3 taps per phase and dimension and at least 8 per phase, and the
// strict-grade contracts: its points 0, +-1 and infinity keep the f32 error at a direct sum's
// level, ~3e-7 against f64 in simulation; strided problems in strict fp32 only).
bool WinogradApplies(const Problem& p);

// winograd candidates for p (empty where the family does not apply), best-ranked first.
std::vector<Config> WinogradCandidates(const Problem& p, const DeviceLimits& limits);
// The family's preamble for candidate c (NotApplicable where it does not fit p): its constants
// and the transforms as straight-line functions.
Status WinogradPreamble(const Problem& p, const Config& c, std::ostream& os);

}  // namespace convt3d::gen
