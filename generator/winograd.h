// winograd.h: the winograd family's transforms, candidates and preamble (generator-internal).
#pragma once

#include <sstream>
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

// winograd candidates for p (empty where the family does not apply), best-ranked first.
std::vector<Config> WinogradCandidates(const Problem& p, const DeviceLimits& limits);
// The family's preamble for candidate c of shape s = WinoShapeOf(p, c) (s.fits): its constants
// and the transforms as straight-line functions.
void WinogradPreamble(const Problem& p, const Config& c, const WinoShape& s,
                      std::ostringstream& os);

}  // namespace convt3d::gen
