// test_util.h: problems for the tests, written in one expression, and the modes they run in.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <string>

#include "convt3d/convt3d.h"

namespace convt3d::test {

// A Problem built in one expression; the fields not set keep Problem's defaults (stride 1,
// padding 0, output_padding 0, dilation 1, groups 1, no bias, f32, strict fp32):
//   const Problem p = MakeProblem(2, 6, 4, {4, 5, 9}, {3, 2, 3}).Stride({2, 1, 2}).Groups(2);
class ProblemBuilder {
 public:
  ProblemBuilder(int64_t n, int64_t c_in, int64_t c_out, Dim3 in, Dim3 kernel) {
    p_.n = n;
    p_.c_in = c_in;
    p_.c_out = c_out;
    p_.in = in;
    p_.kernel = kernel;
  }
  explicit ProblemBuilder(const Problem& p) : p_(p) {}  // p, to change some of its fields
  ProblemBuilder& Stride(Dim3 v) { return Set(&Problem::stride, v); }
  ProblemBuilder& Padding(Dim3 v) { return Set(&Problem::padding, v); }
  ProblemBuilder& OutputPadding(Dim3 v) { return Set(&Problem::output_padding, v); }
  ProblemBuilder& Dilation(Dim3 v) { return Set(&Problem::dilation, v); }
  ProblemBuilder& Groups(int64_t g) { return Set(&Problem::groups, g); }
  ProblemBuilder& Bias(bool b = true) { return Set(&Problem::bias, b); }
  ProblemBuilder& Type(DType t) { return Set(&Problem::dtype, t); }
  ProblemBuilder& Mode(Precision m) { return Set(&Problem::precision, m); }

  operator Problem() const { return p_; }  // NOLINT: implicit, so that it reads as a Problem

 private:
  template <typename T>
  ProblemBuilder& Set(T Problem::*field, T value) {
    p_.*field = value;
    return *this;
  }
  Problem p_;
};

// n x c_in x in -> c_out with kernel `kernel`; set the rest with ProblemBuilder's setters.
inline ProblemBuilder MakeProblem(int64_t n, int64_t c_in, int64_t c_out, Dim3 in, Dim3 kernel) {
  return ProblemBuilder(n, c_in, c_out, in, kernel);
}

// The five modes the suites run problems in, by number: 0 strict fp32, 1 tf32, 2 fp32x3 (f32
// tensors in those precisions), 3 bf16 and 4 f16 (16-bit tensors). Sets p's precision (0-2) or
// its dtype (3-4) and leaves the other as it is.
inline void SetMode(Problem& p, int m) {
  const Precision precision[3] = {Precision::kFp32, Precision::kTf32, Precision::kFp32x3};
  if (m < 3)
    p.precision = precision[m];
  else
    p.dtype = m == 3 ? DType::kBF16 : DType::kF16;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// The problem files every suite reads.
constexpr const char* kLevel1File = CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json";
constexpr const char* kBenchFile = CONVT3D_SOURCE_DIR "/problems/bench.json";
constexpr const char* kModelsFile = CONVT3D_SOURCE_DIR "/problems/models.json";

}  // namespace convt3d::test
