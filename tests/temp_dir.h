// temp_dir.h: a test fixture with a fresh directory of its own, removed after the test.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace convt3d::test {

// Each test gets a new directory under the system's temporary one. TearDown gives the owner back
// every permission a test took away (read-only files and directories), then removes it all.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "convt3d_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir_, ec))
      fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  // `name` in the test's directory (by default the cache file most tests use).
  std::string Path(const std::string& name = "cache.sqlite") const { return dir_ + "/" + name; }

  std::string dir_;
};

}  // namespace convt3d::test
