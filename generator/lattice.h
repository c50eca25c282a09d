// lattice.h: problems whose taps all land on one output sub-lattice (stride == dilation).
#pragma once

#include <ostream>

#include "convt3d/convt3d.h"

namespace convt3d::gen {

// With stride s equal to dilation in a dimension, output o = s*(i + k) - p: every tap of every
// input reaches the outputs o = s*q + r (r = -p mod s) and no other output gets any product. The
// problem is then a stride-1, dilation-1 transposed convolution (`sub`, padding (p + r) / s)
// whose output is every s-th element of the real output from offset r, plus bias (or zero)
// everywhere else. Any stride-1 kernel serves it once its output index carries the lattice's
// step and offset (kL*, kO* in the preamble, Fill* below); L1-77 (s = d = 2) has 7 of its 8
// output phases empty this way.
struct Lattice {
  bool applies = false;
  Problem sub;                    // the stride-1 problem on the lattice
  int64_t step[3] = {1, 1, 1};    // s per dimension
  int64_t offset[3] = {0, 0, 0};  // r per dimension
};
// applies: stride == dilation in every dimension and > 1 in at least one, and the lattice's
// extent is exactly the sub-problem's natural output (it always is unless output_padding
// reaches past the last lattice row; such problems are served by the other families).
Lattice LatticeOf(const Problem& p);

// Preamble constants that place a kernel's output in y: the full output's extents kYDout
// kYHout kYWout, and per dimension the lattice step kL* and offset kO* (1 and 0 for every
// non-lattice kernel, so its index arithmetic folds to the plain one).
void OutputMapPreamble(const Problem& full, const Lattice* l, std::ostream& os);

}  // namespace convt3d::gen
