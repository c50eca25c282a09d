// lattice.cpp: the stride == dilation sub-lattice of a problem (see lattice.h).
#include "generator/lattice.h"

namespace convt3d::gen {

Lattice LatticeOf(const Problem& p) {
  Lattice l;
  if (!Validate(p).ok()) return l;
  bool strided = false;
  l.sub = p;
  const Dim3 out = p.OutSize();
  for (int i = 0; i < 3; ++i) {
    const int64_t s = p.stride[i];
    if (p.dilation[i] != s) return l;
    strided = strided || s > 1;
    const int64_t r = ((-p.padding[i]) % s + s) % s, c = (p.padding[i] + r) / s;
    const int64_t q = out[i] > r ? (out[i] - r + s - 1) / s : 0;
    // Output q of the stride-1 problem: input q + c - k meets tap k, as o = s*q + r needs.
    if (q != p.in[i] - 2 * c + p.kernel[i] - 1) return l;
    l.step[i] = s, l.offset[i] = r;
    l.sub.stride[i] = 1, l.sub.dilation[i] = 1, l.sub.padding[i] = c;
    l.sub.output_padding[i] = 0;
  }
  l.applies = strided && Validate(l.sub).ok();
  return l;
}

void OutputMapPreamble(const Problem& full, const Lattice* l, std::ostream& os) {
  const Dim3 out = full.OutSize();
  const char* ax = "DHW";
  for (int i = 0; i < 3; ++i) {
    os << "constexpr int kY" << ax[i] << "out = " << out[i] << ";\n";
    os << "constexpr int kL" << ax[i] << " = " << (l ? l->step[i] : 1) << ";\n";
    os << "constexpr int kO" << ax[i] << " = " << (l ? l->offset[i] : 0) << ";\n";
  }
}

}  // namespace convt3d::gen
