// cli_util.h: what the convt3d CLI's subcommands share: exit codes, messages, number formats,
// shape flags, problem lists and files.
//
// Exit codes: 0 ok, 1 a failure in the work, 2 a usage error / invalid argument / GPU required
// but absent. Every error is one line on stderr beginning "convt3d: ".
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/table.h"
#include "cache/cache.h"
#include "convt3d/convt3d.h"
#include "src/problem_io.h"

namespace convt3d::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

using OJson = nlohmann::ordered_json;

// ---- Messages ---------------------------------------------------------------------------------
// "convt3d: <message>" on stderr; a message of several lines ('\n') gives one such line each.
// Each line goes through Printable(), so text from a file or a flag cannot drive the terminal.
void Error(const std::string& message);
// "convt3d: warning: <message>"; a "convt3d: " the message already carries is not repeated.
void Warn(const std::string& message);
// The engine's progress lines and warnings (Options::log), in the format above; its
// "  compiled i/N" lines go to the progress line (below).
void LogToStderr(LogLevel level, const std::string& line);

// ---- Progress ---------------------------------------------------------------------------------
// Progress inside a problem on stderr. On a terminal, one line rewritten in place; otherwise each
// update meant to be kept (`plain`) is a line of its own.
void ShowProgress(const std::string& text, bool plain);
// Ends the line ShowProgress() left on a terminal, so that what follows starts a fresh line.
void EndProgress();
// A bad argument is the user's to fix (2); anything else went wrong in the work itself (1).
int ExitCodeFor(const Status& s);

// ---- Numbers ----------------------------------------------------------------------------------
// Versions are reported as major*1000 + minor*10 by both the driver and NVRTC: "13.0"; "-".
std::string VersionString(int v);
std::string Ms(double ms);     // "1.234", "-" when negative
std::string RelErr(double e);  // "1.2e-07", "-" when negative
// First line of a possibly multi-line message (NVRTC logs), cut to `width` characters.
std::string OneLine(const std::string& s, size_t width);
double Seconds(std::chrono::steady_clock::time_point since);
// Text from a file, a flag or the cache made safe for a terminal: control characters (C0, DEL,
// C1) and bytes that are not UTF-8 become \xNN (\u0085 for a C1 code point); the result is cut
// to about `max_bytes` bytes ("..." appended).
std::string Printable(const std::string& s, size_t max_bytes = 200);

// ---- Integer flags ----------------------------------------------------------------------------
// One rule for every integer on the command line, flags and the shape flags' lists alike
// (io::ParseDecimal): decimal digits with an optional '-', leading zeros decimal ("010" is 10),
// "0x10", "1e3", "1.0" and "+1" refused.
//
// "" when `text` is such an integer within [lo, hi] (then stored in *out), else the one-line
// error naming the flag and the limit, e.g. "--repeats=0: must be at least 1".
std::string ParseFlagInt(const std::string& flag, const std::string& text, int64_t lo, int64_t hi,
                         int64_t* out);

// A subcommand's integer flags: CLI11 keeps each value's text, and Parse() converts them all
// after parsing, so that every bad value is reported at once (CLI11 would stop at the first).
class IntFlags {
 public:
  IntFlags() = default;
  IntFlags(const IntFlags&) = delete;
  IntFlags& operator=(const IntFlags&) = delete;
  // Adds --name, whose value goes to *target (whose current value is the default shown).
  CLI::Option* Add(CLI::App* app, const std::string& name, int64_t* target, const std::string& help,
                   int64_t lo, int64_t hi);
  CLI::Option* Add(CLI::App* app, const std::string& name, int* target, const std::string& help,
                   int64_t lo, int64_t hi);
  // Converts the flags given on the command line: one error line per bad value.
  std::vector<std::string> Parse() const;

 private:
  CLI::Option* AddFlag(CLI::App* app, const std::string& name, const std::string& help, int64_t lo,
                       int64_t hi, const std::string& default_value,
                       std::function<void(int64_t)> set);
  struct Flag {
    CLI::Option* option;
    std::string name;
    std::unique_ptr<std::string> text;
    std::function<void(int64_t)> set;
    int64_t lo, hi;
  };
  std::vector<Flag> flags_;
};

// Prints each error (one line each) and returns kExitUsage, or kExitOk when there are none.
int ReportUsageErrors(const std::vector<std::string>& errors);

// ---- Problems ---------------------------------------------------------------------------------
// The shape flags mirror nn.ConvTranspose3d's constructor arguments plus the input shape. The
// integers stay text until ProblemFromFlags() parses them, so that it reports every bad one.
struct ShapeFlags {
  std::string input, kernel_size, stride = "1", padding = "0", output_padding = "0", dilation = "1";
  std::string dtype = "f32", name = "cli";
  std::string in_channels, out_channels, groups = "1";
  bool bias = false;
  CLI::Option* input_opt = nullptr;
  CLI::Option* out_channels_opt = nullptr;
};
void AddShapeFlags(CLI::App* app, ShapeFlags* f);
// The problem of the shape flags; every bad or missing flag is one line of the message.
StatusOr<io::NamedProblem> ProblemFromFlags(const ShapeFlags& f);
// The one shape given by --input and friends, as a one-problem list (its name through
// DisplayName()).
StatusOr<std::vector<io::NamedProblem>> OneShape(const ShapeFlags& f);
// Where a named problem list is looked up, in order: the installed data folder beside the
// executable (<prefix>/bin/convt3d: <prefix>/share/convt3d/problems), then the source tree's
// problems/ (the CLI run from its build folder).
std::vector<std::string> ProblemDirs();
// A --problems entry as a file: a bare name without '/' or ".json" ("kernelbench-l1", where '-'
// reads as '_'; "models") is <name>.json in the first of ProblemDirs() that has it; anything else
// is a path as given, relative to the current folder. kInvalidArgument naming the folders
// searched when none has the name.
StatusOr<std::string> ProblemListPath(const std::string& entry);
// The problems of a list (ProblemListPath), narrowed to --only's comma-separated names (in the
// file's order), their names then passed through DisplayName().
StatusOr<std::vector<io::NamedProblem>> LoadList(const std::string& entry, const std::string& only);
// Reports and drops invalid problems (setting *any_invalid), so the rest of a list still runs.
std::vector<io::NamedProblem> KeepValid(std::vector<io::NamedProblem> problems, bool* any_invalid);
// A problem's name as tables, messages and JSON show it: Printable(), at most 100 bytes.
std::string DisplayName(const std::string& name);
// A name as one path component under a folder the user gave (--emit): only letters, digits and
// ._+-=@, others as '_'; never "", "." or ".." (those get a leading '_'); at most 100 bytes.
std::string PathComponent(const std::string& name);
OJson ProblemJson(const io::NamedProblem& np);

// ---- Files and the cache ----------------------------------------------------------------------
bool WriteFile(const std::string& path, const std::string& text);
// WriteFile, or standard output when `path` is "-".
bool WriteOutput(const std::string& path, const std::string& text);
std::optional<std::string> ReadFile(const std::string& path);
// --cache, else the default path.
std::string ResolveCachePath(const std::string& flag);
// Opens the cache to write (import, prune), printing its warning (then it is not persistent or
// read-only: the write that follows says why it refuses).
std::unique_ptr<cache::Store> OpenStore(const std::string& path);
// Opens the cache to read (list, show, export, check, info): no write lock, no migration, and no
// file or folder is created (a missing file reads as empty, Store::exists() false). Prints the
// store's warning unless `quiet_damage` and the warning is only the damage found at open.
std::unique_ptr<cache::Store> OpenStoreReadOnly(const std::string& path, bool quiet_damage = false);

}  // namespace convt3d::cli
