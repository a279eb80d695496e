// discovery_test.cc: backend descriptors along the search path: order, shadowing, bad files.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "platform/test_support.h"
#include "registry/discovery.h"

using tr_test::TempDir;

static tr_discovery *discover(std::vector<const char *> dirs) {
  tr_discovery *found = nullptr;
  tr_status *s = tr_backend_discover(dirs.data(), dirs.size(), &found);
  REQUIRE(s == nullptr);
  return found;
}

TEST_CASE("descriptors are found, sorted by name, with the library resolved") {
  TempDir dir;
  std::string zed = dir.write("zed.yaml", "name: zed\nlibrary: libzed.so\n");
  dir.write("acme.yaml", "name: acme\nlibrary: /opt/acme/libacme.so\n");
  dir.write("README", "not a descriptor");
  tr_discovery *found = discover({dir.path});
  REQUIRE(tr_discovery_count(found) == 2);
  CHECK(tr_discovery_failure_count(found) == 0);
  const tr_backend_descriptor *a = tr_discovery_at(found, 0);
  CHECK(std::string(a->name) == "acme");
  CHECK(std::string(a->library) == "/opt/acme/libacme.so");
  const tr_backend_descriptor *z = tr_discovery_at(found, 1);
  CHECK(std::string(z->name) == "zed");
  CHECK(std::string(z->library) == std::string(dir.path) + "/libzed.so");
  CHECK(z->descriptor == zed);
  CHECK(tr_discovery_at(found, 2) == nullptr);
  tr_discovery_destroy(&found);
  CHECK(found == nullptr);
}

TEST_CASE("an earlier directory shadows a later one, as PATH does: skipped, no failure") {
  TempDir first, second;
  first.write("cpu.yaml", "name: cpu\nlibrary: one.so\n");
  second.write("cpu.yaml", "name: cpu\nlibrary: two.so\n");
  tr_discovery *found = discover({first.path, "/nonexistent/backends", second.path});
  REQUIRE(tr_discovery_count(found) == 1);
  CHECK(std::string(tr_discovery_at(found, 0)->library) == std::string(first.path) + "/one.so");
  CHECK(tr_discovery_failure_count(found) == 0);
  tr_discovery_destroy(&found);
}

TEST_CASE("two descriptors of one name in one directory: the second is a failure naming the first") {
  TempDir dir;
  std::string first = dir.write("a.yaml", "name: cpu\nlibrary: one.so\n");
  std::string later = dir.write("b.yaml", "name: cpu\nlibrary: two.so\n");
  tr_discovery *found = discover({dir.path});
  REQUIRE(tr_discovery_count(found) == 1);
  CHECK(std::string(tr_discovery_at(found, 0)->library) == std::string(dir.path) + "/one.so");
  REQUIRE(tr_discovery_failure_count(found) == 1);
  const tr_discovery_failure *f = tr_discovery_failure_at(found, 0);
  CHECK(f->descriptor == later);
  CHECK(std::string(f->reason) == later + ":1:7: backend 'cpu' was already found at " + first);
  tr_discovery_destroy(&found);
}

TEST_CASE("bad descriptors are skipped and reported with file, line and column") {
  TempDir dir;
  dir.write("good.yaml", "name: good\nlibrary: good.so\n");
  std::string nolib = dir.write("a_nolib.yaml", "name: nolib\n");
  std::string extra = dir.write("b_extra.yaml", "name: extra\nlibrary: x.so\nversion: 2\n");
  std::string syntax = dir.write("c_syntax.yaml", "name: [oops\n");
  std::string badname = dir.write("d_badname.yaml", "name: Bad-Name\nlibrary: x.so\n");
  std::string list = dir.write("e_list.yaml", "- name\n");
  std::string empty = dir.write("f_empty.yaml", "name: ''\nlibrary: x.so\n");
  std::string two = dir.write("g_two.yaml", "name: two\nlibrary: x.so\n---\nname: other\n");
  tr_discovery *found = discover({dir.path});
  REQUIRE(tr_discovery_count(found) == 1);
  CHECK(std::string(tr_discovery_at(found, 0)->name) == "good");
  REQUIRE(tr_discovery_failure_count(found) == 7);
  std::vector<std::string> reasons;
  for (size_t i = 0; i < 7; i++) reasons.push_back(tr_discovery_failure_at(found, i)->reason);
  CHECK(reasons[6] == two + ":3:1: a backend descriptor holds one YAML document; a second one starts here");
  CHECK(reasons[0] == nolib + ":1:1: 'library' is missing");
  CHECK(reasons[1] == extra + ":3:1: unknown key 'version' in a backend descriptor (known: "
                              "name, library)");
  CHECK(reasons[2].find(syntax + ":2:1: bad structure:") == 0);
  CHECK(reasons[3] == badname + ":1:7: backend name 'Bad-Name' must be a lowercase letter "
                                "followed by at most 30 lowercase letters, digits or '_'");
  CHECK(reasons[4] == list + ":1:1: a backend descriptor is a mapping with 'name' and 'library'");
  CHECK(reasons[5] == empty + ":1:7: 'name' must be a non-empty string");
  tr_discovery_destroy(&found);
}

TEST_CASE("the search path is the environment's entries, then the install prefix") {
  const char *saved = tr_plat_getenv(TR_BACKEND_PATH_ENV);
  std::string keep = saved ? saved : "";
  REQUIRE(tr_plat_setenv(TR_BACKEND_PATH_ENV, "/a::/b/c:") == nullptr);
  char **dirs = nullptr;
  size_t n = 0;
  REQUIRE(tr_backend_search_path(&dirs, &n) == nullptr);
  REQUIRE(n == 3);
  CHECK(std::string(dirs[0]) == "/a");
  CHECK(std::string(dirs[1]) == "/b/c");
  CHECK(std::string(dirs[2]) == std::string(TR_INSTALL_PREFIX) + "/lib/tilerun/backends");
  tr_discovery_free_dirs(&dirs, n);
  CHECK(dirs == nullptr);
  // a folder named twice, as the same text or another name of it, is searched once
  tr_test::TempDir dir;
  const std::string twice = std::string(dir.path) + ":" + dir.path + ":" + dir.path + "/.";
  REQUIRE(tr_plat_setenv(TR_BACKEND_PATH_ENV, twice.c_str()) == nullptr);
  REQUIRE(tr_backend_search_path(&dirs, &n) == nullptr);
  REQUIRE(n == 2);
  CHECK(std::string(dirs[0]) == dir.path);
  tr_discovery_free_dirs(&dirs, n);
  REQUIRE(tr_plat_setenv(TR_BACKEND_PATH_ENV, nullptr) == nullptr);
  REQUIRE(tr_backend_search_path(&dirs, &n) == nullptr);
  CHECK(n == 1);
  tr_discovery_free_dirs(&dirs, n);
  if (saved) REQUIRE(tr_plat_setenv(TR_BACKEND_PATH_ENV, keep.c_str()) == nullptr);
}
