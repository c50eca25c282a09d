// lattice.cpp: the sub-lattice and phase-channel forms of strided problems (see lattice.h).
#include "generator/lattice.h"

#include <algorithm>
#include <cstdint>

#include "base/math.h"

namespace convt3d::gen {
namespace {

// The most entries of one dimension's RealTap table (phases x sub taps) in a kernel's source.
constexpr int64_t kMaxTapTable = 4096;

// OutputFits(room, phase): whether a column's phase (rd | rh << 10 | rw << 20: strides are at
// most 512) lies inside the row's room (how many phases lie inside y, at most 1023 counted) in
// every dimension.
void OutputFitsFunction(std::ostream& os) {
  os << "__device__ __forceinline__ bool OutputFits(int room, int phase) {\n"
        "  return (phase & 1023) < (room & 1023) && (phase >> 10 & 1023) < (room >> 10 & 1023) &&\n"
        "         (phase >> 20) < (room >> 20);\n}\n";
}

}  // namespace

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
  if (strided && Validate(l.sub).ok()) l.kind = Lattice::kSubLattice;
  return l;
}

int64_t Lattice::RealTap(const Problem& p, int i, int64_t r, int64_t kk) const {
  const int64_t num = r + p.padding[i] - p.stride[i] * (dmax[i] - kk);
  if (num % p.dilation[i] != 0) return -1;
  const int64_t k = num / p.dilation[i];
  return k >= 0 && k < p.kernel[i] ? k : -1;
}

Lattice PhaseChannelsOf(const Problem& p) {
  Lattice l;
  if (!Validate(p).ok() || p.stride[0] * p.stride[1] * p.stride[2] == 1) return l;
  if (LatticeOf(p).kind != Lattice::kNone) return l;
  l.sub = p;
  const Dim3 out = p.OutSize();
  for (int i = 0; i < 3; ++i) {
    const int64_t s = p.stride[i], d = p.dilation[i];
    // Tap k meets exactly one phase r (r == d*k - p mod s), at delta = (r + p - d*k) / s =
    // ceil((p - d*k) / s), which falls as k grows: the first and last taps bound delta.
    const int64_t hi = CeilDiv(p.padding[i], s);
    const int64_t lo = CeilDiv(p.padding[i] - d * (p.kernel[i] - 1), s);
    if (hi < 0) return l;  // a negative sub padding
    const int64_t kernel = hi - lo + 1, natural = p.in[i] - hi - lo;
    // The kernels hold RealTap as a table of s x kernel ints: keep it small.
    if (s * kernel > kMaxTapTable) return l;
    const int64_t need = (out[i] + s - 1) / s;
    l.dmax[i] = hi;
    l.sub.kernel[i] = kernel, l.sub.stride[i] = 1, l.sub.dilation[i] = 1, l.sub.padding[i] = hi;
    l.sub.output_padding[i] = std::max<int64_t>(0, need - natural);
    l.phases *= s;
  }
  // The phases multiply the channels: the sub-problem's must stay within Validate's limit.
  if (p.c_out * l.phases > ProblemLimits::kChannels) return Lattice();
  l.sub.c_out = p.c_out * l.phases;
  // Every other field Validate checks is p's or derived within range from p's.
  const Dim3 sub_out = l.sub.OutSize();
  if (sub_out[0] > 0 && sub_out[1] > 0 && sub_out[2] > 0) l.kind = Lattice::kPhaseChannels;
  return l;
}

Lattice LatticeFor(const Problem& p, int lattice) {
  return lattice == 1 ? LatticeOf(p) : lattice == 2 ? PhaseChannelsOf(p) : Lattice();
}

void OutputMapPreamble(const Problem& full, const Lattice* l, std::ostream& os) {
  const Dim3 out = full.OutSize();
  const bool sl = l && l->kind == Lattice::kSubLattice,
             pc = l && l->kind == Lattice::kPhaseChannels;
  const char* ax = "DHW";
  for (int i = 0; i < 3; ++i) {
    os << "constexpr int kY" << ax[i] << "out = " << out[i] << ";\n";
    os << "constexpr int kL" << ax[i] << " = " << (sl ? l->step[i] : 1) << ";\n";
    os << "constexpr int kO" << ax[i] << " = " << (sl ? l->offset[i] : 0) << ";\n";
  }
  if (!pc) {
    os << "__device__ __forceinline__ long long WeightIndex(int g, int ci, int co, int kd, int "
          "kh,\n"
          "                                                 int kw) {\n"
          "  if (ci >= kCinG || co >= kCoutG) return -1;\n"
          "  return ((long long)(g * kCinG + ci) * kCoutG + co) * (kKD * kKH * kKW) +\n"
          "         (kd * kKH + kh) * kKW + kw;\n}\n";
    os << "constexpr long long kWeightCiStep = (long long)kCoutG * (kKD * kKH * kKW);\n";
    os << "constexpr long long kWeightElems = (long long)kCin * kWeightCiStep;  // the user's\n";
    os << "__device__ __forceinline__ bool OutputIndex(int n, int g, int co, long long od,\n"
          "                                            long long oh, long long ow, idx_t& at,\n"
          "                                            int& bias_co) {\n"
          "  bias_co = g * kCoutG + co;\n"
          "  at = ((((idx_t)n * kCout + bias_co) * kYDout + (kLD * od + kOD)) * kYHout +\n"
          "        (kLH * oh + kOH)) * (idx_t)kYWout + (kLW * ow + kOW);\n"
          "  return true;\n}\n";
    // The same index as a row part (position) plus a column part (channel), for epilogues that
    // compute each once; every row fits (room 1 in each dimension, phase 0).
    // kPlainCols: columns are plain channels (every row holds all of them), so epilogues may
    // address a column as its channel's plane without the room and phase tests.
    os << "constexpr bool kPlainCols = true;\n"
          "constexpr int kColRun = 1, kLastPhase = 0, kColPeriod = 1;\n"
          "__host__ __device__ constexpr long long ColDelta(int d) {\n"
          "  return (long long)d * kYDout * kYHout * kYWout;\n}\n"
          "__device__ __forceinline__ long long OutputRow(int n, long long od, long long oh,\n"
          "                                               long long ow, int& room) {\n"
          "  room = 1 | 1 << 10 | 1 << 20;\n"
          "  return (long long)n * kCout * kYDout * kYHout * kYWout +\n"
          "         ((kLD * od + kOD) * kYHout + (kLH * oh + kOH)) * kYWout + (kLW * ow + "
          "kOW);\n}\n"
          "__device__ __forceinline__ long long OutputCol(int g, int co, int& bias_co, int& phase) "
          "{\n"
          "  bias_co = g * kCoutG + co;\n  phase = 0;\n"
          "  return (long long)bias_co * kYDout * kYHout * kYWout;\n}\n";
    OutputFitsFunction(os);
    return;
  }
  // Phase channels: the real problem's channel and tap counts, and per dimension the real tap
  // of (phase r, sub tap k) as a table (-1: none).
  const int64_t cout_g = full.c_out / full.groups;
  os << "constexpr int kSubPhases = " << l->phases << ", kRCout = " << full.c_out
     << ", kRCoutG = " << cout_g << ";\n";
  os << "constexpr int kRKD = " << full.kernel[0] << ", kRKH = " << full.kernel[1]
     << ", kRKW = " << full.kernel[2] << ";\n";
  os << "constexpr int kRS[3] = {" << full.stride[0] << ", " << full.stride[1] << ", "
     << full.stride[2] << "};\n";
  for (int i = 0; i < 3; ++i) {
    os << "__device__ __forceinline__ int RealTap" << ax[i] << "(int r, int k) {\n"
       << "  constexpr int t[" << full.stride[i] << "][" << l->sub.kernel[i] << "] = {";
    for (int64_t r = 0; r < full.stride[i]; ++r) {
      os << "{";
      for (int64_t k = 0; k < l->sub.kernel[i]; ++k) os << l->RealTap(full, i, r, k) << ", ";
      os << "}, ";
    }
    os << "};\n  return t[r][k];\n}\n";
  }
  os << "__device__ __forceinline__ long long WeightIndex(int g, int ci, int co, int kd, int kh,\n"
        "                                                 int kw) {\n"
        "  if (ci >= kCinG || co >= kCoutG) return -1;\n"
        "  const int cog = co / kSubPhases, ph = co % kSubPhases;\n"
        "  const int td = RealTapD(ph / (kRS[1] * kRS[2]), kd);\n"
        "  const int th = RealTapH(ph / kRS[2] % kRS[1], kh), tw = RealTapW(ph % kRS[2], kw);\n"
        "  if (td < 0 || th < 0 || tw < 0) return -1;\n"
        "  return ((long long)(g * kCinG + ci) * kRCoutG + cog) * (kRKD * kRKH * kRKW) +\n"
        "         (td * kRKH + th) * kRKW + tw;\n}\n";
  os << "constexpr long long kWeightCiStep = (long long)kRCoutG * (kRKD * kRKH * kRKW);\n";
  os << "constexpr long long kWeightElems = (long long)kCin * kWeightCiStep;  // the user's\n";
  os << "__device__ __forceinline__ bool OutputIndex(int n, int g, int co, long long od,\n"
        "                                            long long oh, long long ow, idx_t& at,\n"
        "                                            int& bias_co) {\n"
        "  const int cog = co / kSubPhases, ph = co % kSubPhases;\n"
        "  const long long yd = kRS[0] * od + ph / (kRS[1] * kRS[2]);\n"
        "  const long long yh = kRS[1] * oh + ph / kRS[2] % kRS[1], yw = kRS[2] * ow + ph % "
        "kRS[2];\n"
        "  bias_co = g * kRCoutG + cog;\n"
        "  at = ((((idx_t)n * kRCout + bias_co) * kYDout + yd) * kYHout + yh) * (idx_t)kYWout + "
        "yw;\n"
        "  return yd < kYDout && yh < kYHout && yw < kYWout;\n}\n";
  // Row part: the sub position scaled by the strides; column part: the real channel and the
  // phase offsets (rd, rh, rw); room: per dimension how many phases of the row lie inside y.
  // Neighbouring sub channels are neighbouring W phases of one output channel: kColRun of them
  // are neighbours in y.
  os << "constexpr bool kPlainCols = false;\n";
  // The last phase in every dimension: a row that fits it fits every phase (OutputFits).
  os << "constexpr int kLastPhase = " << (full.stride[0] - 1) << " | " << (full.stride[1] - 1)
     << " << 10 | " << (full.stride[2] - 1) << " << 20;\n";
  os << "constexpr int kColRun = " << (32 % full.stride[2] == 0 ? full.stride[2] : 1) << ";\n";
  // ColDelta(d): y's offset from a block's first sub channel (phase 0) to its d-th one. With an
  // even W stride, columns c and c + 2i (c < 2) of a block differ by ColDelta(2i): c only moves
  // the W phase. kColPeriod 0: no such fixed offsets (an odd W stride).
  os << "constexpr int kColPeriod = " << (full.stride[2] % 2 == 0 ? l->phases : 0) << ";\n";
  os << "__host__ __device__ constexpr long long ColDelta(int d) {\n"
        "  const int ph = d % kSubPhases;\n"
        "  const int rd = ph / (kRS[1] * kRS[2]), rh = ph / kRS[2] % kRS[1], rw = ph % kRS[2];\n"
        "  return ((long long)(d / kSubPhases) * kYDout + rd) * kYHout * kYWout +\n"
        "         (long long)rh * kYWout + rw;\n}\n";
  os << "__device__ __forceinline__ long long OutputRow(int n, long long od, long long oh,\n"
        "                                               long long ow, int& room) {\n"
        "  auto fit = [](long long left) { return left <= 0 ? 0 : left > 1023 ? 1023 : (int)left; "
        "};\n"
        "  room = fit(kYDout - kRS[0] * od) | fit(kYHout - kRS[1] * oh) << 10 |\n"
        "         fit(kYWout - kRS[2] * ow) << 20;\n"
        "  return (long long)n * kRCout * kYDout * kYHout * kYWout +\n"
        "         (kRS[0] * od * kYHout + kRS[1] * oh) * kYWout + kRS[2] * ow;\n}\n"
        "__device__ __forceinline__ long long OutputCol(int g, int co, int& bias_co, int& phase) "
        "{\n"
        "  const int cog = co / kSubPhases, ph = co % kSubPhases;\n"
        "  const int rd = ph / (kRS[1] * kRS[2]), rh = ph / kRS[2] % kRS[1], rw = ph % kRS[2];\n"
        "  bias_co = g * kRCoutG + cog;\n"
        "  phase = rd | rh << 10 | rw << 20;\n"
        "  return ((long long)bias_co * kYDout + rd) * kYHout * kYWout + (long long)rh * kYWout + "
        "rw;\n}\n";
  OutputFitsFunction(os);
}

}  // namespace convt3d::gen
