// cli_util.cpp: the CLI's shared helpers (see cli_util.h).
#include "tools/cli_util.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

#include "base/status.h"

namespace convt3d::cli {

void Error(const std::string& message) {
  // Long enough for any message of ours; a value quoted from a file is cut where it is quoted.
  constexpr size_t kMaxLine = 4000;
  for (size_t start = 0;;) {
    const size_t end = message.find('\n', start);
    std::cerr << "convt3d: " << Printable(message.substr(start, end - start), kMaxLine) << "\n";
    if (end == std::string::npos) break;
    start = end + 1;
  }
  std::cerr.flush();
}

void Warn(const std::string& message) {
  const std::string prefix = "convt3d: ";
  Error("warning: " + (message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message));
}

void LogToStderr(LogLevel level, const std::string& line) {
  if (level == LogLevel::kWarning) {
    Warn(line);
  } else {
    Error(line);
  }
}

int ExitCodeFor(const Status& s) {
  return s.code() == Code::kInvalidArgument ? kExitUsage : kExitFailure;
}

std::string VersionString(int v) {
  if (v <= 0) return "-";
  return StrFormat("%d.%d", v / 1000, (v % 1000) / 10);
}

std::string Ms(double ms) { return ms >= 0 ? StrFormat("%.3f", ms) : "-"; }

std::string RelErr(double e) { return e >= 0 ? StrFormat("%.1e", e) : "-"; }

std::string OneLine(const std::string& s, size_t width) {
  std::string line = s.substr(0, s.find('\n'));
  if (line.size() > width) line = line.substr(0, width - 3) + "...";
  return line;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

namespace {

// The length of the well-formed UTF-8 sequence (2 to 4 bytes) at s[i] and its code point, or 0.
size_t Utf8At(const std::string& s, size_t i, uint32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t len;
  uint32_t v, min;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2, v = c & 0x1f, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3, v = c & 0x0f, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (byte(i + k) & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;  // overlong, surrogate
  *cp = v;
  return len;
}

}  // namespace

std::string Printable(const std::string& s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t len = c >= 0x80 ? Utf8At(s, i, &cp) : 0;
    if (len == 0) {
      out += StrFormat("\\x%02x", c);  // a control character, or a byte that is not UTF-8
      ++i;
    } else if (cp < 0xa0) {
      out += StrFormat("\\u%04x", static_cast<unsigned>(cp));  // C1 controls (e.g. CSI)
      i += len;
    } else {
      out.append(s, i, len);
      i += len;
    }
  }
  return out;
}

// ---- Problems ---------------------------------------------------------------------------------

void AddShapeFlags(CLI::App* app, ShapeFlags* f) {
  f->input_opt = app->add_option("--input", f->input, "Input shape N,C,D,H,W (e.g. 8,32,16,32,32)");
  app->add_option("--in-channels", f->in_channels, "C_in; optional, must equal the C of --input");
  app->add_option("--out-channels", f->out_channels, "C_out");
  app->add_option("--kernel-size", f->kernel_size, "k or kD,kH,kW (e.g. 3 or 3,5,7)");
  app->add_option("--stride", f->stride, "s or sD,sH,sW")->capture_default_str();
  app->add_option("--padding", f->padding, "p or pD,pH,pW")->capture_default_str();
  app->add_option("--output-padding", f->output_padding, "op or opD,opH,opW")
      ->capture_default_str();
  app->add_option("--dilation", f->dilation, "d or dD,dH,dW")->capture_default_str();
  app->add_option("--groups", f->groups, "Groups (divides C_in and C_out)")->capture_default_str();
  app->add_flag("--bias", f->bias, "The layer has a bias");
  app->add_option("--dtype", f->dtype, "Element type")
      ->check(CLI::IsMember({"f32", "f64", "bf16", "f16"}))
      ->capture_default_str();
  app->add_option("--name", f->name, "Label for this shape in tables and JSON")
      ->capture_default_str();
}

StatusOr<io::NamedProblem> ProblemFromFlags(const ShapeFlags& f) {
  if (f.input.empty()) return InvalidArgument("--input N,C,D,H,W is required");
  if (f.out_channels == 0) return InvalidArgument("--out-channels is required");
  if (f.kernel_size.empty()) return InvalidArgument("--kernel-size is required");
  Status st;
  io::NamedProblem np;
  np.name = f.name;
  Problem& p = np.problem;
  const std::vector<int64_t> in = io::ParseIntList(f.input, "--input", &st);
  if (!st.ok()) return st;
  if (in.size() != 5)
    return InvalidArgument("--input=\"" + f.input + "\": expected 5 integers N,C,D,H,W");
  p.n = in[0];
  p.c_in = in[1];
  p.in = {in[2], in[3], in[4]};
  if (f.in_channels != 0 && f.in_channels != p.c_in) {
    return InvalidArgument(
        StrCat("--in-channels=", f.in_channels, " differs from C=", p.c_in, " of --input"));
  }
  p.c_out = f.out_channels;
  p.kernel = io::ParseTriple(f.kernel_size, "--kernel-size", &st);
  p.stride = io::ParseTriple(f.stride, "--stride", &st);
  p.padding = io::ParseTriple(f.padding, "--padding", &st);
  p.output_padding = io::ParseTriple(f.output_padding, "--output-padding", &st);
  p.dilation = io::ParseTriple(f.dilation, "--dilation", &st);
  if (!st.ok()) return st;
  p.groups = f.groups;
  p.bias = f.bias;
  CONVT3D_ASSIGN_OR_RETURN(p.dtype, io::ParseDType(f.dtype));
  return np;
}

StatusOr<std::vector<io::NamedProblem>> OneShape(const ShapeFlags& f) {
  CONVT3D_ASSIGN_OR_RETURN(io::NamedProblem np, ProblemFromFlags(f));
  return std::vector<io::NamedProblem>{std::move(np)};
}

namespace {

// Keeps only the problems named in a comma-separated list, in the file's order.
Status FilterByName(const std::string& only, std::vector<io::NamedProblem>* problems) {
  if (only.empty()) return Status();
  std::vector<std::string> names;
  std::stringstream ss(only);
  for (std::string n; std::getline(ss, n, ',');)
    if (!n.empty()) names.push_back(n);
  for (const auto& n : names) {
    const bool found = std::any_of(problems->begin(), problems->end(),
                                   [&](const io::NamedProblem& p) { return p.name == n; });
    if (!found) return InvalidArgument("--only: no problem named \"" + n + "\"");
  }
  std::vector<io::NamedProblem> kept;
  for (auto& p : *problems)
    if (std::find(names.begin(), names.end(), p.name) != names.end()) kept.push_back(std::move(p));
  *problems = std::move(kept);
  return Status();
}

}  // namespace

StatusOr<std::vector<io::NamedProblem>> LoadList(const std::string& file, const std::string& only) {
  CONVT3D_ASSIGN_OR_RETURN(std::vector<io::NamedProblem> problems, io::LoadProblems(file));
  CONVT3D_RETURN_IF_ERROR(FilterByName(only, &problems));
  return problems;
}

std::vector<io::NamedProblem> KeepValid(std::vector<io::NamedProblem> problems, bool* any_invalid) {
  std::vector<io::NamedProblem> valid;
  for (auto& np : problems) {
    Status st = Validate(np.problem);
    if (st.ok()) {
      valid.push_back(std::move(np));
    } else {
      Error("invalid problem " + np.name + ": " + st.message() + " (skipped)");
      *any_invalid = true;
    }
  }
  return valid;
}

OJson ProblemJson(const io::NamedProblem& np) {
  return OJson::parse(io::ToJson(np), nullptr, /*allow_exceptions=*/false);
}

// ---- Files and the cache ----------------------------------------------------------------------

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  return static_cast<bool>(f);
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string ResolveCachePath(const std::string& flag) {
  return flag.empty() ? cache::Store::DefaultPath() : flag;
}

std::unique_ptr<cache::Store> OpenStore(const std::string& path) {
  std::unique_ptr<cache::Store> store = cache::Store::Open(path);
  if (!store->warning().empty()) Warn(store->warning());
  return store;
}

std::unique_ptr<cache::Store> OpenStoreReadOnly(const std::string& path, bool quiet_damage) {
  std::unique_ptr<cache::Store> store = cache::Store::OpenReadOnly(path);
  if (!store->warning().empty() && !(quiet_damage && !store->damage().empty()))
    Warn(store->warning());
  return store;
}

}  // namespace convt3d::cli
