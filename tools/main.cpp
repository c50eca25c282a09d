// main.cpp: the convt3d CLI: tune, bench against cuDNN, inspect the cache, describe the machine.
// Each subcommand lives in its own cmd_<name>.cpp; the exit codes and the one-line error format
// are in cli_util.h.
#include <CLI/CLI.hpp>
#include <exception>
#include <string>
#include <vector>

#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/fanout.h"

namespace convt3d::cli {
namespace {

int Main(int argc, char** argv) {
  SetCommandLine(argc, argv);  // tune --devices re-executes it per GPU
  CLI::App app{
      "convt3d: PyTorch nn.ConvTranspose3d forward with NVRTC-compiled, autotuned CUDA "
      "kernels cached in SQLite",
      "convt3d"};
  app.set_version_flag("--version", std::string(Version()));
  app.require_subcommand(1);
  const std::vector<Command> commands = {AddTune(&app), AddBench(&app), AddCache(&app),
                                         AddInfo(&app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::string where = "convt3d";
    const CLI::App* deepest = &app;
    while (!deepest->get_subcommands().empty()) {
      deepest = deepest->get_subcommands().front();
      where += " " + deepest->get_name();
    }
    // A word where a subcommand was required: CLI11 says only "A subcommand is required".
    const std::vector<const CLI::App*> subs =
        deepest->get_subcommands([](const CLI::App*) { return true; });
    const std::vector<std::string> rest = deepest->remaining();
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && !subs.empty() && !rest.empty()) {
      std::string names;
      for (const CLI::App* s : subs) names += (names.empty() ? "" : ", ") + s->get_name();
      Error("unknown command '" + rest.front() + "' for " + where + " (expected " + names +
            "; see '" + where + " --help')");
      return kExitUsage;
    }
    Error(std::string(e.what()) + " (see '" + where + " --help')");
    return kExitUsage;
  }
  for (const Command& c : commands)
    if (*c.app) return c.run();
  Error("no command given (see 'convt3d --help')");
  return kExitUsage;
}

}  // namespace
}  // namespace convt3d::cli

int main(int argc, char** argv) {
  // The library never throws, but CLI11, iostreams and nlohmann can; none may escape main.
  try {
    return convt3d::cli::Main(argc, argv);
  } catch (const std::exception& e) {
    convt3d::cli::Error(std::string("internal error: ") + e.what());
  } catch (...) {
    convt3d::cli::Error("internal error: unknown exception");
  }
  return convt3d::cli::kExitFailure;
}
