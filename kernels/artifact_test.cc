// artifact_test.cc: artifacts build once and then load from the disk cache; a bad cache file is
// rebuilt; the bytes form round-trips and rejects damage; errors name what failed. Needs NVRTC.
#include "kernels/artifact.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "platform/platform.h"
#include "platform/test_support.h"

using tr_test::error_of;
using tr_test::ok;
using tr_test::TempDir;

namespace {

const char *kSource = "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] *= 2; }\n";

tr_artifact_source Source(const char *source = kSource) {
  tr_artifact_source src{};
  src.name = "double_it";
  src.source = source;
  src.arch = "sm_90a";
  src.entry = "k";
  return src;
}

tr_artifact_cache CacheAt(const std::string &dir) {
  tr_artifact_cache cache{};
  REQUIRE(dir.size() < sizeof(cache.dir));
  std::memcpy(cache.dir, dir.c_str(), dir.size() + 1);
  cache.enabled = 1;
  return cache;
}

std::string Hex(const tr_artifact &a) {
  char hex[33];
  tr_artifact_key_hex(a.key, hex);
  return hex;
}

std::string FileOf(const tr_artifact_cache &cache, const tr_artifact &a) {
  return std::string(cache.dir) + "/" + Hex(a) + ".cubin";
}

std::string Bytes(const tr_artifact &a) {
  return std::string(reinterpret_cast<const char *>(a.cubin), a.size);
}

std::string ReadFile(const std::string &path) {
  char *data = nullptr;
  size_t size = 0;
  ok(tr_plat_read_file(path.c_str(), &data, &size));
  std::string text(data, size);
  std::free(data);
  return text;
}

void WriteFile(const std::string &path, const std::string &bytes) {
  ok(tr_plat_write_file(path.c_str(), bytes.data(), bytes.size()));
}

std::vector<std::string> List(const std::string &dir) {
  char **names = nullptr;
  size_t count = 0;
  ok(tr_plat_list_dir(dir.c_str(), &names, &count));
  std::vector<std::string> out(names, names + count);
  tr_plat_free_names(&names, count);
  return out;
}

// Builds `src`, requiring success and no warning; returns from_cache.
int Build(const tr_artifact_source &src, const tr_artifact_cache *cache, tr_artifact *out) {
  int from_cache = -1;
  char *warning = nullptr;
  ok(tr_artifact_build(&src, cache, out, &from_cache, &warning));
  INFO("warning: " << (warning ? warning : "(none)"));
  CHECK(warning == nullptr);
  std::free(warning);
  return from_cache;
}

std::string Encode(const tr_artifact &a) {
  uint8_t *bytes = nullptr;
  size_t size = 0;
  ok(tr_artifact_encode(&a, &bytes, &size));
  std::string out(reinterpret_cast<const char *>(bytes), size);
  std::free(bytes);
  return out;
}

// Decodes, expecting a ValueError; returns its message. Checks *out stays empty.
std::string DecodeError(const std::string &bytes) {
  tr_artifact a;
  std::memset(&a, 0x5a, sizeof a);
  tr_status *s = tr_artifact_decode(reinterpret_cast<const uint8_t *>(bytes.data()),
                                    bytes.size(), &a);
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_VALUE);
  CHECK(a.cubin == nullptr);
  CHECK(a.size == 0);
  std::string message = tr_status_message(s);
  tr_status_destroy(&s);
  return message;
}

// Saves an environment variable and restores it at scope end.
struct EnvGuard {
  std::string name;
  bool had;
  std::string value;
  explicit EnvGuard(const char *n) : name(n) {
    const char *v = tr_plat_getenv(n);
    had = v != nullptr;
    if (had) value = v;
  }
  ~EnvGuard() {
    tr_status *s = tr_plat_setenv(name.c_str(), had ? value.c_str() : nullptr);
    tr_status_destroy(&s);
  }
};

void SetEnv(const char *name, const char *value) { ok(tr_plat_setenv(name, value)); }

}  // namespace

TEST_CASE("the first build compiles and stores; the second loads the same bytes from the cache") {
  TempDir tmp("tilerun-artifact");
  // A directory two levels below one that exists: made by the build.
  tr_artifact_cache cache = CacheAt(std::string(tmp.path) + "/cache/kernels");
  tr_artifact_source src = Source();

  tr_artifact first{};
  CHECK(Build(src, &cache, &first) == 0);
  REQUIRE(first.size > 64);
  CHECK(std::memcmp(first.cubin, "\x7f" "ELF", 4) == 0);
  CHECK(std::string(first.name) == "double_it");
  CHECK(std::string(first.entry) == "k");
  CHECK(std::string(first.arch) == "sm_90a");
  CHECK(first.nvrtc_version >= 12000);
  CHECK((first.key[0] != 0 || first.key[1] != 0));

  // One file named by the key, holding the bytes form; no temporary file left.
  std::vector<std::string> names = List(cache.dir);
  REQUIRE(names.size() == 1);
  CHECK(names[0] == Hex(first) + ".cubin");
  CHECK(names[0].size() == 32 + 6);
  CHECK(ReadFile(FileOf(cache, first)) == Encode(first));

  tr_artifact second{};
  CHECK(Build(src, &cache, &second) == 1);
  CHECK(Bytes(second) == Bytes(first));
  CHECK(second.key[0] == first.key[0]);
  CHECK(second.key[1] == first.key[1]);
  CHECK(std::string(second.name) == "double_it");
  CHECK(std::string(second.entry) == "k");
  CHECK(std::string(second.arch) == "sm_90a");
  CHECK(second.nvrtc_version == first.nvrtc_version);
  CHECK(List(cache.dir).size() == 1);

  // The key does not depend on the cache: built with none, the key and bytes are the same.
  tr_artifact uncached{};
  CHECK(Build(src, nullptr, &uncached) == 0);
  CHECK(uncached.key[0] == first.key[0]);
  CHECK(uncached.key[1] == first.key[1]);
  CHECK(Bytes(uncached) == Bytes(first));
  tr_artifact_cache off = cache;
  off.enabled = 0;
  tr_artifact disabled{};
  CHECK(Build(src, &off, &disabled) == 0);  // a disabled cache is not read

  tr_artifact_clear(&first);
  CHECK(first.cubin == nullptr);
  CHECK(first.size == 0);
  tr_artifact_clear(&second);
  tr_artifact_clear(&uncached);
  tr_artifact_clear(&disabled);
  tr_artifact_clear(nullptr);
}

TEST_CASE("source, each option, their order, arch, entry and name all change the key and file") {
  TempDir tmp("tilerun-artifact");
  tr_artifact_cache cache = CacheAt(tmp.path);
  const char *two[] = {"-DA=1", "-DB=2"};
  const char *swapped[] = {"-DB=2", "-DA=1"};
  const char *one_changed[] = {"-DA=1", "-DB=3"};
  const char *joined[] = {"-DA=1-DB=2"};  // not the same as two options
  std::string other_source = std::string(kSource) + "// another line\n";
  std::string two_entries =
      std::string(kSource) + "extern \"C\" __global__ void k2(float *p) { p[0] = 1; }\n";

  std::vector<tr_artifact_source> variants;
  variants.push_back(Source());
  variants.push_back(Source(other_source.c_str()));
  tr_artifact_source s = Source();
  s.options = two;
  s.n_options = 2;
  variants.push_back(s);
  s.options = swapped;
  variants.push_back(s);
  s.options = one_changed;
  variants.push_back(s);
  s.options = joined;
  s.n_options = 1;
  variants.push_back(s);
  s = Source();
  s.arch = "sm_80";
  variants.push_back(s);
  s = Source(two_entries.c_str());
  variants.push_back(s);
  s.entry = "k2";
  variants.push_back(s);
  s = Source();
  s.name = "double_it_again";
  variants.push_back(s);

  std::set<std::string> keys;
  std::vector<std::string> bytes;
  for (size_t i = 0; i < variants.size(); ++i) {
    INFO("variant " << i);
    tr_artifact a{};
    CHECK(Build(variants[i], &cache, &a) == 0);  // nothing earlier matched it
    CHECK(tr_plat_file_exists(FileOf(cache, a).c_str()) == 1);
    keys.insert(Hex(a));
    bytes.push_back(Bytes(a));
    tr_artifact_clear(&a);
  }
  CHECK(keys.size() == variants.size());
  CHECK(List(cache.dir).size() == variants.size());
  CHECK(bytes[6] != bytes[0]);  // sm_80 code differs from sm_90a's

  // Each is then found again, under its own key.
  for (size_t i = 0; i < variants.size(); ++i) {
    INFO("variant " << i);
    tr_artifact a{};
    CHECK(Build(variants[i], &cache, &a) == 1);
    CHECK(Bytes(a) == bytes[i]);
    CHECK(std::string(a.arch) == variants[i].arch);
    CHECK(std::string(a.entry) == variants[i].entry);
    tr_artifact_clear(&a);
  }
}

TEST_CASE("a damaged or foreign cache file is rebuilt, overwritten and valid again") {
  TempDir tmp("tilerun-artifact");
  tr_artifact_cache cache = CacheAt(tmp.path);
  tr_artifact_source src = Source();
  tr_artifact good{};
  REQUIRE(Build(src, &cache, &good) == 0);
  const std::string file = FileOf(cache, good);
  const std::string valid = ReadFile(file);
  REQUIRE(valid == Encode(good));

  // Another artifact's valid file, copied under this key's name: only the key tells it apart
  // (same name, entry, arch and NVRTC; another source).
  std::string other_source = std::string(kSource) + "// changed\n";
  tr_artifact_source other_src = Source(other_source.c_str());
  tr_artifact other{};
  REQUIRE(Build(other_src, &cache, &other) == 0);
  const std::string foreign = ReadFile(FileOf(cache, other));
  tr_artifact_clear(&other);

  std::string flipped_cubin = valid;
  flipped_cubin[TR_ARTIFACT_HEADER_SIZE + (valid.size() - TR_ARTIFACT_HEADER_SIZE) / 2] ^= 0x01;
  std::string flipped_last = valid;
  flipped_last.back() ^= 0x80;
  std::string flipped_name = valid;
  flipped_name[28] ^= 0x20;  // the name field
  std::string bad_magic = valid;
  bad_magic[0] = 'X';
  struct Case {
    const char *what;
    std::string bytes;
  } cases[] = {
      {"a flipped byte in the cubin", flipped_cubin},
      {"a flipped last byte", flipped_last},
      {"a flipped byte in the name", flipped_name},
      {"a bad magic", bad_magic},
      {"truncated in the cubin", valid.substr(0, valid.size() - 10)},
      {"truncated in the header", valid.substr(0, 100)},
      {"empty", ""},
      {"garbage", "this is not a cubin at all\n"},
      {"garbage as long as the file", std::string(valid.size(), '\xa5')},
      {"one byte too many", valid + "x"},
      {"another key's artifact", foreign},
  };
  for (const Case &c : cases) {
    INFO(c.what);
    WriteFile(file, c.bytes);
    tr_artifact a{};
    CHECK(Build(src, &cache, &a) == 0);  // not loaded: compiled again
    CHECK(Bytes(a) == Bytes(good));
    CHECK(ReadFile(file) == valid);  // overwritten with the good file
    tr_artifact_clear(&a);
    CHECK(Build(src, &cache, &a) == 1);  // and valid again
    CHECK(Bytes(a) == Bytes(good));
    tr_artifact_clear(&a);
  }
  CHECK(List(cache.dir).size() == 2);  // no temporary files left
  tr_artifact_clear(&good);
}

TEST_CASE("the bytes form round-trips and rejects every truncation and any flipped byte") {
  tr_artifact a{};
  REQUIRE(Build(Source(), nullptr, &a) == 0);
  const std::string bytes = Encode(a);
  REQUIRE(bytes.size() == TR_ARTIFACT_HEADER_SIZE + a.size);
  CHECK(bytes.compare(0, 8, std::string("TRKART1\0", 8)) == 0);

  tr_artifact back{};
  ok(tr_artifact_decode(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(), &back));
  CHECK(Bytes(back) == Bytes(a));
  CHECK(back.key[0] == a.key[0]);
  CHECK(back.key[1] == a.key[1]);
  CHECK(std::string(back.name) == a.name);
  CHECK(std::string(back.entry) == a.entry);
  CHECK(std::string(back.arch) == a.arch);
  CHECK(back.nvrtc_version == a.nvrtc_version);
  CHECK(Encode(back) == bytes);
  tr_artifact_clear(&back);

  for (size_t len = 0; len < bytes.size(); ++len) {
    INFO("truncated to " << len << " bytes");
    std::string message = DecodeError(bytes.substr(0, len));
    CHECK(message.find("truncated") != std::string::npos);
  }
  CHECK(DecodeError(bytes + '\0').find("but " + std::to_string(a.size + 1) + " follow") !=
        std::string::npos);

  std::string magic = bytes;
  magic[3] ^= 0x01;
  CHECK(DecodeError(magic).find("bad magic") != std::string::npos);
  std::string version = bytes;
  version[8] = 2;
  CHECK(DecodeError(version).find("format version 2") != std::string::npos);

  // Any single flipped bit, header or cubin, is caught (by a field check or the checksum).
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] ^= static_cast<char>(1u << (i % 8));
    tr_artifact out{};
    tr_status *s = tr_artifact_decode(reinterpret_cast<const uint8_t *>(damaged.data()),
                                      damaged.size(), &out);
    if (s == nullptr || tr_status_code(s) != TR_VALUE) {
      FAIL_CHECK("a flipped bit at byte " << i << " was not rejected as a ValueError");
    }
    tr_status_destroy(&s);
    tr_artifact_clear(&out);
  }
  std::string cubin_flip = bytes;
  cubin_flip[TR_ARTIFACT_HEADER_SIZE + 7] ^= 0x10;
  CHECK(DecodeError(cubin_flip).find("checksum mismatch") != std::string::npos);

  // A NULL buffer is refused, not read.
  tr_artifact out{};
  CHECK(error_of(tr_artifact_decode(nullptr, 1000, &out)).rfind("ValueError: ", 0) == 0);

  // An artifact without a cubin cannot be encoded.
  tr_artifact empty{};
  std::strcpy(empty.name, "empty");
  uint8_t *encoded = reinterpret_cast<uint8_t *>(1);
  size_t size = 7;
  CHECK(error_of(tr_artifact_encode(&empty, &encoded, &size)).find("'empty': it has no cubin") !=
        std::string::npos);
  CHECK(encoded == nullptr);
  CHECK(size == 0);
  tr_artifact_clear(&a);
}

TEST_CASE("a compile error is a CompileError naming the artifact and carrying NVRTC's text") {
  TempDir tmp("tilerun-artifact");
  tr_artifact_cache cache = CacheAt(std::string(tmp.path) + "/kernels");
  tr_artifact_source src = Source(
      "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] *= NOT_DEFINED_ANYWHERE; }\n");
  src.name = "broken_kernel";
  tr_artifact a{};
  int from_cache = -1;
  char *warning = reinterpret_cast<char *>(1);
  tr_status *s = tr_artifact_build(&src, &cache, &a, &from_cache, &warning);
  REQUIRE(s != nullptr);
  CHECK(tr_status_code(s) == TR_COMPILE);
  std::string message = tr_status_message(s);
  INFO(message);
  CHECK(message.find("'broken_kernel'") != std::string::npos);
  CHECK(message.find("sm_90a") != std::string::npos);
  CHECK(message.find("NOT_DEFINED_ANYWHERE") != std::string::npos);  // NVRTC's own diagnosis
  CHECK(message.find("undefined") != std::string::npos);
  tr_status_destroy(&s);
  CHECK(a.cubin == nullptr);
  CHECK(from_cache == 0);
  CHECK(warning == nullptr);
  CHECK(tr_plat_file_exists(cache.dir) == 0);  // nothing stored
}

TEST_CASE("a source that cannot be an artifact is a ValueError naming the field") {
  tr_artifact a{};
  tr_artifact_source src = Source();
  std::string long_name(64, 'n');
  src.name = long_name.c_str();
  CHECK(error_of(tr_artifact_build(&src, nullptr, &a, nullptr, nullptr)).find("at most 63") !=
        std::string::npos);
  src = Source();
  src.entry = "not an identifier";
  CHECK(error_of(tr_artifact_build(&src, nullptr, &a, nullptr, nullptr))
            .find("entry 'not an identifier' is not a C identifier") != std::string::npos);
  src = Source();
  src.arch = "sm_90a_far_too_long";
  CHECK(error_of(tr_artifact_build(&src, nullptr, &a, nullptr, nullptr))
            .rfind("ValueError: building kernel artifact 'double_it': arch 'sm_90a_far_too_long'",
                   0) == 0);
  src = Source();
  src.n_options = 1;
  CHECK(error_of(tr_artifact_build(&src, nullptr, &a, nullptr, nullptr)).find("option list") !=
        std::string::npos);
  CHECK(a.cubin == nullptr);
}

TEST_CASE("an unwritable cache still builds and says why it could not store") {
  TempDir tmp("tilerun-artifact");
  std::string blocker = tmp.write("blocker", "a regular file");
  tr_artifact_cache cache = CacheAt(blocker + "/kernels");
  tr_artifact_source src = Source();
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    tr_artifact a{};
    int from_cache = -1;
    char *warning = nullptr;
    ok(tr_artifact_build(&src, &cache, &a, &from_cache, &warning));
    CHECK(from_cache == 0);
    REQUIRE(a.size > 0);
    CHECK(std::memcmp(a.cubin, "\x7f" "ELF", 4) == 0);
    REQUIRE(warning != nullptr);
    std::string text = warning;
    INFO(text);
    CHECK(text.find(FileOf(cache, a)) != std::string::npos);   // the file it meant to write
    CHECK(text.find("'" + blocker + "'") != std::string::npos);  // what stood in the way
    CHECK(text.find("not a directory") != std::string::npos);
    std::free(warning);
    tr_artifact_clear(&a);
  }
  // A NULL warning pointer is allowed: the warning is dropped.
  tr_artifact a{};
  ok(tr_artifact_build(&src, &cache, &a, nullptr, nullptr));
  CHECK(a.size > 0);
  tr_artifact_clear(&a);
  CHECK(ReadFile(blocker) == "a regular file");
}

TEST_CASE("the default cache follows TILERUN_CACHE_DIR, then XDG_CACHE_HOME, then HOME") {
  EnvGuard g1("TILERUN_CACHE_DIR"), g2("XDG_CACHE_HOME"), g3("HOME");
  tr_artifact_cache cache;

  SetEnv("TILERUN_CACHE_DIR", "/somewhere/kernels");
  SetEnv("XDG_CACHE_HOME", "/xdg");
  SetEnv("HOME", "/home/someone");
  tr_artifact_cache_default(&cache);
  CHECK(cache.enabled == 1);
  CHECK(std::string(cache.dir) == "/somewhere/kernels");

  SetEnv("TILERUN_CACHE_DIR", "off");
  tr_artifact_cache_default(&cache);
  CHECK(cache.enabled == 0);

  SetEnv("TILERUN_CACHE_DIR", nullptr);
  tr_artifact_cache_default(&cache);
  CHECK(cache.enabled == 1);
  CHECK(std::string(cache.dir) == "/xdg/tilerun/kernels");

  SetEnv("TILERUN_CACHE_DIR", "");  // empty: as unset
  SetEnv("XDG_CACHE_HOME", "relative/xdg");  // relative: ignored, as the XDG spec says
  tr_artifact_cache_default(&cache);
  CHECK(cache.enabled == 1);
  CHECK(std::string(cache.dir) == "/home/someone/.cache/tilerun/kernels");

  SetEnv("XDG_CACHE_HOME", nullptr);
  SetEnv("HOME", nullptr);
  tr_artifact_cache_default(&cache);
  CHECK(cache.enabled == 0);

  std::string too_long(2000, 'd');
  SetEnv("TILERUN_CACHE_DIR", ("/" + too_long).c_str());
  tr_artifact_cache_default(&cache);
  CHECK(cache.enabled == 0);

  // And a build through it uses that directory.
  TempDir tmp("tilerun-artifact");
  SetEnv("TILERUN_CACHE_DIR", tmp.path);
  tr_artifact_cache_default(&cache);
  REQUIRE(cache.enabled == 1);
  tr_artifact a{};
  CHECK(Build(Source(), &cache, &a) == 0);
  CHECK(tr_plat_file_exists((std::string(tmp.path) + "/" + Hex(a) + ".cubin").c_str()) == 1);
  tr_artifact_clear(&a);
}
