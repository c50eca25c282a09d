// problem_io.h: reads problem lists (problems/kernelbench_l1.json format) and parses CLI shapes.
//
// Parsing only: nothing here calls Validate(), so that a list with one bad problem still loads
// and the caller can report that problem and go on with the others.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "convt3d/convt3d.h"

namespace convt3d::io {

struct NamedProblem {
  std::string name;  // "L1-70"; "problem<i>" when the file gives none
  Problem problem;
  std::map<std::string, double> cudnn_ms;  // from "cudnn_h200_ms", e.g. {"fp32_strict", 8.2}
  double gflop = 0;                        // the file's "gflop", 0 when absent
};

// Parses a JSON file that is either {"problems": [...]} or a bare array of problem objects:
//   {"name": "L1-72", "input": [N, C, D, H, W], "in_channels": C, "out_channels": 32,
//    "kernel": [3, 5, 7] or 3, "stride": .., "padding": .., "output_padding": .., "dilation": ..,
//    "groups": 4, "bias": false, "dtype": "f32" | "f64" | "bf16" | "f16",
//    "precision": "fp32" | "fp32x3" | "tf32"}
// Only "input", "out_channels" and "kernel" ("kernel_size" is accepted too) are required;
// unknown fields are ignored. Errors name the file, the problem (index and name) and the field.
StatusOr<std::vector<NamedProblem>> LoadProblems(const std::string& path);
// The same from JSON text; `origin` stands for the file name in error messages.
StatusOr<std::vector<NamedProblem>> ParseProblems(const std::string& json_text,
                                                  const std::string& origin);

// One problem in the file format above (plus "signature" and "output"), pretty-printed with
// `indent` spaces, or on one line when indent < 0.
std::string ToJson(const NamedProblem& problem, int indent = -1);

// The one rule for integers typed on the command line (flags and the lists below): optional
// spaces around, an optional '-', decimal digits. Leading zeros are decimal ("010" is 10, "08" is
// 8); "0x10", "1e3", "1.0", "+1" and "" are kNotDecimal; beyond int64 is kOutOfRange.
enum class IntText { kOk, kNotDecimal, kOutOfRange };
IntText ParseDecimal(const std::string& text, int64_t* out);

// "3" -> {3, 3, 3}; "3,5,7" -> {3, 5, 7}. On a malformed value sets *status to
// kInvalidArgument naming `field` (e.g. "--kernel-size") and the bad element, and returns
// {0, 0, 0}. The values are not checked further (Validate does that).
Dim3 ParseTriple(const std::string& text, const char* field, Status* status);
// "1,4,8,8,8" -> {1, 4, 8, 8, 8}; any count of comma-separated integers.
std::vector<int64_t> ParseIntList(const std::string& text, const char* field, Status* status);

// "f32" / "f64" / "bf16" / "f16" (also "float32", "float64", "float", "double", "bfloat16",
// "float16", "half"); convt3d::DTypeName prints them.
StatusOr<DType> ParseDType(const std::string& text);
// "fp32", "fp32x3" or "tf32" (PrecisionName's spellings).
StatusOr<Precision> ParsePrecision(const std::string& text);

}  // namespace convt3d::io
