// problem_io.cpp: JSON problem lists and CLI shape strings to convt3d::Problem, and back.
#include "src/problem_io.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/status.h"

namespace convt3d::io {
namespace {

using Json = nlohmann::json;

// Documents nested deeper than this are refused before parsing: a problem list needs 4 levels
// ({"problems": [{"cudnn_h200_ms": {...}}]}), and nothing below may recurse without bound.
constexpr int kMaxDepth = 64;
// The longest value, name or parser message quoted in an error.
constexpr size_t kMaxShown = 40;
constexpr size_t kMaxName = 64;
constexpr size_t kMaxParserMessage = 200;

// s cut to `max` bytes with "..." appended, never inside a UTF-8 sequence; control characters
// as \xNN so that a message stays one line.
std::string Cut(const std::string& s, size_t max) {
  std::string out;
  size_t i = 0;
  for (; i < s.size() && out.size() < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += StrFormat("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (i < s.size()) {
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xc0) == 0x80) out.pop_back();
    if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xc0) out.pop_back();
    out += "...";
  }
  return out;
}

// Appends a JSON rendering of v to *out, stopping once *out holds more than `budget` bytes:
// the cost is bounded by the budget, not by v's size or depth (no full dump() of the value).
void Render(const Json& v, size_t budget, int depth, std::string* out) {
  if (out->size() > budget) return;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    // Dump a prefix only; replace keeps a prefix cut inside a UTF-8 sequence from throwing.
    *out += Json(s.substr(0, budget + 1)).dump(-1, ' ', false, Json::error_handler_t::replace);
  } else if (v.is_array() || v.is_object()) {
    if (depth >= 8) {
      *out += v.is_array() ? "[...]" : "{...}";
      return;
    }
    *out += v.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out->size() <= budget; ++it) {
      if (!first) *out += ", ";
      first = false;
      if (v.is_object()) {
        *out += Json(it.key().substr(0, budget + 1))
                    .dump(-1, ' ', false, Json::error_handler_t::replace) +
                ": ";
      }
      Render(*it, budget, depth + 1, out);
    }
    *out += v.is_array() ? ']' : '}';
  } else {
    *out += v.dump();  // a number, true, false or null: short
  }
}

// Short rendering of an offending value for error messages; long arrays/objects are cut so a
// message stays one readable line.
std::string Shown(const Json& v) {
  std::string s;
  Render(v, kMaxShown, 0, &s);
  return Cut(s, kMaxShown - 3);
}

// Where `text` nests arrays and objects deeper than kMaxDepth: the byte offset of the first
// bracket too deep, else npos. Brackets inside strings do not count.
size_t TooDeepAt(const std::string& text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

// Integral JSON number to int64: 3 and 3.0 are accepted, 3.5, "3", true and 2^63 are not.
bool ToInt(const Json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

// Builds the "file: problem 3 (L1-70): " prefix lazily, since the name is only known once the
// "name" field has been read.
struct Where {
  const std::string& origin;
  size_t index;
  std::string name;
  Status Error(const std::string& field, const std::string& what) const {
    std::string who = StrCat("problem ", index);
    if (!name.empty()) who += StrCat(" (", Cut(name, kMaxName), ")");
    if (field.empty()) return InvalidArgument(StrCat(origin, ": ", who, " ", what));
    return InvalidArgument(StrCat(origin, ": ", who, ": field \"", field, "\" ", what));
  }
};

// The field's value, or null when it is absent (an error when it is required).
StatusOr<const Json*> Field(const Json& obj, const char* field, const Where& where, bool required) {
  auto it = obj.find(field);
  if (it != obj.end()) return &*it;
  if (required) return where.Error(field, "is missing");
  return nullptr;
}

Status ReadInt(const Json& obj, const char* field, const Where& where, bool required,
               int64_t* out) {
  CONVT3D_ASSIGN_OR_RETURN(const Json* it, Field(obj, field, where, required));
  if (it != nullptr && !ToInt(*it, out))
    return where.Error(field, StrCat("must be an integer, got ", Shown(*it)));
  return Status();
}

// An int (same in D, H and W) or a list of 3 ints, like nn.ConvTranspose3d's arguments.
Status ReadTriple(const Json& obj, const char* field, const Where& where, bool required,
                  Dim3* out) {
  CONVT3D_ASSIGN_OR_RETURN(const Json* it, Field(obj, field, where, required));
  if (it == nullptr) return Status();
  int64_t v = 0;
  if (ToInt(*it, &v)) {
    *out = {v, v, v};
    return Status();
  }
  if (it->is_array() && it->size() == 3) {
    Dim3 d{};
    bool ok = true;
    for (size_t i = 0; i < 3 && ok; ++i) ok = ToInt((*it)[i], &d[i]);
    if (ok) {
      *out = d;
      return Status();
    }
  }
  return where.Error(field, StrCat("must be an integer or a list of 3 integers, got ", Shown(*it)));
}

StatusOr<NamedProblem> ParseOne(const Json& obj, const std::string& origin, size_t index) {
  Where where{origin, index, ""};
  if (!obj.is_object()) {
    return where.Error("", StrCat("must be a JSON object, got ", Shown(obj)));
  }
  NamedProblem np;
  if (auto it = obj.find("name"); it != obj.end()) {
    if (!it->is_string()) return where.Error("name", StrCat("must be a string, got ", Shown(*it)));
    np.name = it->get<std::string>();
    where.name = np.name;
  } else {
    np.name = StrCat("problem", index);
  }
  Problem& p = np.problem;

  CONVT3D_ASSIGN_OR_RETURN(const Json* in_it, Field(obj, "input", where, true));
  {
    int64_t v[5];
    bool ok = in_it->is_array() && in_it->size() == 5;
    for (size_t i = 0; i < 5 && ok; ++i) ok = ToInt((*in_it)[i], &v[i]);
    if (!ok) {
      return where.Error(
          "input", StrCat("must be a list of 5 integers [N, C, D, H, W], got ", Shown(*in_it)));
    }
    p.n = v[0];
    p.c_in = v[1];
    p.in = {v[2], v[3], v[4]};
  }
  int64_t c_in = p.c_in;
  CONVT3D_RETURN_IF_ERROR(ReadInt(obj, "in_channels", where, false, &c_in));
  if (c_in != p.c_in) {
    return where.Error("in_channels",
                       StrCat("is ", c_in, " but input[1] (the input's channels) is ", p.c_in,
                              "; they must be equal"));
  }
  CONVT3D_RETURN_IF_ERROR(ReadInt(obj, "out_channels", where, true, &p.c_out));
  // nn.ConvTranspose3d calls it kernel_size; the problem files say kernel. Take either.
  const char* kernel_field = obj.contains("kernel") ? "kernel" : "kernel_size";
  CONVT3D_RETURN_IF_ERROR(ReadTriple(obj, kernel_field, where, true, &p.kernel));
  CONVT3D_RETURN_IF_ERROR(ReadTriple(obj, "stride", where, false, &p.stride));
  CONVT3D_RETURN_IF_ERROR(ReadTriple(obj, "padding", where, false, &p.padding));
  CONVT3D_RETURN_IF_ERROR(ReadTriple(obj, "output_padding", where, false, &p.output_padding));
  CONVT3D_RETURN_IF_ERROR(ReadTriple(obj, "dilation", where, false, &p.dilation));
  CONVT3D_RETURN_IF_ERROR(ReadInt(obj, "groups", where, false, &p.groups));

  if (auto it = obj.find("bias"); it != obj.end()) {
    int64_t b = 0;
    if (it->is_boolean()) {
      p.bias = it->get<bool>();
    } else if (ToInt(*it, &b) && (b == 0 || b == 1)) {
      p.bias = b == 1;
    } else {
      return where.Error("bias", StrCat("must be true or false, got ", Shown(*it)));
    }
  }
  if (auto it = obj.find("dtype"); it != obj.end()) {
    if (!it->is_string()) {
      return where.Error("dtype",
                         StrCat("must be \"f32\", \"f64\", \"bf16\" or \"f16\", got ", Shown(*it)));
    }
    auto dt = ParseDType(it->get<std::string>());
    if (!dt.ok())
      return where.Error("dtype",
                         StrCat("must be \"f32\", \"f64\", \"bf16\" or \"f16\", got ", Shown(*it)));
    p.dtype = *dt;
  }
  if (auto it = obj.find("precision"); it != obj.end()) {
    auto pr = it->is_string() ? ParsePrecision(it->get<std::string>())
                              : StatusOr<Precision>(InvalidArgument("not a string"));
    if (!pr.ok())
      return where.Error("precision",
                         StrCat("must be \"fp32\", \"fp32x3\" or \"tf32\", got ", Shown(*it)));
    p.precision = *pr;
  }
  if (auto it = obj.find("gflop"); it != obj.end()) {
    if (!it->is_number()) return where.Error("gflop", StrCat("must be a number, got ", Shown(*it)));
    np.gflop = it->get<double>();
  }
  if (auto it = obj.find("cudnn_h200_ms"); it != obj.end()) {
    if (!it->is_object()) {
      return where.Error("cudnn_h200_ms", StrCat("must be an object, got ", Shown(*it)));
    }
    for (auto m = it->begin(); m != it->end(); ++m) {
      if (!m->is_number()) {
        return where.Error(StrCat("cudnn_h200_ms.", Cut(m.key(), kMaxName)),
                           StrCat("must be a number, got ", Shown(*m)));
      }
      np.cudnn_ms[m.key()] = m->get<double>();
    }
  }
  return np;
}

}  // namespace

StatusOr<std::vector<NamedProblem>> ParseProblems(const std::string& json_text,
                                                  const std::string& origin) {
  if (const size_t at = TooDeepAt(json_text); at != std::string::npos) {
    return InvalidArgument(StrCat(origin, ": arrays and objects nested deeper than ", kMaxDepth,
                                  " levels (at byte ", at, ")"));
  }
  Json doc;
  try {
    // Caught here so that the reason and byte position reach the message; nothing escapes. The
    // parser quotes the token it stopped at, which may be long: the message is cut.
    doc = Json::parse(json_text);
  } catch (const Json::exception& e) {
    return InvalidArgument(StrCat(origin, ": not valid JSON: ", Cut(e.what(), kMaxParserMessage)));
  }
  const Json* list = &doc;
  if (doc.is_object()) {
    auto it = doc.find("problems");
    if (it == doc.end()) {
      return InvalidArgument(StrCat(origin, ": expected a \"problems\" array or a bare array"));
    }
    list = &*it;
  }
  if (!list->is_array()) {
    return InvalidArgument(StrCat(origin, ": \"problems\" must be an array, got ", Shown(*list)));
  }
  std::vector<NamedProblem> out;
  out.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    CONVT3D_ASSIGN_OR_RETURN(NamedProblem np, ParseOne((*list)[i], origin, i));
    out.push_back(std::move(np));
  }
  if (out.empty()) return InvalidArgument(StrCat(origin, ": the problem list is empty"));
  return out;
}

StatusOr<std::vector<NamedProblem>> LoadProblems(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound(StrCat(path, ": cannot open problem list (", std::strerror(errno), ")"));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Internal(StrCat(path, ": read error"));
  return ParseProblems(ss.str(), path);
}

std::string ToJson(const NamedProblem& np, int indent) {
  const Problem& p = np.problem;
  const Dim3 o = p.OutSize();
  nlohmann::ordered_json j;
  j["name"] = np.name;
  j["signature"] = p.Signature();
  j["input"] = {p.n, p.c_in, p.in[0], p.in[1], p.in[2]};
  j["in_channels"] = p.c_in;
  j["out_channels"] = p.c_out;
  j["kernel"] = p.kernel;
  j["stride"] = p.stride;
  j["padding"] = p.padding;
  j["output_padding"] = p.output_padding;
  j["dilation"] = p.dilation;
  j["groups"] = p.groups;
  j["bias"] = p.bias;
  j["dtype"] = DTypeName(p.dtype);
  if (p.precision != Precision::kFp32) j["precision"] = PrecisionName(p.precision);
  j["output"] = {p.n, p.c_out, o[0], o[1], o[2]};
  j["gflop"] = np.gflop > 0 ? np.gflop : p.Flops() / 1e9;
  if (!np.cudnn_ms.empty()) j["cudnn_h200_ms"] = np.cudnn_ms;
  return j.dump(indent);
}

IntText ParseDecimal(const std::string& text, int64_t* out) {
  const size_t b = text.find_first_not_of(" \t");
  if (b == std::string::npos) return IntText::kNotDecimal;
  const size_t e = text.find_last_not_of(" \t") + 1;
  size_t i = b;
  const bool negative = text[i] == '-';
  if (negative) ++i;
  if (i == e) return IntText::kNotDecimal;
  // Accumulate as a negative number: its range reaches INT64_MIN.
  int64_t v = 0;
  bool overflow = false;
  for (; i < e; ++i) {
    const char c = text[i];
    if (c < '0' || c > '9') return IntText::kNotDecimal;
    const int d = c - '0';
    if (v < (std::numeric_limits<int64_t>::min() + d) / 10) overflow = true;
    if (!overflow) v = v * 10 - d;
  }
  if (overflow || (!negative && v == std::numeric_limits<int64_t>::min()))
    return IntText::kOutOfRange;
  *out = negative ? v : -v;
  return IntText::kOk;
}

std::vector<int64_t> ParseIntList(const std::string& text, const char* field, Status* status) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? comma : comma - start);
    int64_t v = 0;
    switch (ParseDecimal(part, &v)) {
      case IntText::kOk:
        break;
      case IntText::kNotDecimal:
        *status = InvalidArgument(StrCat(field, "=\"", Cut(text, kMaxShown), "\": \"",
                                         Cut(part, kMaxShown),
                                         "\" is not a decimal integer (expected e.g. 1,2,3)"));
        return {};
      case IntText::kOutOfRange:
        *status = InvalidArgument(StrCat(field, "=\"", Cut(text, kMaxShown),
                                         "\": ", Cut(part, kMaxShown), " is out of range (at most ",
                                         std::numeric_limits<int64_t>::max(), ")"));
        return {};
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Dim3 ParseTriple(const std::string& text, const char* field, Status* status) {
  Status st;
  const std::vector<int64_t> v = ParseIntList(text, field, &st);
  if (st.ok() && v.size() == 1) return {v[0], v[0], v[0]};
  if (st.ok() && v.size() == 3) return {v[0], v[1], v[2]};
  *status = st.ok() ? InvalidArgument(StrCat(field, "=\"", Cut(text, kMaxShown),
                                             "\": expected one integer (same in D, H, W) or "
                                             "three, as D,H,W"))
                    : st;
  return {0, 0, 0};
}

StatusOr<DType> ParseDType(const std::string& text) {
  if (text == "f32" || text == "float32" || text == "float") return DType::kF32;
  if (text == "f64" || text == "float64" || text == "double") return DType::kF64;
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  if (text == "f16" || text == "fp16" || text == "float16" || text == "half") return DType::kF16;
  return InvalidArgument(
      StrCat("dtype=\"", Cut(text, kMaxShown), "\": expected f32, f64, bf16 or f16 (also fp16)"));
}

StatusOr<Precision> ParsePrecision(const std::string& text) {
  for (Precision p : {Precision::kFp32, Precision::kFp32x3, Precision::kTf32})
    if (text == PrecisionName(p)) return p;
  return InvalidArgument(
      StrCat("precision=\"", Cut(text, kMaxShown), "\": expected fp32, fp32x3 or tf32"));
}

}  // namespace convt3d::io
