// key_tags.h: the tags of a cache key's code hash, and the one order they come in.
//
// A key's code hash is the generator's (gen::CodeHash) plus one tag per engine setting that
// changes the candidates a result was tuned among, so that results tuned with and without it are
// separate entries, never served for one another by the lookup tiers 1-3:
//   "+cudnn<version>"  cuDNN arbitration (vendor::KeyTag), on every key of such an engine;
//   "+f16split"        fp32x3's 3xFP16 opt-in (Options::fp32x3_fp16), on the keys of f32 fp32x3
//                      problems only: the opt-in changes no other problem's candidates, so their
//                      keys, and every entry stored before the tag existed, stay as they were.
// Always in that order: "0123456789abcdef+cudnn91900+f16split". Pure and header-only.
#pragma once

#include <string>
#include <string_view>

#include "convt3d/convt3d.h"

namespace convt3d::keytag {

inline constexpr std::string_view kFp16Split = "+f16split";

// Whether the 3xFP16 opt-in changes p's candidates, and so its key: f32 tensors in fp32x3.
inline bool Fp16SplitKeyed(const Problem& p) {
  return p.dtype == DType::kF32 && p.precision == Precision::kFp32x3;
}

// `code_hash`, then `vendor_tag` ("" or vendor::KeyTag), then kFp16Split where `fp16_split`.
inline std::string Tagged(const std::string& code_hash, const std::string& vendor_tag,
                          bool fp16_split) {
  return code_hash + vendor_tag + (fp16_split ? std::string(kFp16Split) : std::string());
}

// The code hash of p's key for an engine of `code_hash` and `vendor_tag`, with or without the
// opt-in (tuner::Fp16SplitOptIn).
inline std::string KeyCodeHash(const std::string& code_hash, const std::string& vendor_tag,
                               const Problem& p, bool fp16_split) {
  return Tagged(code_hash, vendor_tag, fp16_split && Fp16SplitKeyed(p));
}

// Whether a key's code hash carries kFp16Split (always its last tag).
inline bool HasFp16Split(std::string_view code_hash) {
  return code_hash.size() > kFp16Split.size() &&
         code_hash.substr(code_hash.size() - kFp16Split.size()) == kFp16Split;
}

// The code hash without kFp16Split: the engine's hash and its vendor tag.
inline std::string WithoutFp16Split(const std::string& code_hash) {
  return HasFp16Split(code_hash) ? code_hash.substr(0, code_hash.size() - kFp16Split.size())
                                 : code_hash;
}

}  // namespace convt3d::keytag
