// reference.h: CPU reference implementations of ConvTranspose3d forward, used to check kernels.
//
// Two independent formulations exist on purpose: a bug shared by the GPU kernels and one
// reference would go unnoticed, but the gather and scatter forms share no index arithmetic, so
// the tests check them against each other and against hand-worked cases.
#pragma once

#include <cstdint>
#include <vector>

#include "convt3d/convt3d.h"

namespace convt3d::ref {

// Output-stationary: every y[n,co,od,oh,ow] sums the taps whose input index
// (o + pad - k*dil) / stride is integral and in range. Accumulates in double, parallel over
// (n, co). x: [N, C_in, D, H, W]; w: [C_in, C_out/groups, kD, kH, kW]; bias: [C_out] or null.
// Returns y: [N, C_out, Do, Ho, Wo]. REQUIRES: Validate(p).ok().
std::vector<double> ForwardGather(const Problem& p, const double* x, const double* w,
                                  const double* bias);

// PyTorch's definition: every input element times every tap is added into
// y[n, co, id*s - p + kd*d, ...] when that lands inside the output. Single-threaded.
std::vector<double> ForwardScatter(const Problem& p, const double* x, const double* w,
                                   const double* bias);

struct ErrorStats {
  double rel_l2 = 0;   // ||out-ref|| / ||ref|| (||out-ref|| when ref is all zero); +inf on NaN/Inf
  double max_abs = 0;  // largest |out-ref| over finite outputs (+inf when any is not finite)
  double max_ref = 0;  // largest |ref|, to put max_abs in scale
  int64_t nonfinite = 0;  // NaN/Inf elements in out
  int64_t count = 0;      // elements compared (ref.size())
};

// The sums behind ErrorStats, accumulated element by element and merged across threads (or
// read back from the GPU's comparison kernel): the one place the error rules are written.
struct ErrorSums {
  double diff2 = 0;    // sum of (out-ref)^2 over finite outputs
  double ref2 = 0;     // sum of ref^2
  double max_abs = 0;  // largest |out-ref| over finite outputs
  double max_ref = 0;
  int64_t nonfinite = 0, count = 0;

  void Add(double out, double ref);
  void Merge(const ErrorSums& other);
  ErrorStats Stats() const;
};

// Compares ref.size() elements of `out` with `ref`.
ErrorStats Compare(const float* out, const std::vector<double>& ref);
ErrorStats Compare(const double* out, const std::vector<double>& ref);

// 16-bit floating-point bits <-> float, rounding to nearest even (as the kernels' stores and
// PyTorch's casts do). Host-side, for test and benchmark data.
uint16_t FloatToBf16(float v);
float Bf16ToFloat(uint16_t bits);
uint16_t FloatToF16(float v);
float F16ToFloat(uint16_t bits);
// v rounded to dtype t (f32, bf16, f16; f64 unchanged).
double RoundTo(DType t, double v);
// Widens `count` elements of dtype t at `data` to double.
std::vector<double> Widen(DType t, const void* data, size_t count);
// Narrows v to dtype t: returns the bytes (count * DTypeBytes(t)).
std::vector<unsigned char> Narrow(DType t, const std::vector<double>& v);

// Deterministic uniform values in [lo, hi) from std::mt19937_64(seed). Never all zeros (an
// all-zero tensor would let a kernel that ignores it pass).
void FillRandom(std::vector<double>& v, uint64_t seed, double lo = -1, double hi = 1);

}  // namespace convt3d::ref
