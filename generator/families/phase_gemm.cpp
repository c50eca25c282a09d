// phase_gemm.cpp: the per-stride-phase GEMM layout shared by gemm_wgmma and gemm_simt.
#include "generator/families/phase_gemm.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "base/math.h"
#include "generator/family.h"
#include "generator/phases.h"
#include "generator/preamble.h"

namespace convt3d::gen {

PhaseGemm PhaseGemmOf(const Problem& p, int bm, int bn, int ck) {
  PhaseGemm s;
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;
  s.cp = CeilDiv(cin_g, ck) * ck;
  s.ntiles = CeilDiv(cout_g, bn);
  const Dim3 out = p.OutSize();
  DimPhases ph[3];
  for (int i = 0; i < 3; ++i)
    ph[i] = PhasesOf(p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], out[i]);
  for (const auto& a : ph[0].phases)
    for (const auto& b : ph[1].phases)
      for (const auto& w : ph[2].phases) {
        PhaseWork pw;
        pw.rd = a.r, pw.rh = b.r, pw.rw = w.r;
        pw.taps = a.taps * b.taps * w.taps;
        pw.rows = p.n * a.q_count * b.q_count * w.q_count;
        s.work.push_back(pw);
      }
  std::stable_sort(s.work.begin(), s.work.end(),
                   [](const PhaseWork& x, const PhaseWork& y) { return x.taps > y.taps; });
  for (int i = 0; i < 3; ++i) s.qmax[i] = ph[i].max_q_count;
  s.mtiles = CeilDiv(p.n * s.qmax[0] * s.qmax[1] * s.qmax[2], bm);
  s.total_tiles = static_cast<int64_t>(s.work.size()) * s.mtiles * s.ntiles * p.groups;
  const int64_t chunks = s.cp / ck;
  for (PhaseWork& pw : s.work) {
    pw.wstage0 = s.stages_all;
    s.stages_all += pw.taps * chunks;
  }
  // Tap kk of a dimension lies in phase r = kk*d mod s, as its j-th tap.
  auto phase_of = [](const DimPhases& dp, int kk, int& r, int& j) {
    for (const DimPhase& f : dp.phases)
      if (f.taps > 0 && kk >= f.kk0 && (kk - f.kk0) % dp.s_red == 0 &&
          (kk - f.kk0) / dp.s_red < f.taps) {
        r = f.r, j = (kk - f.kk0) / dp.s_red;
        return true;
      }
    return false;
  };
  for (int kd = 0; kd < p.kernel[0]; ++kd)
    for (int kh = 0; kh < p.kernel[1]; ++kh)
      for (int kw = 0; kw < p.kernel[2]; ++kw) {
        int rd, rh, rw, jd, jh, jw, slot = -1, index = 0;
        if (phase_of(ph[0], kd, rd, jd) && phase_of(ph[1], kh, rh, jh) &&
            phase_of(ph[2], kw, rw, jw))
          for (size_t i = 0; i < s.work.size(); ++i)
            if (s.work[i].rd == rd && s.work[i].rh == rh && s.work[i].rw == rw) {
              slot = static_cast<int>(i);
              index = (jd * ph[1].phases[rh].taps + jh) * ph[2].phases[rw].taps + jw;
            }
        s.tap_slot.push_back(slot);
        s.tap_index.push_back(index);
      }
  return s;
}

void UseBoxTiles(const Problem& p, int bm, PhaseGemm& s) {
  const int64_t qw = s.qmax[2], qh = s.qmax[1], qd = s.qmax[0];
  int64_t best[4] = {1, 1, 1, 1}, best_tiles = INT64_MAX;
  // Fewest tiles; among equals, the widest W extent (longer runs of each channel row).
  for (int64_t bw = std::min<int64_t>(qw, bm); bw >= 1; --bw)
    for (int64_t bh = std::min<int64_t>(qh, bm / bw); bh >= 1; --bh)
      for (int64_t bd = std::min<int64_t>(qd, bm / (bw * bh)); bd >= 1; --bd) {
        const int64_t bs = p.groups > 1 ? 1 : std::min<int64_t>(p.n, bm / (bw * bh * bd));
        const int64_t tiles =
            CeilDiv(qw, bw) * CeilDiv(qh, bh) * CeilDiv(qd, bd) * CeilDiv(p.n, bs);
        if (tiles < best_tiles) {
          best_tiles = tiles;
          best[0] = bw, best[1] = bh, best[2] = bd, best[3] = bs;
        }
      }
  std::copy(best, best + 4, s.box);
  s.mtiles = best_tiles;
  s.total_tiles = static_cast<int64_t>(s.work.size()) * s.mtiles * s.ntiles * p.groups;
}

void UseHaloBoxTiles(const Problem& p, int rows_h, int planes, PhaseGemm& s) {
  s.box[0] = 8, s.box[1] = rows_h, s.box[2] = planes, s.box[3] = 1;
  s.mtiles = CeilDiv(s.qmax[2], 8) * CeilDiv(s.qmax[1], rows_h) * CeilDiv(s.qmax[0], planes) * p.n;
  s.total_tiles = static_cast<int64_t>(s.work.size()) * s.mtiles * s.ntiles * p.groups;
  // Tap j of a phase reads input q + c - j*d': the box grows by (taps - 1) * d' below.
  for (int i = 0; i < 3; ++i) {
    const DimPhases ph =
        PhasesOf(p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], p.OutSize()[i]);
    s.halo[2 - i] = s.box[2 - i] + int64_t{std::max(ph.max_taps, 1) - 1} * ph.d_red;
  }
}

bool PhaseGemmFits(const Problem& p) {
  if (p.stride[0] * p.stride[1] * p.stride[2] > 64) return false;
  for (int i = 0; i < 3; ++i)
    if (PhasesOf(p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], p.OutSize()[i]).max_taps >
        10)
      return false;
  return true;
}

double PhaseGemmWaste(const Problem& p, const PhaseGemm& s, int bm, int bn, int64_t items,
                      int64_t slots) {
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;
  int64_t rows = 0;
  for (const PhaseWork& pw : s.work) rows += pw.rows;
  const int64_t covered = static_cast<int64_t>(s.work.size()) * s.mtiles * bm;
  const double waste_m = covered ? 1.0 - static_cast<double>(rows) / covered : 1.0;
  const double waste_n = 1.0 - static_cast<double>(cout_g) / (s.ntiles * bn);
  const double waste_k = 1.0 - static_cast<double>(cin_g) / s.cp;
  const double fill = static_cast<double>(items) / (CeilDiv(items, slots) * slots);
  return waste_m + waste_n + waste_k + (1.0 - fill);
}

void PhaseGemmConstants(const PhaseGemm& s, int bm, int bn, int ck, bool phase_inner,
                        std::ostream& os) {
  DefInt(os, "kPhaseInner", phase_inner ? 1 : 0);
  DefInt(os, "kScaleParts", kScaleParts);
  DefInt(os, "kAmaxThreads", kAmaxThreads);
  DefInt(os, "kBM", bm);
  DefInt(os, "kBN", bn);
  DefInt(os, "kKC", ck);
  DefInt(os, "kCP", s.cp);
  DefLong(os, "kNTiles", s.ntiles);
  DefInt(os, "kPhases", static_cast<int64_t>(s.work.size()));
  DefLong(os, "kMTiles", s.mtiles);
  DefLong(os, "kTotalTiles", s.total_tiles);
  for (int i = 0; i < 4; ++i) DefLong(os, std::string("kBox") + "WHDN"[i], s.box[i]);
  for (int i = 0; i < 3; ++i) DefLong(os, std::string("kHalo") + "WHD"[i], s.halo[i]);
  DefLong(os, "kStagesAll", s.stages_all);
  for (int i = 0; i < 3; ++i) DefLong(os, DimName("kQ", i), s.qmax[i]);
}

void PhaseWorkTable(const PhaseGemm& s, std::ostream& os) {
  os << "struct PhaseWork { int rd, rh, rw, taps; long long wstage0; };\n";
  os << "__constant__ PhaseWork kWork[" << s.work.size() << "] = {";
  for (const PhaseWork& w : s.work)
    os << "{" << w.rd << ", " << w.rh << ", " << w.rw << ", " << w.taps << ", " << w.wstage0
       << "LL}, ";
  os << "};\n";
}

void TapSlotTables(const PhaseGemm& s, std::ostream& os) {
  auto table = [&](const char* name, const std::vector<int>& v) {
    os << "__constant__ int " << name << "[" << v.size() << "] = {";
    for (int x : v) os << x << ", ";
    os << "};\n";
  };
  table("kTapSlot", s.tap_slot);
  table("kTapIndex", s.tap_index);
}

int64_t RelaidInputOffset(int64_t w_bytes) { return CeilDiv(w_bytes, 256) * 256; }

LaunchPlan PhaseGemmLaunches(const std::string& name, int64_t w_bytes, int64_t x_bytes, int eb,
                             int64_t tiles, int threads, int smem_bytes, int blocks_per_sm,
                             int64_t prep_items) {
  LaunchPlan plan;
  const int64_t x_offset = RelaidInputOffset(w_bytes);
  plan.workspace_bytes = static_cast<size_t>(x_offset + x_bytes);
  plan.x_offset_bytes = static_cast<size_t>(x_offset);
  // The input transpose: one block per tile of 64 positions x up to 32 channels, grid-stride.
  plan.steps.push_back(Step(name + "_prepx", std::min<int64_t>(x_bytes / (64 * 32 * eb) + 1, 8192),
                            256, 0, {Arg::kX, Arg::kXRelaid}));
  plan.steps.push_back(WeightPrep(name + "_prep", prep_items > 0 ? prep_items : w_bytes / 4, 2048));
  LaunchStep main =
      Step(name, tiles, threads, smem_bytes, {Arg::kXRelaid, Arg::kWorkspace, Arg::kBias, Arg::kY});
  main.blocks_per_sm = blocks_per_sm;
  plan.steps.push_back(main);
  return plan;
}

TiledMapShape RelaidInputMap(const Problem& p, const PhaseGemm& s, int ck, int eb, int parts) {
  TiledMapShape m;
  m.rank = 5;
  m.elem_bytes = eb;
  const uint64_t dims[5] = {static_cast<uint64_t>(s.cp), static_cast<uint64_t>(p.in[2]),
                            static_cast<uint64_t>(p.in[1]), static_cast<uint64_t>(p.in[0]),
                            static_cast<uint64_t>(p.n * p.groups * parts)};
  std::copy(dims, dims + 5, m.dims);
  uint64_t stride = static_cast<uint64_t>(eb);
  for (int i = 0; i < 4; ++i) m.strides_bytes[i] = stride *= dims[i];
  const uint32_t box[5] = {static_cast<uint32_t>(ck), static_cast<uint32_t>(s.box[0]),
                           static_cast<uint32_t>(s.box[1]), static_cast<uint32_t>(s.box[2]),
                           static_cast<uint32_t>(s.box[3])};
  std::copy(box, box + 5, m.box);
  m.swizzle_bytes = ck * eb;
  return m;
}

TiledMapShape HaloInputMap(const Problem& p, const PhaseGemm& s, int ck, int eb) {
  TiledMapShape m = RelaidInputMap(p, s, ck, eb, 1);
  const uint32_t box[5] = {static_cast<uint32_t>(ck), static_cast<uint32_t>(s.halo[0]),
                           static_cast<uint32_t>(s.halo[1]), static_cast<uint32_t>(s.halo[2]), 1};
  std::copy(box, box + 5, m.box);
  return m;
}

}  // namespace convt3d::gen
