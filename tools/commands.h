// commands.h: the convt3d CLI's subcommands, one cmd_<name>.cpp each; main.cpp registers them.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace convt3d::cli {

// A subcommand added to the CLI: `run` does its work once parsing selected `app`, and returns
// the exit code.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command AddTune(CLI::App* cli);   // tune one shape or a problem list (compile-only without a GPU)
Command AddBench(CLI::App* cli);  // time against cuDNN
Command AddCache(CLI::App* cli);  // path, list, show, export, import, prune, check
Command AddInfo(CLI::App* cli);   // versions, GPU, code hash, cache file

}  // namespace convt3d::cli
