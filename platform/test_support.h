// test_support.h: a temporary directory for tests, removed with everything in it at scope end.
#ifndef TILERUN_PLATFORM_TEST_SUPPORT_H_
#define TILERUN_PLATFORM_TEST_SUPPORT_H_

#include <cstdlib>
#include <string>

#include "core/test_support.h"
#include "platform/platform.h"

namespace tr_test {

struct TempDir {
  char *path = nullptr;
  explicit TempDir(const char *prefix = "tilerun-test") {
    ok(tr_plat_make_temp_dir(prefix, &path));
  }
  ~TempDir() {
    tr_status *s = tr_plat_remove_tree(path);
    tr_status_destroy(&s);
    std::free(path);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  // Writes a file in the directory; returns its path.
  std::string write(const std::string &name, const std::string &text) const {
    std::string file = std::string(path) + "/" + name;
    ok(tr_plat_write_file(file.c_str(), text.data(), text.size()));
    return file;
  }
};

}  // namespace tr_test

#endif  // TILERUN_PLATFORM_TEST_SUPPORT_H_
