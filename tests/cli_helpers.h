// cli_helpers.h: runs the built convt3d binary from a test and collects what it printed.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace convt3d::test {

struct CliResult {
  int code = -1;  // the exit status; -1 when the command could not run or did not exit
  std::string out, err;
};

// Runs `env <env> convt3d <args>` through the shell: `env` is a list of NAME=value words (quote
// values with spaces), `args` the command line. stdout comes through a pipe, stderr through a
// temporary file that is removed afterwards.
inline CliResult RunCli(const std::string& args, const std::string& env = "") {
  char err_file[] = "/tmp/convt3d_cli_stderr_XXXXXX";
  const int fd = mkstemp(err_file);
  if (fd >= 0) close(fd);
#ifdef CONVT3D_SANITIZE
  // LeakSanitizer's tracer itself dies (SIGSEGV, "Tracer caught signal 11") at the exit of a CLI
  // that ran NVRTC, on a loaded machine only; the CLI keeps ASan and UBSan, and the library's
  // leaks are checked in the test binaries that call it in-process.
  const std::string sanitizer = "ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:detect_leaks=0\" ";
#else
  const std::string sanitizer;
#endif
  const std::string cmd =
      "env " + sanitizer + env + " '" + CONVT3D_CLI_PATH + "' " + args + " 2>'" + err_file + "'";
  CliResult r;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
    const int status = pclose(pipe);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream f(err_file);
    std::stringstream ss;
    ss << f.rdbuf();
    r.err = ss.str();
  }
  std::remove(err_file);
  return r;
}

}  // namespace convt3d::test
