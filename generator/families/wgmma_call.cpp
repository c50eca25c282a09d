// wgmma_call.cpp: what the Hopper GEMM families share: the wgmma.mma_async calls their preambles
// define and their tile rules.
#include "generator/families/wgmma_call.h"

#include <sstream>

#include "base/math.h"
#include "base/status.h"
#include "generator/family.h"

namespace convt3d::gen {

namespace {

// "wgmma.mma_async.sync.aligned.m64n<bn>k<8|16>.f32.<t>.<t> {%0, ..., %<N/2-1>}": the
// instruction and its accumulator operands (spelled out: their count is N/2).
std::string Instruction(DType dtype, int bn) {
  const char* t = dtype == DType::kBF16 ? "bf16" : dtype == DType::kF16 ? "f16" : "tf32";
  std::ostringstream os;
  os << "wgmma.mma_async.sync.aligned.m64n" << bn << "k" << (IsHalf(dtype) ? 16 : 8) << ".f32." << t
     << "." << t << " {";
  for (int i = 0; i < bn / 2; ++i) os << (i ? ", " : "") << "%" << i;
  os << "}";
  return os.str();
}

// The accumulators' read-write constraints: "+f"(d[0]), ...
std::string AccumulatorConstraints(int bn) {
  std::ostringstream os;
  for (int i = 0; i < bn / 2; ++i) os << (i ? ", " : "") << "\"+f\"(d[" << i << "])";
  return os.str();
}

}  // namespace

// WgmmaSS(d, a_lo, a_hi, b_lo, b_hi, scale_d): one wgmma.mma_async m64n<bn>k<8|16> with A and B
// from shared-memory descriptors given as 32-bit halves (only the low half, start address and
// LBO, changes between wgmmas: one 32-bit add each instead of a 64-bit add with carry).
std::string WgmmaFunction(DType dtype, int bn) {
  const int regs = bn / 2;
  std::ostringstream os;
  os << "__device__ __forceinline__ void WgmmaSS(float (&d)[" << regs
     << "], unsigned a_lo, unsigned a_hi, unsigned b_lo, unsigned b_hi, int scale_d) {\n"
     << "  asm volatile(\"{\\n.reg .pred p;\\n.reg .b64 da, db;\\nsetp.ne.b32 p, %" << regs + 4
     << ", 0;\\nmov.b64 da, {%" << regs << ", %" << regs + 1 << "};\\nmov.b64 db, {%" << regs + 2
     << ", %" << regs + 3 << "};\\n\"\n"
     << "               \"" << Instruction(dtype, bn) << ", da, db, p, 1, 1"
     << (IsHalf(dtype) ? ", 0, 0" : "")
     << ";\\n}\\n\"\n               : " << AccumulatorConstraints(bn)
     << "\n               : \"r\"(a_lo), \"r\"(a_hi), \"r\"(b_lo), \"r\"(b_hi), "
        "\"r\"(scale_d));\n}\n";
  return os.str();
}

std::string WgmmaRegisterAFunction(DType dtype, int bn) {
  const int regs = bn / 2;
  std::ostringstream os;
  os << "__device__ __forceinline__ void WgmmaRS(float (&d)[" << regs
     << "], const unsigned (&a)[4], unsigned b_lo, unsigned b_hi, int scale_d) {\n"
     << "  asm volatile(\"{\\n.reg .pred p;\\n.reg .b64 db;\\nsetp.ne.b32 p, %" << regs + 6
     << ", 0;\\nmov.b64 db, {%" << regs + 4 << ", %" << regs + 5 << "};\\n\"\n"
     << "               \"" << Instruction(dtype, bn) << ", {%" << regs << ", %" << regs + 1
     << ", %" << regs + 2 << ", %" << regs + 3 << "}, db, p, 1, 1" << (IsHalf(dtype) ? ", 0" : "")
     << ";\\n}\\n\"\n               : " << AccumulatorConstraints(bn)
     << "\n               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b_lo), "
        "\"r\"(b_hi), \"r\"(scale_d));\n}\n";
  return os.str();
}

Status CheckWgmmaTile(const Config& c, std::string_view family) {
  const int row_b = c.ck * (IsHalf(c.dtype) || c.split == 4 ? 2 : 4);
  if (c.bn % 8 != 0 || c.mt * c.bn / 2 > 128 || (row_b != 32 && row_b != 64 && row_b != 128) ||
      c.split == 2 || (c.split >= 3 && IsHalf(c.dtype)))
    return InvalidArgument(StrCat("inconsistent ", family, " tile in ", c.ToJson()));
  return Status();
}

bool PlaneWgmmaMode(const Problem& p, const DeviceLimits& limits) {
  if (!limits.wgmma) return false;
  return IsHalf(p.dtype) || (p.dtype == DType::kF32 && p.precision != Precision::kFp32);
}

std::vector<int> PlaneWgmmaKRows(const Problem& p, int64_t cin_g) {
  const int eb = IsHalf(p.dtype) ? 2 : 4, kstep = IsHalf(p.dtype) ? 16 : 8;
  const int ck128 = 128 / eb;
  std::vector<int> cks;
  for (int row_b : {128, 64, 32}) {
    const int ck = row_b / eb;
    if (ck < kstep || (row_b < 128 && CeilDiv(cin_g, ck) * ck >= CeilDiv(cin_g, ck128) * ck128))
      continue;
    cks.push_back(ck);
  }
  return cks;
}

LaunchPlan PlaneWgmmaPlan(const std::string& name, int64_t w_bytes, int64_t units, unsigned threads,
                          unsigned smem_bytes, int blocks_per_sm) {
  LaunchPlan plan;
  plan.workspace_bytes = static_cast<size_t>(w_bytes);
  plan.x_alignment = 16;
  plan.steps.push_back(WeightPrep(name + "_prep", w_bytes / 4, 2048));
  LaunchStep main =
      Step(name, units, threads, smem_bytes, {Arg::kX, Arg::kWorkspace, Arg::kBias, Arg::kY});
  main.blocks_per_sm = blocks_per_sm;
  // Both families are sm_90a only: the main kernel waits for the packing in the kernel, so it is
  // launched as its programmatic dependent (no kernel-boundary gap when the weights are packed).
  main.overlaps_previous = true;
  plan.steps.push_back(main);
  return plan;
}

}  // namespace convt3d::gen
