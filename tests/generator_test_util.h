// generator_test_util.h: what the generator's test files share: a plan as the tests read it, the
// symbols a candidate's module defines, brute-force phase pairs, random channels and the level-1
// problems.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/family.h"
#include "tests/test_util.h"

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
inline std::string PrepSymbol(const Problem& p, const Config& c) {
  return FamilyOf(c).Kernels(p, c.Plain()).prep ? c.Name() + "_prep" : "";
}
inline std::string PrepXSymbol(const Problem& p, const Config& c) {
  return FamilyOf(c).Kernels(p, c.Plain()).prepx ? c.Name() + "_prepx" : "";
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

// A random problem's batch and channels, drawn from `rng`: 1-2 groups of 1-3 input and 1-3
// output channels each, 1-2 samples, bias or not. The spatial fields keep their defaults.
inline Problem RandomChannels(std::mt19937& rng) {
  Problem p;
  p.groups = 1 + rng() % 2;
  p.c_in = p.groups * (1 + rng() % 3), p.c_out = p.groups * (1 + rng() % 3);
  p.n = 1 + rng() % 2;
  p.bias = rng() % 2;
  return p;
}

// kernelbench_l1.json's problems of those numbers.
inline Problem L1_72() {  // 8 x 32 x 12x24x48, 32 out, kernel 3x5x7, stride 2, 4 groups
  return test::MakeProblem(8, 32, 32, {12, 24, 48}, {3, 5, 7})
      .Stride({2, 2, 2})
      .Padding({1, 2, 3})
      .OutputPadding({1, 1, 1})
      .Groups(4);
}
inline Problem L1_68() {  // 16 x 32 x 64^3, 64 out, kernel 3x5x5
  return test::MakeProblem(16, 32, 64, {64, 64, 64}, {3, 5, 5});
}
inline Problem L1_61() {  // 8 x 48 x 64^3, 48 out, kernel 3
  return test::MakeProblem(8, 48, 48, {64, 64, 64}, {3, 3, 3});
}

// A problem with the same kernel, stride, padding and dilation in every dimension.
inline Problem Strided(int64_t n, int64_t cin, int64_t cout, Dim3 in, int64_t k, int64_t s,
                       int64_t pad, int64_t d) {
  return test::MakeProblem(n, cin, cout, in, {k, k, k})
      .Stride({s, s, s})
      .Padding({pad, pad, pad})
      .Dilation({d, d, d});
}
inline Problem L1_77() { return Strided(16, 32, 64, {16, 32, 32}, 3, 2, 1, 2); }
inline Problem L1_73() { return Strided(4, 32, 32, {32, 64, 128}, 3, 2, 1, 1); }
// The 3D-GAN's last layer (GAN-5 of problems/models.json): 32 x 64 x 32^3 -> 1 channel, kernel 4,
// stride 2, padding 1.
inline Problem Gan5() { return Strided(32, 64, 1, {32, 32, 32}, 4, 2, 1, 1); }
// MONAI UNet's last up layer (MUN-4): 4 x 32 x 48^3 -> 2 channels, kernel 3, stride 2, padding
// 1, output_padding 1, bias.
inline Problem Mun4() {
  return test::ProblemBuilder(Strided(4, 32, 2, {48, 48, 48}, 3, 2, 1, 1))
      .OutputPadding({1, 1, 1})
      .Bias();
}

}  // namespace convt3d::gen
