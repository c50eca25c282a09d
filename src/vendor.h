// vendor.h: vendor candidates (cuDNN's backward-data algorithms) as cache data: names, JSON, key.
//
// Arbitration (Options::vendor_candidates) offers every cuDNN backward-data algorithm that cuDNN
// accepts for a problem as one more tuning candidate, gated and timed like ours. A cuDNN winner
// is stored like any other: its candidate name is "cudnn:<algorithm>" (e.g. "cudnn:ALGO_1"), its
// params_json says which algorithm, math type and cuDNN version, and, since the store keeps a
// binary per entry and cuDNN has none of ours, its "cubin" is a short text naming the same.
// Results tuned with cuDNN among the candidates depend on that cuDNN, so such an engine's key
// carries it: its code hash gets the tag "+cudnn<version>" (KeyTag). Entries with and without
// arbitration, or under another cuDNN, are separate entries, never served for one another by the
// lookup tiers 1-3. This file is pure: nothing here loads cuDNN.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "convt3d/convt3d.h"

namespace convt3d::cudnn {
class Algorithm;
}  // namespace convt3d::cudnn

namespace convt3d::vendor {

// The JSON "family" of a cuDNN candidate (no generator family has this name).
inline constexpr const char* kCudnnFamily = "cudnn";

// A cuDNN candidate as the cache records it.
struct CudnnChoice {
  int algo = 0;               // cudnnConvolutionBwdDataAlgo_t
  std::string math;           // the math type it ran with, e.g. "FMA_MATH"
  int64_t cudnn_version = 0;  // cudnnGetVersion() of the library it was tuned with, e.g. 91900

  // "cudnn:ALGO_1": the candidate's name in trials, the cache and Plan::kernel_name().
  std::string Name() const;
  // {"family":"cudnn","algo":"ALGO_1","math":"FMA_MATH","cudnn_version":91900}
  std::string ToJson() const;
  // kInvalidArgument naming the field for anything ToJson does not write.
  static StatusOr<CudnnChoice> FromJson(const std::string& json);
  // What the cache stores in place of a cubin: "cuDNN cudnn:ALGO_1 FMA_MATH 91900".
  std::vector<char> Blob() const;
  // The cache winner of this choice with its time and error.
  cache::Winner AsWinner(double median_ms, double rel_err) const;
};

// The choice an algorithm of the loaded cuDNN stands for (its algorithm, math type, version).
CudnnChoice ChoiceOf(const cudnn::Algorithm& algorithm);

// Whether a stored winner's params_json names a vendor candidate (its "family" is "cudnn").
bool IsVendorJson(const std::string& params_json);

// The code-hash tag of an engine that arbitrates with cuDNN `cudnn_version`: "+cudnn91900".
std::string KeyTag(int64_t cudnn_version);
// Every tag a key's code hash carries, in order (src/key_tags.h): "" (none), e.g. "+cudnn91900",
// "+f16split" or "+cudnn91900+f16split".
std::string TagOf(const std::string& code_hash);

}  // namespace convt3d::vendor
