// generator_test_util.h: what the generator's test files share: a plan as the tests read it, the
// symbols a candidate's module defines, brute-force phase pairs and the level-1 problems.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/family.h"

namespace convt3d::gen {

// The plan of candidate c as the tests read it: the main kernel's launch, the workspace, the
// input re-layout's offset and size, the lattice fill's grid, the fft chunks and the symbols.
struct PlanView {
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned smem_bytes = 0;
  size_t workspace_bytes = 0, x_offset_bytes = 0, x_bytes = 0;
  unsigned fill_grid[3] = {0, 0, 0};
  int chunks = 0;
  std::set<std::string> symbols;
};
inline PlanView Geometry(const Problem& p, const Config& c) {
  const LaunchPlan plan = Launches(p, c);
  PlanView v;
  v.workspace_bytes = plan.workspace_bytes;
  v.x_offset_bytes = plan.x_offset_bytes;
  bool main_seen = false;
  for (const LaunchStep& s : plan.steps) {
    v.symbols.insert(s.symbol);
    if (s.symbol == c.Name() && !main_seen) {
      main_seen = true;
      std::copy(s.grid, s.grid + 3, v.grid);
      std::copy(s.block, s.block + 3, v.block);
      v.smem_bytes = s.smem_bytes;
    }
    if (s.symbol == c.Name() + "_fill") std::copy(s.grid, s.grid + 3, v.fill_grid);
    if (s.symbol == c.Name() + "_post") ++v.chunks;
  }
  if (v.symbols.count(c.Name() + "_prepx") && !v.symbols.count(c.Name() + "_post"))
    v.x_bytes = v.workspace_bytes - v.x_offset_bytes;
  return v;
}
inline std::string PrepSymbol(const Config& c) {
  return FamilyOf(c).Kernels(c.Plain()).prep ? c.Name() + "_prep" : "";
}
inline std::string PrepXSymbol(const Config& c) {
  return FamilyOf(c).Kernels(c.Plain()).prepx ? c.Name() + "_prepx" : "";
}
inline std::string FillSymbol(const Config& c) { return c.lattice == 1 ? c.Name() + "_fill" : ""; }
inline bool LatticeFamily(const Config& c, int kind) {
  return kind == 1 ? FamilyOf(c).SubLatticeQuota(c, nullptr) > 0 : FamilyOf(c).RunsPhaseChannels();
}

// Brute force: the (input index, tap) pairs that land on output o in one dimension.
inline std::set<std::pair<int64_t, int64_t>> Pairs(int64_t in, int64_t k, int64_t s, int64_t p,
                                                   int64_t d, int64_t o) {
  std::set<std::pair<int64_t, int64_t>> r;
  for (int64_t i = 0; i < in; ++i)
    for (int64_t kk = 0; kk < k; ++kk)
      if (i * s + kk * d == o + p) r.insert({i, kk});
  return r;
}

inline Problem L1_72() {
  Problem p;
  p.n = 8;
  p.c_in = 32;
  p.c_out = 32;
  p.in = {12, 24, 48};
  p.kernel = {3, 5, 7};
  p.stride = {2, 2, 2};
  p.padding = {1, 2, 3};
  p.output_padding = {1, 1, 1};
  p.groups = 4;
  return p;
}

inline Problem L1_68() {  // kernelbench_l1.json's L1-68: 16 x 32 x 64^3, 64 out, kernel 3x5x5
  Problem p;
  p.n = 16;
  p.c_in = 32;
  p.c_out = 64;
  p.in = {64, 64, 64};
  p.kernel = {3, 5, 5};
  return p;
}

inline Problem L1_61() {  // kernelbench_l1.json's L1-61: 8 x 48 x 64^3, 48 out, kernel 3
  Problem p;
  p.n = 8, p.c_in = 48, p.c_out = 48, p.in = {64, 64, 64}, p.kernel = {3, 3, 3};
  return p;
}

inline Problem Strided(int64_t n, int64_t cin, int64_t cout, Dim3 in, int64_t k, int64_t s,
                       int64_t pad, int64_t d) {
  Problem p;
  p.n = n, p.c_in = cin, p.c_out = cout, p.in = in;
  p.kernel = {k, k, k}, p.stride = {s, s, s}, p.padding = {pad, pad, pad};
  p.dilation = {d, d, d};
  return p;
}
inline Problem L1_77() { return Strided(16, 32, 64, {16, 32, 32}, 3, 2, 1, 2); }
inline Problem L1_73() { return Strided(4, 32, 32, {32, 64, 128}, 3, 2, 1, 1); }

}  // namespace convt3d::gen
