// reference.cpp: CPU gather and scatter forms of ConvTranspose3d forward, and error statistics.
#include "src/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

namespace convt3d::ref {
namespace {

// For one spatial dimension, the (kernel tap, input index) pairs that feed each output index,
// in CSR form. Precomputing them keeps the divisibility test out of the innermost loops, which
// matters because the tests run the gather on shapes with millions of multiply-adds.
struct TapTable {
  std::vector<int64_t> begin;  // size out+1
  std::vector<int64_t> k, i;   // tap index and input index, parallel arrays

  TapTable(int64_t out, int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dil) {
    begin.reserve(out + 1);
    for (int64_t o = 0; o < out; ++o) {
      begin.push_back(static_cast<int64_t>(k.size()));
      for (int64_t kk = 0; kk < kernel; ++kk) {
        const int64_t t = o + pad - kk * dil;
        // t < 0 must be rejected before the modulo: C++ rounds negative quotients toward zero.
        if (t < 0 || t % stride != 0) continue;
        const int64_t ii = t / stride;
        if (ii >= in) continue;
        k.push_back(kk);
        i.push_back(ii);
      }
    }
    begin.push_back(static_cast<int64_t>(k.size()));
  }
};

template <typename T>
ErrorStats CompareImpl(const T* out, const std::vector<double>& ref) {
  ErrorSums s;
  for (size_t j = 0; j < ref.size(); ++j) s.Add(static_cast<double>(out[j]), ref[j]);
  return s.Stats();
}

}  // namespace

std::vector<double> ForwardGather(const Problem& p, const double* x, const double* w,
                                  const double* bias) {
  const Dim3 out = p.OutSize();
  const int64_t D = p.in[0], H = p.in[1], W = p.in[2];
  const int64_t kD = p.kernel[0], kH = p.kernel[1], kW = p.kernel[2];
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;
  const int64_t in_plane = D * H * W, out_plane = out[0] * out[1] * out[2];
  const int64_t taps = kD * kH * kW;

  const TapTable td(out[0], D, kD, p.stride[0], p.padding[0], p.dilation[0]);
  const TapTable th(out[1], H, kH, p.stride[1], p.padding[1], p.dilation[1]);
  const TapTable tw(out[2], W, kW, p.stride[2], p.padding[2], p.dilation[2]);

  std::vector<double> y(static_cast<size_t>(p.n * p.c_out * out_plane), 0.0);

  auto plane = [&](int64_t task) {
    const int64_t n = task / p.c_out, co = task % p.c_out;
    const int64_t g = co / cout_g, co_local = co % cout_g;
    const double b = (p.bias && bias != nullptr) ? bias[co] : 0.0;
    double* yp = y.data() + task * out_plane;
    std::fill_n(yp, out_plane, b);
    // Input channel outermost so each (ci, kd, kh) pair's x row and w row stay in registers and
    // L1 across a whole output row; every output element still only gathers its own taps.
    for (int64_t ci = g * cin_g; ci < (g + 1) * cin_g; ++ci) {
      const double* xp = x + (n * p.c_in + ci) * in_plane;
      const double* wp = w + (ci * cout_g + co_local) * taps;
      for (int64_t od = 0; od < out[0]; ++od) {
        for (int64_t oh = 0; oh < out[1]; ++oh) {
          double* yrow = yp + (od * out[1] + oh) * out[2];
          for (int64_t a = td.begin[od]; a < td.begin[od + 1]; ++a) {
            for (int64_t c = th.begin[oh]; c < th.begin[oh + 1]; ++c) {
              const double* xr = xp + (td.i[a] * H + th.i[c]) * W;
              const double* wr = wp + (td.k[a] * kH + th.k[c]) * kW;
              for (int64_t ow = 0; ow < out[2]; ++ow) {
                double acc = 0;
                for (int64_t e = tw.begin[ow]; e < tw.begin[ow + 1]; ++e) {
                  acc += xr[tw.i[e]] * wr[tw.k[e]];
                }
                yrow[ow] += acc;
              }
            }
          }
        }
      }
    }
  };

  const int64_t tasks = p.n * p.c_out;
  const int64_t nthreads =
      std::max<int64_t>(1, std::min<int64_t>(tasks, std::thread::hardware_concurrency()));
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t t; (t = next.fetch_add(1)) < tasks;) plane(t);
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return y;
}

std::vector<double> ForwardScatter(const Problem& p, const double* x, const double* w,
                                   const double* bias) {
  const auto [D, H, W] = p.in;
  const auto [kD, kH, kW] = p.kernel;
  const auto [Do, Ho, Wo] = p.OutSize();
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;

  std::vector<double> y(static_cast<size_t>(p.n * p.c_out * Do * Ho * Wo), 0.0);
  if (p.bias && bias != nullptr) {
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t co = 0; co < p.c_out; ++co)
        std::fill_n(y.begin() + (n * p.c_out + co) * Do * Ho * Wo, Do * Ho * Wo, bias[co]);
  }

  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t ci = 0; ci < p.c_in; ++ci) {
      const int64_t g = ci / cin_g;
      for (int64_t id = 0; id < D; ++id) {
        for (int64_t ih = 0; ih < H; ++ih) {
          for (int64_t iw = 0; iw < W; ++iw) {
            const double xv = x[(((n * p.c_in + ci) * D + id) * H + ih) * W + iw];
            for (int64_t col = 0; col < cout_g; ++col) {
              const int64_t co = g * cout_g + col;
              for (int64_t kd = 0; kd < kD; ++kd) {
                const int64_t od = id * p.stride[0] - p.padding[0] + kd * p.dilation[0];
                if (od < 0 || od >= Do) continue;
                for (int64_t kh = 0; kh < kH; ++kh) {
                  const int64_t oh = ih * p.stride[1] - p.padding[1] + kh * p.dilation[1];
                  if (oh < 0 || oh >= Ho) continue;
                  for (int64_t kw = 0; kw < kW; ++kw) {
                    const int64_t ow = iw * p.stride[2] - p.padding[2] + kw * p.dilation[2];
                    if (ow < 0 || ow >= Wo) continue;
                    const double wv = w[(((ci * cout_g + col) * kD + kd) * kH + kh) * kW + kw];
                    y[(((n * p.c_out + co) * Do + od) * Ho + oh) * Wo + ow] += xv * wv;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return y;
}

void ErrorSums::Add(double out, double ref) {
  ++count;
  max_ref = std::max(max_ref, std::fabs(ref));
  ref2 += ref * ref;
  if (!std::isfinite(out)) {
    ++nonfinite;
    return;
  }
  const double d = out - ref;
  diff2 += d * d;
  max_abs = std::max(max_abs, std::fabs(d));
}

void ErrorSums::Merge(const ErrorSums& o) {
  diff2 += o.diff2;
  ref2 += o.ref2;
  max_abs = std::max(max_abs, o.max_abs);
  max_ref = std::max(max_ref, o.max_ref);
  nonfinite += o.nonfinite;
  count += o.count;
}

ErrorStats ErrorSums::Stats() const {
  ErrorStats s;
  s.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  s.max_abs = max_abs;
  s.max_ref = max_ref;
  s.nonfinite = nonfinite;
  s.count = count;
  if (nonfinite > 0) {
    // A NaN must never pass a tolerance check, whatever the caller's threshold is.
    s.rel_l2 = std::numeric_limits<double>::infinity();
    s.max_abs = std::numeric_limits<double>::infinity();
  }
  return s;
}

ErrorStats Compare(const float* out, const std::vector<double>& ref) {
  return CompareImpl(out, ref);
}

ErrorStats Compare(const double* out, const std::vector<double>& ref) {
  return CompareImpl(out, ref);
}

void FillRandom(std::vector<double>& v, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  // Drawn by hand from the raw 64-bit stream rather than with uniform_real_distribution, whose
  // output is implementation-defined: the same seed must give the same tensor on every libstdc++.
  const double scale = (hi - lo) / 18446744073709551616.0;  // 2^64
  bool any_nonzero = false;
  for (double& e : v) {
    e = lo + static_cast<double>(rng()) * scale;
    if (e >= hi) e = lo;  // the rounding of values close to 2^64 can reach hi
    any_nonzero |= (e != 0.0);
  }
  if (!v.empty() && !any_nonzero) v[0] = hi != 0.0 ? hi : (lo != 0.0 ? lo : 1.0);
}

uint16_t FloatToBf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  // A NaN keeps its sign and top payload bits and is made quiet, so that rounding can never
  // carry a NaN whose payload sits in the low half into an infinity.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  // Adding 0x7fff plus the kept lowest bit rounds half to even; a carry into the exponent is
  // the correct overflow to the next binade or to infinity.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

uint16_t FloatToF16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to Inf
  if (a < 0x38800000u) {                                               // subnormal or 0
    // Scale so the f16 subnormal step (2^-24) is one unit, then round to nearest even.
    const double scaled = std::fabs(static_cast<double>(v)) * 16777216.0;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  a += 0xfffu + ((a >> 13) & 1u);  // round the 13 dropped mantissa bits to nearest even
  return static_cast<uint16_t>(sign | ((a - 0x38000000u) >> 13));
}

float F16ToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu, man = bits & 0x3ffu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    mag = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    mag = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -mag : mag;
}

double RoundTo(DType t, double v) {
  switch (t) {
    case DType::kF32:
      return static_cast<float>(v);
    case DType::kBF16:
      return Bf16ToFloat(FloatToBf16(static_cast<float>(v)));
    case DType::kF16:
      return F16ToFloat(FloatToF16(static_cast<float>(v)));
    default:
      return v;
  }
}

std::vector<double> Widen(DType t, const void* data, size_t count) {
  std::vector<double> out(count);
  for (size_t i = 0; i < count; ++i) {
    switch (t) {
      case DType::kF64:
        out[i] = static_cast<const double*>(data)[i];
        break;
      case DType::kBF16:
        out[i] = Bf16ToFloat(static_cast<const uint16_t*>(data)[i]);
        break;
      case DType::kF16:
        out[i] = F16ToFloat(static_cast<const uint16_t*>(data)[i]);
        break;
      default:
        out[i] = static_cast<const float*>(data)[i];
    }
  }
  return out;
}

std::vector<unsigned char> Narrow(DType t, const std::vector<double>& v) {
  std::vector<unsigned char> out(v.size() * DTypeBytes(t));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t) {
      case DType::kF64:
        std::memcpy(&out[i * 8], &v[i], 8);
        break;
      case DType::kBF16: {
        const uint16_t b = FloatToBf16(static_cast<float>(v[i]));
        std::memcpy(&out[i * 2], &b, 2);
        break;
      }
      case DType::kF16: {
        const uint16_t b = FloatToF16(static_cast<float>(v[i]));
        std::memcpy(&out[i * 2], &b, 2);
        break;
      }
      default: {
        const float f = static_cast<float>(v[i]);
        std::memcpy(&out[i * 4], &f, 4);
      }
    }
  }
  return out;
}

}  // namespace convt3d::ref
