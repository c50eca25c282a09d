// problem.cpp: Problem's size arithmetic, its signature, and validation with PyTorch's rules.
#include <limits>
#include <tuple>

#include "base/status.h"
#include "convt3d/convt3d.h"

namespace convt3d {
namespace {

constexpr const char* kAxis[3] = {"D", "H", "W"};

// Multiplies positive counts, saturating at INT64_MAX so overflow is detectable.
int64_t SatMul(std::initializer_list<int64_t> xs) {
  int64_t r = 1;
  for (int64_t x : xs) {
    if (x <= 0) return 0;
    if (r > std::numeric_limits<int64_t>::max() / x) return std::numeric_limits<int64_t>::max();
    r *= x;
  }
  return r;
}

std::string Triple(const Dim3& v) { return StrCat(v[0], "x", v[1], "x", v[2]); }

// What each element type and precision mode stands for, one row each. The first row answers for
// a value outside the enum.
struct DTypeRow {
  DType key;
  const char* name;
  int bytes;
  double tolerance;  // against fp64; 0: the problem's precision decides
};
constexpr DTypeRow kDTypes[] = {
    {DType::kF32, "f32", 4, 0},
    {DType::kF64, "f64", 8, 1e-12},
    {DType::kBF16, "bf16", 2, 1e-2},
    {DType::kF16, "f16", 2, 1e-2},
};
struct PrecisionRow {
  Precision key;
  const char* name;
  double tolerance;
};
constexpr PrecisionRow kPrecisions[] = {
    {Precision::kFp32, "fp32", 1e-6},
    {Precision::kFp32x3, "fp32x3", 1e-5},
    {Precision::kTf32, "tf32", 1e-3},
};

template <typename Row, size_t N, typename Key>
const Row& RowOf(const Row (&rows)[N], Key key) {
  for (const Row& r : rows)
    if (r.key == key) return r;
  return rows[0];
}

}  // namespace

std::string Status::ToString() const {
  static constexpr const char* kNames[] = {"OK",        "INVALID_ARGUMENT", "FAILED_PRECONDITION",
                                           "NOT_FOUND", "UNAVAILABLE",      "INTERNAL"};
  return ok() ? "OK" : StrCat(kNames[static_cast<int>(code_)], ": ", message_);
}

Dim3 Problem::OutSize() const {
  Dim3 o;
  for (int i = 0; i < 3; ++i)
    o[i] = (in[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) +
           output_padding[i] + 1;
  return o;
}

int64_t Problem::InputElements() const { return SatMul({n, c_in, in[0], in[1], in[2]}); }

int64_t Problem::WeightElements() const {
  return SatMul({c_in, groups > 0 ? c_out / groups : 0, kernel[0], kernel[1], kernel[2]});
}

int64_t Problem::OutputElements() const {
  const Dim3 o = OutSize();
  return SatMul({n, c_out, o[0], o[1], o[2]});
}

// Same convention as shared/problems/kernelbench_l1.json: every input-by-weight multiply-add
// counts, also those that padding crops away, so our TFLOP/s compare with that file's.
double Problem::Flops() const {
  return 2.0 * static_cast<double>(InputElements()) * static_cast<double>(c_out / groups) *
         static_cast<double>(kernel[0] * kernel[1] * kernel[2]);
}

std::string Problem::Signature() const {
  const std::string prec =
      precision == Precision::kFp32 ? "" : StrCat("_", PrecisionName(precision));
  return StrCat(DTypeName(dtype), prec, "_n", n, "_ci", c_in, "_co", c_out, "_i", Triple(in), "_k",
                Triple(kernel), "_s", Triple(stride), "_p", Triple(padding), "_op",
                Triple(output_padding), "_d", Triple(dilation), "_g", groups, "_b", bias ? 1 : 0);
}

const char* PrecisionName(Precision p) { return RowOf(kPrecisions, p).name; }

double PrecisionTolerance(Precision p) { return RowOf(kPrecisions, p).tolerance; }

const char* DTypeName(DType t) { return RowOf(kDTypes, t).name; }

int DTypeBytes(DType t) { return RowOf(kDTypes, t).bytes; }

double ToleranceOf(const Problem& p) {
  const double t = RowOf(kDTypes, p.dtype).tolerance;
  return t > 0 ? t : PrecisionTolerance(p.precision);
}

Status Validate(const Problem& p) {
  auto positive = [](const char* field, int64_t v) -> Status {
    if (v <= 0) return InvalidArgument(StrCat(field, "=", v, " must be positive"));
    return Status();
  };
  CONVT3D_RETURN_IF_ERROR(positive("n", p.n));
  CONVT3D_RETURN_IF_ERROR(positive("c_in", p.c_in));
  CONVT3D_RETURN_IF_ERROR(positive("c_out", p.c_out));
  CONVT3D_RETURN_IF_ERROR(positive("groups", p.groups));
  if (p.c_in % p.groups != 0)
    return InvalidArgument(StrCat("c_in=", p.c_in, " must be divisible by groups=", p.groups));
  if (p.c_out % p.groups != 0)
    return InvalidArgument(StrCat("c_out=", p.c_out, " must be divisible by groups=", p.groups));
  if (p.dtype != DType::kF32 && p.dtype != DType::kF64 && p.dtype != DType::kBF16 &&
      p.dtype != DType::kF16)
    return InvalidArgument(StrCat("dtype=", static_cast<int>(p.dtype), " is not supported"));
  if (p.precision != Precision::kFp32 && p.precision != Precision::kFp32x3 &&
      p.precision != Precision::kTf32)
    return InvalidArgument(
        StrCat("precision=", static_cast<int>(p.precision), " is not a convt3d::Precision"));
  if (p.precision != Precision::kFp32 && p.dtype != DType::kF32)
    return InvalidArgument(
        StrCat("precision=", PrecisionName(p.precision),
               " needs dtype f32 (f64 is always computed strictly; bf16 and f16 always ",
               "accumulate in fp32)"));
  constexpr int64_t kMaxDim = ProblemLimits::kExtent;
  for (int i = 0; i < 3; ++i) {
    auto field = [&](const char* name) { return StrCat(name, "[", i, "]"); };
    CONVT3D_RETURN_IF_ERROR(positive(field("in").c_str(), p.in[i]));
    CONVT3D_RETURN_IF_ERROR(positive(field("kernel").c_str(), p.kernel[i]));
    CONVT3D_RETURN_IF_ERROR(positive(field("stride").c_str(), p.stride[i]));
    CONVT3D_RETURN_IF_ERROR(positive(field("dilation").c_str(), p.dilation[i]));
    if (p.padding[i] < 0)
      return InvalidArgument(StrCat(field("padding"), "=", p.padding[i], " must be >= 0"));
    if (p.output_padding[i] < 0)
      return InvalidArgument(
          StrCat(field("output_padding"), "=", p.output_padding[i], " must be >= 0"));
    // PyTorch: "output padding must be smaller than either stride or dilation".
    if (p.output_padding[i] >= p.stride[i] && p.output_padding[i] >= p.dilation[i])
      return InvalidArgument(StrCat(field("output_padding"), "=", p.output_padding[i],
                                    " must be smaller than stride[", i, "]=", p.stride[i],
                                    " or dilation[", i, "]=", p.dilation[i]));
    // Keep every per-dimension quantity far from int overflow in the kernels' index math.
    for (auto [name, v] : {std::pair{"in", p.in[i]},
                           {"kernel", p.kernel[i]},
                           {"padding", p.padding[i]},
                           {"dilation", p.dilation[i]}})
      if (v > kMaxDim)
        return InvalidArgument(
            StrCat(field(name), "=", v, " exceeds the supported ", kMaxDim, " (2^24)"));
    if (p.stride[i] > ProblemLimits::kStride)
      return InvalidArgument(StrCat(field("stride"), "=", p.stride[i], " exceeds the supported ",
                                    ProblemLimits::kStride));
  }
  // No term exceeds 2^48 by now, so the sizes cannot overflow.
  const Dim3 out = p.OutSize();
  for (int i = 0; i < 3; ++i) {
    if (out[i] <= 0)
      return InvalidArgument(StrCat("output size along ", kAxis[i], " is ", out[i], " (from in[", i,
                                    "]=", p.in[i], ", padding[", i, "]=", p.padding[i],
                                    "); it must be positive"));
    if (out[i] > kMaxDim)
      return InvalidArgument(StrCat("output size along ", kAxis[i], " is ", out[i], "; at most ",
                                    kMaxDim, " (2^24) is supported"));
  }
  for (auto [name, v, limit, text] : {std::tuple{"n", p.n, ProblemLimits::kBatch, "2^30"},
                                      {"c_in", p.c_in, ProblemLimits::kChannels, "2^24"},
                                      {"c_out", p.c_out, ProblemLimits::kChannels, "2^24"}})
    if (v > limit)
      return InvalidArgument(
          StrCat(name, "=", v, " exceeds the supported ", limit, " (", text, ")"));
  // Element counts must fit int64 with headroom for byte offsets (8 bytes per element). The
  // counts saturate, so the message shows the factors rather than the product.
  if (p.InputElements() > ProblemLimits::kTensorElements)
    return InvalidArgument(StrCat("input has too many elements (", p.n, "x", p.c_in, "x",
                                  Triple(p.in), "); at most 2^59-1 are supported"));
  if (p.WeightElements() > ProblemLimits::kWeightElements)
    return InvalidArgument(StrCat("weight has too many elements (", p.c_in, "x", p.c_out / p.groups,
                                  "x", Triple(p.kernel), "); at most 2^31-1 are supported"));
  if (p.OutputElements() > ProblemLimits::kTensorElements)
    return InvalidArgument(StrCat("output has too many elements (", p.n, "x", p.c_out, "x",
                                  Triple(out), "); at most 2^59-1 are supported"));
  return Status();
}

const char* Version() { return "0.1.0"; }

}  // namespace convt3d
