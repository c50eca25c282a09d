// vendor.cpp: names, JSON and key tags of vendor (cuDNN) candidates (vendor.h).
#include "src/vendor.h"

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "runtime/cudnn.h"

namespace convt3d::vendor {

std::string CudnnChoice::Name() const { return StrCat("cudnn:", cudnn::AlgorithmName(algo)); }

std::string CudnnChoice::ToJson() const {
  nlohmann::ordered_json j;
  j["family"] = kCudnnFamily;
  j["algo"] = cudnn::AlgorithmName(algo);
  j["math"] = math;
  j["cudnn_version"] = cudnn_version;
  return j.dump();
}

StatusOr<CudnnChoice> CudnnChoice::FromJson(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("cuDNN candidate: params are not a JSON object");
  const auto text = [&](const char* key, std::string* out) -> Status {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string())
      return InvalidArgument(StrCat("cuDNN candidate: \"", key, "\" missing or not a string"));
    *out = it->get<std::string>();
    return Status();
  };
  std::string family, algo;
  CudnnChoice c;
  CONVT3D_RETURN_IF_ERROR(text("family", &family));
  if (family != kCudnnFamily)
    return InvalidArgument(StrCat("cuDNN candidate: family \"", family, "\" is not \"cudnn\""));
  CONVT3D_RETURN_IF_ERROR(text("algo", &algo));
  c.algo = cudnn::AlgorithmFromName(algo);
  if (c.algo < 0) return InvalidArgument(StrCat("cuDNN candidate: no algorithm \"", algo, "\""));
  CONVT3D_RETURN_IF_ERROR(text("math", &c.math));
  const auto v = j.find("cudnn_version");
  if (v == j.end() || !v->is_number_integer() || v->get<int64_t>() <= 0)
    return InvalidArgument("cuDNN candidate: \"cudnn_version\" missing or not a positive integer");
  c.cudnn_version = v->get<int64_t>();
  if (j.size() != 4) return InvalidArgument("cuDNN candidate: unexpected fields in its params");
  return c;
}

std::vector<char> CudnnChoice::Blob() const {
  const std::string s = StrCat("cuDNN ", Name(), " ", math, " ", cudnn_version);
  return std::vector<char>(s.begin(), s.end());
}

cache::Winner CudnnChoice::AsWinner(double median_ms, double rel_err) const {
  cache::Winner w;
  w.candidate = w.kernel_symbol = Name();
  w.params_json = ToJson();
  w.cubin = Blob();
  w.median_ms = median_ms;
  w.rel_err = rel_err;
  return w;
}

CudnnChoice ChoiceOf(const cudnn::Algorithm& algorithm) {
  CudnnChoice c;
  c.algo = algorithm.algo();
  c.math = algorithm.math_name();
  c.cudnn_version = static_cast<int64_t>(algorithm.library().version());
  return c;
}

bool IsVendorJson(const std::string& params_json) {
  const nlohmann::json j = nlohmann::json::parse(params_json, nullptr, false);
  if (!j.is_object()) return false;
  const auto it = j.find("family");
  return it != j.end() && it->is_string() && it->get<std::string>() == kCudnnFamily;
}

std::string KeyTag(int64_t cudnn_version) { return StrCat("+cudnn", cudnn_version); }

std::string TagOf(const std::string& code_hash) {
  const size_t plus = code_hash.find('+');
  return plus == std::string::npos ? std::string() : code_hash.substr(plus);
}

}  // namespace convt3d::vendor
