// cli_util.cpp: the CLI's shared helpers (see cli_util.h).
#include "tools/cli_util.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string_view>

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

namespace {
const bool kStderrIsTerminal = isatty(STDERR_FILENO) == 1;
bool progress_shown = false;  // a progress line is on the terminal, without its newline
}  // namespace

void ShowProgress(const std::string& text, bool plain) {
  if (kStderrIsTerminal) {
    std::cerr << "\r\x1b[K" << Printable(text, 200) << std::flush;  // erase the line, rewrite
    progress_shown = true;
  } else if (plain) {
    std::cerr << Printable(text, 200) << std::endl;
  }
}

void EndProgress() {
  if (!progress_shown) return;
  std::cerr << "\r\x1b[K" << std::flush;
  progress_shown = false;
}

void LogToStderr(LogLevel level, const std::string& line) {
  if (level == LogLevel::kInfo && (line.rfind("  compiled ", 0) == 0 ||
                                   line.rfind("  checked ", 0) == 0 ||
                                   line.rfind("  timed ", 0) == 0)) {
    ShowProgress("convt3d: " + line, /*plain=*/true);
    return;
  }
  EndProgress();
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

// ---- Integer flags ----------------------------------------------------------------------------

std::string ParseFlagInt(const std::string& flag, const std::string& text, int64_t lo, int64_t hi,
                         int64_t* out) {
  const std::string shown = flag + "=" + Printable(text, 40);
  int64_t v = 0;
  switch (io::ParseDecimal(text, &v)) {
    case io::IntText::kOk:
      break;
    case io::IntText::kNotDecimal:
      return shown + ": expected a decimal integer";
    case io::IntText::kOutOfRange:
      return StrCat(shown, ": out of range (", lo == 1 ? "a positive integer" : "an integer",
                    " at most ", hi, ")");
  }
  if (v < lo) {
    if (lo == 1) return shown + ": must be positive";
    return StrCat(shown, ": must be at least ", lo);
  }
  if (v > hi) return StrCat(shown, ": must be at most ", hi);
  *out = v;
  return "";
}

CLI::Option* IntFlags::Add(CLI::App* app, const std::string& name, int64_t* target,
                           const std::string& help, int64_t lo, int64_t hi) {
  return AddFlag(app, name, help, lo, hi, std::to_string(*target),
                 [target](int64_t v) { *target = v; });
}

CLI::Option* IntFlags::Add(CLI::App* app, const std::string& name, int* target,
                           const std::string& help, int64_t lo, int64_t hi) {
  return AddFlag(app, name, help, lo, std::min<int64_t>(hi, INT_MAX), std::to_string(*target),
                 [target](int64_t v) { *target = static_cast<int>(v); });
}

CLI::Option* IntFlags::AddFlag(CLI::App* app, const std::string& name, const std::string& help,
                               int64_t lo, int64_t hi, const std::string& default_value,
                               std::function<void(int64_t)> set) {
  Flag f{nullptr, name, std::make_unique<std::string>(), std::move(set), lo, hi};
  f.option = app->add_option(name, *f.text, help)->type_name("INT")->default_str(default_value);
  flags_.push_back(std::move(f));
  return flags_.back().option;
}

std::vector<std::string> IntFlags::Parse() const {
  std::vector<std::string> errors;
  for (const Flag& f : flags_) {
    if (f.option->count() == 0) continue;
    int64_t v = 0;
    std::string error = ParseFlagInt(f.name, *f.text, f.lo, f.hi, &v);
    if (error.empty()) {
      f.set(v);
    } else {
      errors.push_back(std::move(error));
    }
  }
  return errors;
}

int ReportUsageErrors(const std::vector<std::string>& errors) {
  for (const std::string& e : errors) Error(e);
  return errors.empty() ? kExitOk : kExitUsage;
}

// ---- Problems ---------------------------------------------------------------------------------

void AddShapeFlags(CLI::App* app, ShapeFlags* f) {
  f->input_opt = app->add_option("--input", f->input, "Input shape N,C,D,H,W (e.g. 8,32,16,32,32)");
  app->add_option("--in-channels", f->in_channels, "C_in; optional, must equal the C of --input")
      ->type_name("INT");
  f->out_channels_opt =
      app->add_option("--out-channels", f->out_channels, "C_out")->type_name("INT");
  app->add_option("--kernel-size", f->kernel_size, "k or kD,kH,kW (e.g. 3 or 3,5,7)");
  app->add_option("--stride", f->stride, "s or sD,sH,sW")->capture_default_str();
  app->add_option("--padding", f->padding, "p or pD,pH,pW")->capture_default_str();
  app->add_option("--output-padding", f->output_padding, "op or opD,opH,opW")
      ->capture_default_str();
  app->add_option("--dilation", f->dilation, "d or dD,dH,dW")->capture_default_str();
  app->add_option("--groups", f->groups, "Groups (divides C_in and C_out)")
      ->type_name("INT")
      ->capture_default_str();
  app->add_flag("--bias", f->bias, "The layer has a bias");
  // Checked by ProblemFromFlags, with the other shape flags.
  app->add_option("--dtype", f->dtype, "Element type: f32, f64, bf16 or f16")
      ->capture_default_str();
  app->add_option("--name", f->name, "Label for this shape in tables and JSON")
      ->capture_default_str();
}

StatusOr<io::NamedProblem> ProblemFromFlags(const ShapeFlags& f) {
  std::vector<std::string> errors;
  io::NamedProblem np;
  np.name = f.name;
  Problem& p = np.problem;
  if (f.input.empty()) {
    errors.push_back("--input N,C,D,H,W is required");
  } else {
    Status st;
    const std::vector<int64_t> in = io::ParseIntList(f.input, "--input", &st);
    if (!st.ok()) {
      errors.push_back(st.message());
    } else if (in.size() != 5) {
      errors.push_back("--input=\"" + Printable(f.input, 40) + "\": expected 5 integers N,C,D,H,W");
    } else {
      p.n = in[0];
      p.c_in = in[1];
      p.in = {in[2], in[3], in[4]};
    }
  }
  auto number = [&](const char* flag, const std::string& text, int64_t hi, int64_t* out) {
    const std::string e = ParseFlagInt(flag, text, 1, hi, out);
    if (!e.empty()) errors.push_back(e);
    return e.empty();
  };
  if (!f.in_channels.empty()) {
    int64_t c = 0;
    if (number("--in-channels", f.in_channels, ProblemLimits::kChannels, &c) && c != p.c_in &&
        !f.input.empty() && errors.empty()) {
      errors.push_back(StrCat("--in-channels=", c, " differs from C=", p.c_in, " of --input"));
    }
  }
  if (f.out_channels_opt != nullptr && f.out_channels_opt->count() == 0) {
    errors.push_back("--out-channels is required");
  } else {
    number("--out-channels", f.out_channels, ProblemLimits::kChannels, &p.c_out);
  }
  if (f.kernel_size.empty()) errors.push_back("--kernel-size is required");
  auto triple = [&](const std::string& text, const char* flag, Dim3* out) {
    Status st;
    const Dim3 v = io::ParseTriple(text, flag, &st);
    if (st.ok()) {
      *out = v;
    } else {
      errors.push_back(st.message());
    }
  };
  if (!f.kernel_size.empty()) triple(f.kernel_size, "--kernel-size", &p.kernel);
  triple(f.stride, "--stride", &p.stride);
  triple(f.padding, "--padding", &p.padding);
  triple(f.output_padding, "--output-padding", &p.output_padding);
  triple(f.dilation, "--dilation", &p.dilation);
  number("--groups", f.groups, ProblemLimits::kChannels, &p.groups);
  p.bias = f.bias;
  StatusOr<DType> dtype = io::ParseDType(f.dtype);
  if (dtype.ok()) {
    p.dtype = *dtype;
  } else {
    errors.push_back("--" + dtype.status().message());
  }
  if (!errors.empty()) {
    std::string all;
    for (const std::string& e : errors) all += (all.empty() ? "" : "\n") + e;
    return InvalidArgument(all);
  }
  return np;
}

StatusOr<std::vector<io::NamedProblem>> OneShape(const ShapeFlags& f) {
  CONVT3D_ASSIGN_OR_RETURN(io::NamedProblem np, ProblemFromFlags(f));
  np.name = DisplayName(np.name);
  return std::vector<io::NamedProblem>{std::move(np)};
}

std::string DisplayName(const std::string& name) { return Printable(name, 100); }

std::string PathComponent(const std::string& name) {
  std::string out;
  for (char ch : name.substr(0, 100)) {
    const bool ok = std::isalnum(static_cast<unsigned char>(ch)) ||
                    std::string_view("._+-=@").find(ch) != std::string_view::npos;
    out += ok ? ch : '_';
  }
  if (out.find_first_not_of('.') == std::string::npos) out = "_" + out;  // "", ".", "..", ...
  return out;
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
    if (!found) return InvalidArgument("--only: no problem named \"" + Printable(n, 100) + "\"");
  }
  std::vector<io::NamedProblem> kept;
  for (auto& p : *problems)
    if (std::find(names.begin(), names.end(), p.name) != names.end()) kept.push_back(std::move(p));
  *problems = std::move(kept);
  return Status();
}

}  // namespace

std::vector<std::string> ProblemDirs() {
  std::vector<std::string> dirs;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back((exe.parent_path() / CONVT3D_PROBLEMS_FROM_BIN).lexically_normal());
  dirs.push_back(CONVT3D_SOURCE_PROBLEMS_DIR);
  return dirs;
}

StatusOr<std::string> ProblemListPath(const std::string& entry) {
  const bool json = entry.size() >= 5 && entry.compare(entry.size() - 5, 5, ".json") == 0;
  if (entry.empty() || json || entry.find('/') != std::string::npos) return entry;
  std::string file = entry;
  std::replace(file.begin(), file.end(), '-', '_');
  file += ".json";
  std::string searched;
  for (const std::string& dir : ProblemDirs()) {
    const std::string path = dir + "/" + file;
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return path;
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  return InvalidArgument("--problems=" + Printable(entry, 100) + ": no list " + file + " in " +
                         searched + " (names: kernelbench-l1, models, bench; or give a path)");
}

StatusOr<std::vector<io::NamedProblem>> LoadList(const std::string& entry,
                                                 const std::string& only) {
  CONVT3D_ASSIGN_OR_RETURN(const std::string file, ProblemListPath(entry));
  CONVT3D_ASSIGN_OR_RETURN(std::vector<io::NamedProblem> problems, io::LoadProblems(file));
  CONVT3D_RETURN_IF_ERROR(FilterByName(only, &problems));
  for (io::NamedProblem& np : problems) np.name = DisplayName(np.name);
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

bool WriteOutput(const std::string& path, const std::string& text) {
  if (path != "-") return WriteFile(path, text);
  std::cout << text << std::flush;
  return static_cast<bool>(std::cout);
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
