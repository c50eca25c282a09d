// test_engine_log.cpp: the library writes nothing to stderr unless Options::verbose or
// Options::log asks; a warning (here: a damaged cache file) reaches the log callback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "convt3d/convt3d.h"

namespace convt3d {
namespace {

namespace fs = std::filesystem;

// Everything written to file descriptor 2 between construction and Take(), through a pipe.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    std::cerr.flush();
    if (pipe(fds_) != 0) return;
    saved_ = dup(2);
    dup2(fds_[1], 2);
    close(fds_[1]);
  }
  ~StderrCapture() { Take(); }

  // Restores fd 2 and returns what was written (less than a pipe's 64 KiB here).
  std::string Take() {
    if (saved_ < 0) return text_;
    std::fflush(stderr);
    std::cerr.flush();
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
    char buf[4096];
    for (ssize_t n; (n = read(fds_[0], buf, sizeof buf)) > 0;) text_.append(buf, n);
    close(fds_[0]);
    return text_;
  }

 private:
  int fds_[2] = {-1, -1};
  int saved_ = -1;
  std::string text_;
};

// A cache path whose file is not a SQLite database: the engine falls back to memory and warns.
class EngineLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("convt3d_log_" + std::to_string(getpid()) + ".sqlite"))
                .string();
    std::ofstream(path_, std::ios::binary) << std::string(4096, 'x');
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  Options Damaged() const {
    Options o;
    o.cache_path = path_;
    return o;
  }
  std::string path_;
};

TEST_F(EngineLogTest, SilentByDefaultAndTheWarningIsStillReadable) {
  StderrCapture capture;
  StatusOr<Engine> engine = Engine::Create(Damaged());
  const std::string written = capture.Take();
  if (!engine.ok()) GTEST_SKIP() << "no engine here: " << engine.status().ToString();
  EXPECT_EQ(written, "");
  EXPECT_NE(engine->cache_warning().find(path_), std::string::npos) << engine->cache_warning();
}

TEST_F(EngineLogTest, TheCallbackGetsTheWarningAndStderrNothing) {
  std::vector<std::pair<LogLevel, std::string>> lines;
  Options o = Damaged();
  o.verbose = true;  // the callback takes precedence over stderr
  o.log = [&](LogLevel level, const std::string& line) { lines.emplace_back(level, line); };
  StderrCapture capture;
  StatusOr<Engine> engine = Engine::Create(o);
  const std::string written = capture.Take();
  if (!engine.ok()) GTEST_SKIP() << "no engine here: " << engine.status().ToString();
  EXPECT_EQ(written, "");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].first, LogLevel::kWarning);
  EXPECT_NE(lines[0].second.find(path_), std::string::npos) << lines[0].second;
  EXPECT_NE(lines[0].second.find("in-memory"), std::string::npos) << lines[0].second;
  EXPECT_EQ(lines[0].second.rfind("convt3d: ", 0), std::string::npos) << lines[0].second;
}

TEST_F(EngineLogTest, VerboseWritesTheWarningToStderrOnce) {
  Options o = Damaged();
  o.verbose = true;
  StderrCapture capture;
  StatusOr<Engine> engine = Engine::Create(o);
  const std::string written = capture.Take();
  if (!engine.ok()) GTEST_SKIP() << "no engine here: " << engine.status().ToString();
  EXPECT_EQ(written.rfind("convt3d: warning: cache " + path_, 0), 0u) << written;
  EXPECT_EQ(written.find('\n'), written.size() - 1) << written;
}

}  // namespace
}  // namespace convt3d
