// cmd_info.cpp: `convt3d info`: version, driver, NVRTC, GPU, code hash and cache files.
#include <iostream>
#include <memory>
#include <string>

#include "base/status.h"
#include "cache/layers.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace convt3d::cli {
namespace {

struct InfoArgs {
  std::string cache;
  int device = 0;
  IntFlags ints;  // --device
};

int RunInfo(const InfoArgs& a) {
  if (const int rc = ReportUsageErrors(a.ints.Parse()); rc != kExitOk) return rc;
  const Environment env = DescribeEnvironment(a.device);
  std::cout << "convt3d    " << Version() << "\n";
  if (env.driver_error.empty()) {
    std::cout << "driver     " << VersionString(env.driver_version) << " (" << env.driver_version
              << ")\n"
              << "GPU        " << env.gpu_name << " (" << env.arch << "), device " << a.device
              << "\n";
  } else {
    std::cout << "driver     " << (env.driver_version > 0 ? VersionString(env.driver_version) : "")
              << (env.driver_version > 0 ? " " : "") << "no usable GPU: " << env.driver_error
              << "\n"
              << "GPU        none (compile-only work is still possible)\n";
  }
  if (env.nvrtc_error.empty()) {
    std::cout << "NVRTC      " << VersionString(env.nvrtc_version) << " (" << env.nvrtc_version
              << ")\n";
  } else {
    std::cout << "NVRTC      unavailable: " << env.nvrtc_error << "\n";
  }
  std::cout << "code hash  " << env.code_hash << "\n";
  // The cuDNN that tuning arbitrates with (Options::vendor_candidates), found without a GPU.
  if (env.cudnn_version > 0) {
    std::cout << "cuDNN      " << env.cudnn_version << " (" << Printable(env.cudnn_path, 4000)
              << "): a tuning candidate unless --no-cudnn\n";
  } else {
    std::cout << "cuDNN      none (" << Printable(OneLine(env.cudnn_error, 300), 300)
              << "): our kernels alone\n";
  }
  // Read-only: info never creates a file or its folders, nor waits for a writer's lock. A shared
  // cache ($CONVT3D_CACHE_SHARED) is a read-only layer under the user's, looked up in list order.
  const auto describe = [](const std::string& path, bool shared) {
    auto store = OpenStoreReadOnly(path);
    std::cout << (shared ? "shared     " : "cache      ") << Printable(path, 4000);
    if (!store->persistent()) {
      // The reason is in the warning OpenStoreReadOnly() has just printed.
      std::cout << (shared ? " (does not open; not used)\n"
                           : " (does not open; results would be kept in memory only)\n");
    } else if (!store->exists()) {
      std::cout << (shared ? " (no file; not used)\n"
                           : " (no file yet; the first tuning run creates it)\n");
    } else if (!store->damage().empty()) {
      std::cout << " (damaged: read-only; see 'convt3d cache check')\n";
    } else {
      auto entries = store->List();
      std::cout << " (opens"
                << (entries.ok() ? StrCat(", ", entries->size(), " entries") : std::string())
                << ")\n";
    }
  };
  describe(ResolveCachePath(a.cache), false);
  for (const std::string& path : cache::SharedPathsFromEnv()) describe(path, true);
  return kExitOk;
}

}  // namespace

Command AddInfo(CLI::App* cli) {
  auto a = std::make_shared<InfoArgs>();
  CLI::App* info = cli->add_subcommand(
      "info", "Version, driver, NVRTC, GPU, code hash and cache file of this machine");
  info->add_option("--cache", a->cache, "SQLite cache file to check");
  a->ints.Add(info, "--device", &a->device, "CUDA device ordinal", 0, 1023);
  return {info, [a] { return RunInfo(*a); }};
}

}  // namespace convt3d::cli
