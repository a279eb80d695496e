// platform_test.cc: tests of the POSIX platform layer through its C API.
#include "platform/platform.h"

#include <catch2/catch.hpp>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// Takes ownership of a status: its "<CodeName>: <message>" text, or "Ok" for NULL.
std::string Consume(tr_status *status) {
  size_t size = tr_status_format(status, nullptr, 0);
  std::string text(size, '\0');
  tr_status_format(status, &text[0], size + 1);
  tr_status_destroy(&status);
  return text;
}

#define REQUIRE_OK(expr) REQUIRE(Consume(expr) == "Ok")

// Checks that `status` failed with `code` and that its message contains every one of `parts`.
void RequireError(tr_status *status, tr_code code, const std::vector<std::string> &parts) {
  REQUIRE(status != nullptr);
  CHECK(tr_status_code(status) == code);
  std::string message = tr_status_message(status);
  for (const std::string &part : parts) {
    INFO("message: " << message);
    CHECK(message.find(part) != std::string::npos);
  }
  tr_status_destroy(&status);
}

// A fresh temporary directory, removed (with everything in it) at the end of the test.
class TempDir {
 public:
  TempDir() { REQUIRE_OK(tr_plat_make_temp_dir("tilerun-platform-test-", &path_)); }
  ~TempDir() {
    if (path_ != nullptr && tr_plat_file_exists(path_)) {
      tr_status *status = tr_plat_remove_tree(path_);
      tr_status_destroy(&status);
    }
    free(path_);
  }
  std::string path() const { return path_; }
  std::string Join(const std::string &name) const { return std::string(path_) + "/" + name; }

 private:
  char *path_ = nullptr;
};

void WriteFile(const std::string &path, const std::string &content) {
  REQUIRE_OK(tr_plat_write_file(path.c_str(), content.data(), content.size()));
}

}  // namespace

TEST_CASE("environment variables can be set, read and unset", "[env]") {
  const char *name = "TILERUN_PLATFORM_TEST_VARIABLE";
  REQUIRE_OK(tr_plat_setenv(name, nullptr));
  CHECK(tr_plat_getenv(name) == nullptr);

  REQUIRE_OK(tr_plat_setenv(name, "first value"));
  REQUIRE(tr_plat_getenv(name) != nullptr);
  CHECK(std::string(tr_plat_getenv(name)) == "first value");

  REQUIRE_OK(tr_plat_setenv(name, "second"));
  CHECK(std::string(tr_plat_getenv(name)) == "second");

  // Set to empty is not unset.
  REQUIRE_OK(tr_plat_setenv(name, ""));
  REQUIRE(tr_plat_getenv(name) != nullptr);
  CHECK(std::string(tr_plat_getenv(name)).empty());

  REQUIRE_OK(tr_plat_setenv(name, nullptr));
  CHECK(tr_plat_getenv(name) == nullptr);
  // Unsetting what is unset is fine.
  REQUIRE_OK(tr_plat_setenv(name, nullptr));
}

TEST_CASE("a bad environment variable name is refused, naming it", "[env]") {
  RequireError(tr_plat_setenv("BAD=NAME", "x"), TR_VALUE, {"'BAD=NAME'"});
  RequireError(tr_plat_setenv("", "x"), TR_VALUE, {"''"});
  CHECK(tr_plat_getenv("BAD") == nullptr);
}

TEST_CASE("the clock is monotonic and advances across a sleep", "[clock]") {
  uint64_t previous = tr_plat_now_ns();
  int backwards = 0;
  for (int i = 0; i < 100000; ++i) {
    uint64_t now = tr_plat_now_ns();
    backwards += now < previous;
    previous = now;
  }
  CHECK(backwards == 0);
  const uint64_t sleep_ns = 20 * 1000 * 1000;
  uint64_t before = tr_plat_now_ns();
  tr_plat_sleep_ns(sleep_ns);
  uint64_t after = tr_plat_now_ns();
  CHECK(after - before >= sleep_ns);
  CHECK(after - before < UINT64_C(5) * 1000 * 1000 * 1000);  // nanoseconds, not microseconds
}

TEST_CASE("opening a missing shared object fails naming the path", "[lib]") {
  const char *path = "/nonexistent/tilerun/libnot_here.so";
  tr_plat_lib *lib = reinterpret_cast<tr_plat_lib *>(0x1);  // must be reset to NULL
  RequireError(tr_plat_lib_open(path, &lib), TR_IO, {path});
  CHECK(lib == nullptr);
  RequireError(tr_plat_lib_open("", &lib), TR_IO, {"''"});
  CHECK(lib == nullptr);
}

namespace {

// A little-endian ELF header (64-bit unless `wide` is false) with `phnum` program headers at
// byte 64 (52 in 32-bit), each a PT_LOAD of `filesz` bytes at offset 0; no section headers.
std::string ElfHeader(bool wide, uint16_t phnum, uint64_t filesz) {
  std::string h(wide ? 64 : 52, '\0');
  h[0] = 0x7f, h[1] = 'E', h[2] = 'L', h[3] = 'F', h[4] = wide ? 2 : 1, h[5] = 1, h[6] = 1;
  auto put = [](std::string &b, size_t at, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) b[at + i] = (char)((v >> (8 * i)) & 0xff);
  };
  put(h, 16, 3, 2);  // ET_DYN
  put(h, wide ? 32 : 28, h.size(), wide ? 8 : 4);  // e_phoff
  put(h, wide ? 54 : 42, wide ? 56 : 32, 2);       // e_phentsize
  put(h, wide ? 56 : 44, phnum, 2);                // e_phnum
  for (uint16_t i = 0; i < phnum; i++) {
    std::string p(wide ? 56 : 32, '\0');
    put(p, 0, 1, 4);  // PT_LOAD at offset 0
    put(p, wide ? 32 : 16, filesz, wide ? 8 : 4);
    h += p;
  }
  return h;
}

}  // namespace

TEST_CASE("a shared object is checked before the loader sees it: ELF magic, header, program headers, "
          "segments", "[lib]") {
  TempDir dir;
  auto check = [&](const std::string &name, const std::string &bytes) {
    std::string path = dir.Join(name);
    WriteFile(path, bytes);
    return Consume(tr_plat_lib_check(path.c_str()));
  };
  std::string prefix = "IOError: cannot load shared object '" + dir.path() + "/";
  std::string whole = ElfHeader(true, 1, 120);  // 64 + 56 bytes: its one segment is the file
  CHECK(check("libwhole.so", whole) == "Ok");
  CHECK(check("libtext.so", "name: x\nlibrary: y\n") ==
        prefix + "libtext.so': not an ELF file (it begins with 6e 61 6d 65, not 7f 45 4c 46)");
  CHECK(check("libempty.so", "") == prefix + "libempty.so': not an ELF file (it is empty)");
  CHECK(check("libtiny.so", "\x7f" "EL") == prefix + "libtiny.so': not an ELF file (it begins with 7f 45 4c, not 7f 45 4c 46)");
  CHECK(check("libshort.so", whole.substr(0, 40)) ==
        prefix + "libshort.so': truncated: it is 40 bytes long, shorter than its ELF header (64 bytes)");
  CHECK(check("libshort32.so", ElfHeader(false, 0, 0).substr(0, 40)) ==
        prefix + "libshort32.so': truncated: it is 40 bytes long, shorter than its ELF header (52 bytes)");
  CHECK(check("libphdrs.so", ElfHeader(true, 2, 64).substr(0, 100)) ==
        prefix + "libphdrs.so': truncated: it is 100 bytes long, but its program headers end at byte 176");
  CHECK(check("libsegment.so", ElfHeader(true, 1, 4096)) ==
        prefix + "libsegment.so': truncated: it is 120 bytes long, but its loadable segment at program header 0 "
                 "ends at byte 4096");
  // a bss-only segment (nothing from the file) may start past its end, as lld emits one
  std::string bss = ElfHeader(true, 1, 0);
  bss[64 + 8] = (char)0x10;  // p_offset 4096 + 16: past the file's 120 bytes
  bss[64 + 9] = (char)0x10;
  CHECK(check("libbss.so", bss) == "Ok");
  // PN_XNUM: the program header count is elsewhere (section 0); the loader reads it, not the check
  std::string xnum = ElfHeader(true, 0, 0);
  xnum[56] = (char)0xff;
  xnum[57] = (char)0xff;
  CHECK(check("libxnum.so", xnum) == "Ok");
  std::string odd = whole;
  odd[4] = 3;
  CHECK(check("libodd.so", odd) ==
        prefix + "libodd.so': its ELF header has class 3 and byte order 1 (known: 1 or 2 each)");
  // a missing file passes to the loader, which names it; a name the loader searches for is not checked
  CHECK(Consume(tr_plat_lib_check("/nonexistent/tilerun/libnot_here.so")) == "Ok");
  // tr_plat_lib_open refuses what the check refuses, with the check's text, before dlopen
  tr_plat_lib *lib = reinterpret_cast<tr_plat_lib *>(0x1);
  std::string cut = dir.Join("libsegment.so");
  CHECK(Consume(tr_plat_lib_open(cut.c_str(), &lib)) ==
        prefix + "libsegment.so': truncated: it is 120 bytes long, but its loadable segment at program header 0 "
                 "ends at byte 4096");
  CHECK(lib == nullptr);
}

TEST_CASE("libm loads and its symbols are found; a missing one is named", "[lib]") {
  tr_plat_lib *lib = nullptr;
  REQUIRE_OK(tr_plat_lib_open("libm.so.6", &lib));
  REQUIRE(lib != nullptr);
  CHECK(std::string(tr_plat_lib_path(lib)) == "libm.so.6");

  void *address = tr_plat_lib_symbol(lib, "cos");
  REQUIRE(address != nullptr);
  auto cos_fn = reinterpret_cast<double (*)(double)>(address);
  CHECK(cos_fn(0.0) == 1.0);
  CHECK(cos_fn(0.5) == Approx(std::cos(0.5)));

  void *found = nullptr;
  REQUIRE_OK(tr_plat_lib_find(lib, "sin", &found));
  REQUIRE(found != nullptr);
  CHECK(reinterpret_cast<double (*)(double)>(found)(0.0) == 0.0);

  CHECK(tr_plat_lib_symbol(lib, "tilerun_no_such_symbol") == nullptr);
  found = reinterpret_cast<void *>(0x1);
  RequireError(tr_plat_lib_find(lib, "tilerun_no_such_symbol", &found), TR_IO,
               {"'tilerun_no_such_symbol'", "'libm.so.6'"});
  CHECK(found == nullptr);

  // a table of entry points bound at once; the first missing one is named
  struct {
    double (*cos)(double);
    double (*sin)(double);
    double (*none)(double);
  } table{};
  const tr_plat_lib_entry both[] = {{"cos", offsetof(decltype(table), cos)}, {"sin", offsetof(decltype(table), sin)}};
  REQUIRE_OK(tr_plat_lib_bind(lib, both, 2, &table));
  CHECK(table.cos(0.0) == 1.0);
  CHECK(table.sin(0.0) == 0.0);
  const tr_plat_lib_entry with_missing[] = {{"cos", offsetof(decltype(table), cos)},
                                             {"tilerun_no_such_symbol", offsetof(decltype(table), none)}};
  RequireError(tr_plat_lib_bind(lib, with_missing, 2, &table), TR_IO, {"'tilerun_no_such_symbol'", "'libm.so.6'"});
  CHECK(table.none == nullptr);

  tr_plat_lib_close(&lib);
  CHECK(lib == nullptr);
  tr_plat_lib_close(&lib);  // NULL is allowed
  tr_plat_lib_close(nullptr);
}

namespace {

struct Counter {
  tr_plat_mutex mutex;
  std::atomic<bool> go{false};  // the threads start counting together, so they contend
  long value = 0;
};

void Increment100k(void *arg) {
  Counter *counter = static_cast<Counter *>(arg);
  while (!counter->go.load()) {
  }
  for (int i = 0; i < 100000; ++i) {
    tr_plat_mutex_lock(&counter->mutex);
    // A read, a short pause, a write: without the lock, other threads' updates are lost.
    long value = counter->value;
    for (volatile int spin = 0; spin < 10; ++spin) {
    }
    counter->value = value + 1;
    tr_plat_mutex_unlock(&counter->mutex);
  }
}

}  // namespace

TEST_CASE("a mutex keeps a counter shared by 4 threads exact", "[thread]") {
  Counter counter;
  REQUIRE_OK(tr_plat_mutex_init(&counter.mutex));
  tr_plat_thread *threads[4] = {};
  for (tr_plat_thread *&thread : threads) {
    REQUIRE_OK(tr_plat_thread_start(Increment100k, &counter, &thread));
    REQUIRE(thread != nullptr);
  }
  counter.go.store(true);
  for (tr_plat_thread *&thread : threads) {
    tr_plat_thread_join(&thread);
    CHECK(thread == nullptr);
  }
  CHECK(counter.value == 400000);
  tr_plat_mutex_destroy(&counter.mutex);
  tr_plat_thread_join(nullptr);  // NULL is allowed
}

namespace {

// A one-slot mailbox: a producer hands over 1..n one at a time, waiting for each to be taken.
struct Mailbox {
  tr_plat_mutex mutex;
  tr_plat_cond changed;
  int value = 0;  // 0: empty
  bool full = false;
  long sum = 0;
  int taken = 0;
};

void Consume(void *arg) {
  Mailbox *box = static_cast<Mailbox *>(arg);
  tr_plat_mutex_lock(&box->mutex);
  for (;;) {
    while (!box->full) tr_plat_cond_wait(&box->changed, &box->mutex);
    int value = box->value;
    box->full = false;
    tr_plat_cond_broadcast(&box->changed);
    if (value < 0) break;  // the end
    box->sum += value;
    ++box->taken;
  }
  tr_plat_mutex_unlock(&box->mutex);
}

void Put(Mailbox *box, int value) {
  tr_plat_mutex_lock(&box->mutex);
  while (box->full) tr_plat_cond_wait(&box->changed, &box->mutex);
  box->value = value;
  box->full = true;
  tr_plat_cond_signal(&box->changed);
  tr_plat_mutex_unlock(&box->mutex);
}

}  // namespace

TEST_CASE("a condition hands values one at a time from a producer to a consumer", "[thread]") {
  Mailbox box;
  REQUIRE_OK(tr_plat_mutex_init(&box.mutex));
  REQUIRE_OK(tr_plat_cond_init(&box.changed));
  tr_plat_thread *consumer = nullptr;
  REQUIRE_OK(tr_plat_thread_start(Consume, &box, &consumer));
  for (int i = 1; i <= 10000; ++i) Put(&box, i);
  Put(&box, -1);
  tr_plat_thread_join(&consumer);
  // Each value taken exactly once: a lost wake-up hangs, a missed wait double counts.
  CHECK(box.taken == 10000);
  CHECK(box.sum == 10000L * 10001 / 2);
  tr_plat_cond_broadcast(&box.changed);  // nobody waiting is fine
  tr_plat_cond_signal(&box.changed);
  tr_plat_cond_destroy(&box.changed);
  tr_plat_mutex_destroy(&box.mutex);
}

TEST_CASE("the processor count is positive and agrees with the system's", "[thread]") {
  int n = tr_plat_cpu_count();
  CHECK(n >= 1);
  CHECK(n <= static_cast<int>(std::thread::hardware_concurrency() == 0
                                  ? 1 << 20
                                  : std::thread::hardware_concurrency()));
}

namespace {

tr_plat_once g_once = TR_PLAT_ONCE_INIT;
int g_once_calls = 0;  // written only inside the once

void SlowInit() {
  tr_plat_sleep_ns(20 * 1000 * 1000);  // others arrive while this runs
  ++g_once_calls;
}

struct OnceResult {
  int calls_seen = -1;
};

void RunOnce(void *arg) {
  tr_plat_once_run(&g_once, SlowInit);
  // Returning means SlowInit has finished, whichever thread ran it.
  static_cast<OnceResult *>(arg)->calls_seen = g_once_calls;
}

}  // namespace

TEST_CASE("a once runs its function exactly once and makes every caller wait", "[thread]") {
  OnceResult results[6];
  tr_plat_thread *threads[6] = {};
  for (int i = 0; i < 6; ++i) REQUIRE_OK(tr_plat_thread_start(RunOnce, &results[i], &threads[i]));
  for (tr_plat_thread *&thread : threads) tr_plat_thread_join(&thread);
  CHECK(g_once_calls == 1);
  for (const OnceResult &result : results) CHECK(result.calls_seen == 1);
  tr_plat_once_run(&g_once, SlowInit);
  CHECK(g_once_calls == 1);
}

namespace {

// What happened as a thread ended, in order.
struct ExitLog {
  std::mutex mutex;
  std::vector<std::string> events;
  int registered = -1;
  int key_set = -1;  // pthread_setspecific's result (Catch2's checks are for the test's thread)
  void Add(const char *what) {
    std::lock_guard<std::mutex> hold(mutex);
    events.push_back(what);
  }
};

pthread_key_t g_exit_key;  // a library's per-thread clean-up, made before the hooks are registered
void KeyCleanup(void *log) { static_cast<ExitLog *>(log)->Add("key destructor"); }
void HookA(void *log) { static_cast<ExitLog *>(log)->Add("hook a"); }
void HookB(void *log) { static_cast<ExitLog *>(log)->Add("hook b"); }
// registers hook b while the thread's hooks run
void HookRegisteringB(void *log) {
  ExitLog *l = static_cast<ExitLog *>(log);
  l->Add("hook registering b");
  l->registered += tr_plat_at_thread_exit(HookB, log);
}
void RegisterAThenTheRegistering(void *arg) {
  ExitLog *log = static_cast<ExitLog *>(arg);
  log->registered = tr_plat_at_thread_exit(HookA, log) + tr_plat_at_thread_exit(HookRegisteringB, log);
  log->Add("function returned");
}

void RegisterAndReturn(void *arg) {
  ExitLog *log = static_cast<ExitLog *>(arg);
  log->key_set = pthread_setspecific(g_exit_key, log);
  int a = tr_plat_at_thread_exit(HookA, log);
  int b = tr_plat_at_thread_exit(HookB, log);
  log->registered = a + b;
  log->Add("function returned");
}

}  // namespace

TEST_CASE("thread exit hooks run as the thread ends, last first, before pthread key destructors", "[thread]") {
  REQUIRE(pthread_key_create(&g_exit_key, KeyCleanup) == 0);
  ExitLog log;
  tr_plat_thread *thread = nullptr;
  REQUIRE_OK(tr_plat_thread_start(RegisterAndReturn, &log, &thread));
  tr_plat_thread_join(&thread);  // returns once the thread, hooks included, has ended
  pthread_key_delete(g_exit_key);
  REQUIRE(log.key_set == 0);
#if defined(__GLIBC__)
  REQUIRE(log.registered == 2);  // glibc has the hook: it must be taken
#endif
  if (log.registered == 2) {
    CHECK(log.events == std::vector<std::string>{"function returned", "hook b", "hook a", "key destructor"});
  } else {  // none registered: none runs
    CHECK(log.registered == 0);
    CHECK(log.events == std::vector<std::string>{"function returned", "key destructor"});
  }
}

TEST_CASE("a thread exit hook registered while the hooks run runs next", "[thread]") {
  ExitLog log;
  tr_plat_thread *thread = nullptr;
  REQUIRE_OK(tr_plat_thread_start(RegisterAThenTheRegistering, &log, &thread));
  tr_plat_thread_join(&thread);
#if defined(__GLIBC__)
  REQUIRE(log.registered == 3);
#endif
  if (log.registered == 3) {
    CHECK(log.events == std::vector<std::string>{"function returned", "hook registering b", "hook b", "hook a"});
  } else {
    CHECK(log.registered == 0);
    CHECK(log.events == std::vector<std::string>{"function returned"});
  }
}

TEST_CASE("list_dir returns the entries sorted byte-wise", "[fs]") {
  TempDir dir;
  for (const char *name : {"b", "a.txt", "C", "a", "_x"}) WriteFile(dir.Join(name), name);
  std::filesystem::create_directory(dir.Join("dir"));

  char **names = nullptr;
  size_t count = 0;
  REQUIRE_OK(tr_plat_list_dir(dir.path().c_str(), &names, &count));
  std::vector<std::string> listed(names, names + count);
  CHECK(listed == std::vector<std::string>{"C", "_x", "a", "a.txt", "b", "dir"});
  CHECK(names[count] == nullptr);
  tr_plat_free_names(&names, count);
  CHECK(names == nullptr);

  std::filesystem::create_directory(dir.Join("empty"));
  REQUIRE_OK(tr_plat_list_dir(dir.Join("empty").c_str(), &names, &count));
  CHECK(count == 0);
  tr_plat_free_names(&names, count);
}

TEST_CASE("list_dir fails naming the path for a missing directory or a file", "[fs]") {
  TempDir dir;
  std::string missing = dir.Join("no-such-dir");
  char **names = reinterpret_cast<char **>(0x1);
  size_t count = 7;
  RequireError(tr_plat_list_dir(missing.c_str(), &names, &count), TR_IO,
               {"'" + missing + "'", "No such file or directory"});
  CHECK(names == nullptr);
  CHECK(count == 0);

  std::string file = dir.Join("plain");
  WriteFile(file, "x");
  RequireError(tr_plat_list_dir(file.c_str(), &names, &count), TR_IO,
               {"'" + file + "'", "Not a directory"});
}

TEST_CASE("read_file round-trips content and fails naming the path", "[fs]") {
  TempDir dir;
  std::string path = dir.Join("data.bin");
  std::string content = "line one\nline two\n";
  content += std::string("\0binary\xff", 8);
  for (int i = 0; i < 5000; ++i) content += static_cast<char>(i * 7);
  WriteFile(path, content);

  char *data = nullptr;
  size_t size = 0;
  REQUIRE_OK(tr_plat_read_file(path.c_str(), &data, &size));
  REQUIRE(data != nullptr);
  CHECK(size == content.size());
  CHECK(std::string(data, size) == content);
  CHECK(data[size] == '\0');
  free(data);

  // Rewriting truncates.
  WriteFile(path, "");
  REQUIRE_OK(tr_plat_read_file(path.c_str(), &data, &size));
  REQUIRE(data != nullptr);
  CHECK(size == 0);
  CHECK(data[0] == '\0');
  free(data);

  std::string missing = dir.Join("missing.txt");
  data = reinterpret_cast<char *>(0x1);
  size = 7;
  RequireError(tr_plat_read_file(missing.c_str(), &data, &size), TR_IO,
               {"'" + missing + "'", "No such file or directory"});
  CHECK(data == nullptr);
  CHECK(size == 0);

  RequireError(tr_plat_read_file(dir.path().c_str(), &data, &size), TR_IO,
               {"'" + dir.path() + "'", "Is a directory"});
}

TEST_CASE("read_file reads files whose size the system does not report", "[fs]") {
  const char *path = "/proc/self/status";
  if (!tr_plat_file_exists(path)) return;  // not Linux
  char *data = nullptr;
  size_t size = 0;
  REQUIRE_OK(tr_plat_read_file(path, &data, &size));
  CHECK(size > 0);
  CHECK(std::strlen(data) == size);
  CHECK(std::string(data).find("Name:") != std::string::npos);
  free(data);
}

TEST_CASE("write_file fails naming the path", "[fs]") {
  TempDir dir;
  std::string path = dir.Join("no-such-dir/file");
  RequireError(tr_plat_write_file(path.c_str(), "x", 1), TR_IO, {"'" + path + "'"});
}

TEST_CASE("is_dir and file_exists tell files, directories and nothing apart", "[fs]") {
  TempDir dir;
  std::string file = dir.Join("file");
  WriteFile(file, "x");
  CHECK(tr_plat_is_dir(dir.path().c_str()) == 1);
  CHECK(tr_plat_file_exists(dir.path().c_str()) == 1);
  CHECK(tr_plat_is_dir(file.c_str()) == 0);
  CHECK(tr_plat_file_exists(file.c_str()) == 1);
  CHECK(tr_plat_is_dir(dir.Join("none").c_str()) == 0);
  CHECK(tr_plat_file_exists(dir.Join("none").c_str()) == 0);
  CHECK(tr_plat_same_file(file.c_str(), file.c_str()) == 1);
  CHECK(tr_plat_same_file(file.c_str(), (dir.path() + "/./file").c_str()) == 1);
  CHECK(tr_plat_same_file(file.c_str(), dir.path().c_str()) == 0);
  CHECK(tr_plat_same_file(file.c_str(), dir.Join("none").c_str()) == 0);
  CHECK(tr_plat_is_socket(file.c_str()) == 0);
  CHECK(tr_plat_is_socket(dir.path().c_str()) == 0);
  CHECK(tr_plat_is_socket(dir.Join("none").c_str()) == 0);
}

TEST_CASE("make_temp_dir makes distinct absolute directories named by the prefix", "[fs]") {
  char *first = nullptr;
  char *second = nullptr;
  REQUIRE_OK(tr_plat_make_temp_dir("tilerun-prefix-", &first));
  REQUIRE_OK(tr_plat_make_temp_dir("tilerun-prefix-", &second));
  CHECK(std::string(first) != std::string(second));
  for (const char *path : {first, second}) {
    CHECK(path[0] == '/');
    CHECK(tr_plat_is_dir(path) == 1);
    std::string base = std::filesystem::path(path).filename().string();
    CHECK(base.rfind("tilerun-prefix-", 0) == 0);
    REQUIRE_OK(tr_plat_remove_tree(path));
    CHECK(tr_plat_file_exists(path) == 0);
  }
  free(first);
  free(second);

  char *out = reinterpret_cast<char *>(0x1);
  RequireError(tr_plat_make_temp_dir("a/b", &out), TR_VALUE, {"'a/b'"});
  CHECK(out == nullptr);
}

TEST_CASE("remove_tree removes a tree without following links out of it", "[fs]") {
  TempDir outside;
  std::string keep = outside.Join("keep.txt");
  WriteFile(keep, "still here");

  TempDir tree;
  std::filesystem::create_directories(tree.Join("a/b/c"));
  WriteFile(tree.Join("top.txt"), "1");
  WriteFile(tree.Join("a/b/mid.txt"), "2");
  WriteFile(tree.Join("a/b/c/deep.txt"), "3");
  std::filesystem::create_directory_symlink(outside.path(), tree.Join("a/link-out"));

  REQUIRE_OK(tr_plat_remove_tree(tree.path().c_str()));
  CHECK(tr_plat_file_exists(tree.path().c_str()) == 0);
  CHECK(tr_plat_file_exists(keep.c_str()) == 1);
  CHECK(tr_plat_is_dir(outside.path().c_str()) == 1);

  RequireError(tr_plat_remove_tree(tree.path().c_str()), TR_IO,
               {"'" + tree.path() + "'", "No such file or directory"});

  // A single file is removed too.
  REQUIRE_OK(tr_plat_remove_tree(keep.c_str()));
  CHECK(tr_plat_file_exists(keep.c_str()) == 0);
}

TEST_CASE("the separators are POSIX's", "[fs]") {
  CHECK(std::string(tr_plat_path_separator_list()) == ":");
  CHECK(std::string(tr_plat_path_separator_dir()) == "/");
}

TEST_CASE("list_files gives the full paths of the names with a suffix, sorted") {
  char *dir = nullptr;
  REQUIRE(tr_plat_make_temp_dir("tilerun-files", &dir) == nullptr);
  std::string base = dir;
  for (const char *name : {"b.yaml", "a.yaml", ".yaml", "c.yml", "notes.txt"}) {
    std::string path = base + "/" + name;
    REQUIRE(tr_plat_write_file(path.c_str(), "x", 1) == nullptr);
  }
  char **paths = nullptr;
  size_t n = 0;
  REQUIRE(tr_plat_list_files(dir, ".yaml", &paths, &n) == nullptr);
  REQUIRE(n == 2);  // ".yaml" alone is not longer than the suffix
  CHECK(std::string(paths[0]) == base + "/a.yaml");
  CHECK(std::string(paths[1]) == base + "/b.yaml");
  tr_plat_free_names(&paths, n);
  CHECK(paths == nullptr);
  tr_status *s = tr_plat_list_files("/nonexistent/dir", ".yaml", &paths, &n);
  REQUIRE(s != nullptr);
  CHECK(std::string(tr_status_message(s)).find("/nonexistent/dir") != std::string::npos);
  CHECK(paths == nullptr);
  tr_status_destroy(&s);
  s = tr_plat_remove_tree(dir);
  tr_status_destroy(&s);
  free(dir);
}

TEST_CASE("child processes: exit status, kill, a program that cannot start") {
  const char *ok_argv[] = {"/bin/sh", "-c", "exit 3", nullptr};
  tr_plat_process *p = nullptr;
  REQUIRE(tr_plat_process_spawn(ok_argv, &p) == nullptr);
  CHECK(tr_plat_process_wait(&p, 5000) == 3);
  CHECK(p == nullptr);
  const char *sleeper[] = {"/bin/sleep", "30", nullptr};
  REQUIRE(tr_plat_process_spawn(sleeper, &p) == nullptr);
  tr_plat_process_kill(p, 0);
  CHECK(tr_plat_process_wait(&p, 5000) == 128 + 15);
  REQUIRE(tr_plat_process_spawn(sleeper, &p) == nullptr);
  uint64_t start = tr_plat_now_ns();
  CHECK(tr_plat_process_wait(&p, 100) == -1);  // did not end in time: killed and reaped
  CHECK(tr_plat_now_ns() - start < 2000000000ull);
  const char *missing[] = {"/nonexistent/program", nullptr};
  tr_status *s = tr_plat_process_spawn(missing, &p);
  REQUIRE(s != nullptr);
  CHECK(std::string(tr_status_message(s)).find("cannot start '/nonexistent/program': ") == 0);
  tr_status_destroy(&s);
}

#ifdef __linux__
static void spawn_sleeper(void *arg) {
  const char *sleeper[] = {"/bin/sleep", "30", nullptr};
  tr_status *s = tr_plat_process_spawn(sleeper, static_cast<tr_plat_process **>(arg));
  tr_status_destroy(&s);
}

TEST_CASE("a child is tied to the thread that started it: it is stopped when that thread ends") {
  tr_plat_process *p = nullptr;
  tr_plat_thread *t = nullptr;
  REQUIRE(tr_plat_thread_start(spawn_sleeper, &p, &t) == nullptr);
  tr_plat_thread_join(&t);
  REQUIRE(p != nullptr);
  uint64_t start = tr_plat_now_ns();
  CHECK(tr_plat_process_wait(&p, 10000) == 128 + 15);  // SIGTERM, long before sleep's 30 s
  CHECK(tr_plat_now_ns() - start < 5000000000ull);
}
#endif

TEST_CASE("write_file_atomic replaces a file whole and leaves no temporary file", "[fs]") {
  TempDir dir;
  std::string path = dir.Join("cache.bin");
  REQUIRE_OK(tr_plat_write_file_atomic(path.c_str(), "first", 5));
  WriteFile(dir.Join("other"), "x");
  std::string big(1 << 20, 'b');
  REQUIRE_OK(tr_plat_write_file_atomic(path.c_str(), big.data(), big.size()));
  char *data = nullptr;
  size_t size = 0;
  REQUIRE_OK(tr_plat_read_file(path.c_str(), &data, &size));
  CHECK(std::string(data, size) == big);
  free(data);
  REQUIRE_OK(tr_plat_write_file_atomic(path.c_str(), "", 0));  // empty is a file too
  REQUIRE_OK(tr_plat_read_file(path.c_str(), &data, &size));
  CHECK(size == 0);
  free(data);

  char **names = nullptr;
  size_t count = 0;
  REQUIRE_OK(tr_plat_list_dir(dir.path().c_str(), &names, &count));
  REQUIRE(count == 2);  // no "cache.bin.tmp-..." left behind
  CHECK(std::string(names[0]) == "cache.bin");
  CHECK(std::string(names[1]) == "other");
  tr_plat_free_names(&names, count);

  // A missing directory: the final path is named, nothing is created.
  std::string missing = dir.Join("no-such-dir/file");
  RequireError(tr_plat_write_file_atomic(missing.c_str(), "x", 1), TR_IO,
               {"'" + missing + "'", "No such file or directory"});
  // A directory in the way of the rename: the temporary file is removed again.
  std::filesystem::create_directory(dir.Join("sub"));
  WriteFile(dir.Join("sub/inner"), "x");
  RequireError(tr_plat_write_file_atomic(dir.Join("sub").c_str(), "x", 1), TR_IO,
               {"'" + dir.Join("sub") + "'"});
  REQUIRE_OK(tr_plat_list_dir(dir.path().c_str(), &names, &count));
  CHECK(count == 3);
  tr_plat_free_names(&names, count);
}

TEST_CASE("write_file_atomic: concurrent writers of one path each leave a whole file", "[fs]") {
  TempDir dir;
  std::string path = dir.Join("shared");
  struct Writer {
    std::string path;
    std::string content;
    std::atomic<int> *failures;
  };
  std::atomic<int> failures{0};
  std::vector<Writer> writers;
  for (char c : {'a', 'b', 'c', 'd'}) writers.push_back({path, std::string(256 * 1024, c), &failures});
  std::vector<tr_plat_thread *> threads(writers.size());
  for (size_t i = 0; i < writers.size(); ++i) {
    REQUIRE_OK(tr_plat_thread_start(
        [](void *arg) {
          auto *w = static_cast<Writer *>(arg);
          for (int round = 0; round < 20; ++round) {
            tr_status *s = tr_plat_write_file_atomic(w->path.c_str(), w->content.data(),
                                                     w->content.size());
            if (s != nullptr) ++*w->failures;
            tr_status_destroy(&s);
          }
        },
        &writers[i], &threads[i]));
  }
  // Meanwhile every read sees one writer's whole content.
  int torn = 0, reads = 0;
  for (int i = 0; i < 200; ++i) {
    char *data = nullptr;
    size_t size = 0;
    tr_status *s = tr_plat_read_file(path.c_str(), &data, &size);
    if (s == nullptr) {
      ++reads;
      std::string text(data, size);
      if (size != 256 * 1024 || text != std::string(size, text[0])) ++torn;
    }
    tr_status_destroy(&s);
    free(data);
  }
  for (tr_plat_thread *&t : threads) tr_plat_thread_join(&t);
  CHECK(failures == 0);
  CHECK(torn == 0);
  INFO("reads that found the file: " << reads);
  char **names = nullptr;
  size_t count = 0;
  REQUIRE_OK(tr_plat_list_dir(dir.path().c_str(), &names, &count));
  CHECK(count == 1);
  tr_plat_free_names(&names, count);
}

TEST_CASE("rename replaces the target atomically and names both paths on failure", "[fs]") {
  TempDir dir;
  std::string from = dir.Join("from"), to = dir.Join("to");
  WriteFile(from, "new");
  WriteFile(to, "old");
  REQUIRE_OK(tr_plat_rename(from.c_str(), to.c_str()));
  CHECK(tr_plat_file_exists(from.c_str()) == 0);
  char *data = nullptr;
  size_t size = 0;
  REQUIRE_OK(tr_plat_read_file(to.c_str(), &data, &size));
  CHECK(std::string(data, size) == "new");
  free(data);
  RequireError(tr_plat_rename(from.c_str(), to.c_str()), TR_IO,
               {"'" + from + "'", "'" + to + "'", "No such file or directory"});
}

TEST_CASE("make_dirs makes every missing level and accepts what exists", "[fs]") {
  TempDir dir;
  std::string deep = dir.Join("a/b//c/d/");
  REQUIRE_OK(tr_plat_make_dirs(deep.c_str()));
  CHECK(tr_plat_is_dir(dir.Join("a/b/c/d").c_str()) == 1);
  REQUIRE_OK(tr_plat_make_dirs(deep.c_str()));  // all there already
  REQUIRE_OK(tr_plat_make_dirs(dir.Join("a/b/e").c_str()));
  CHECK(tr_plat_is_dir(dir.Join("a/b/e").c_str()) == 1);

  // A regular file in the way is named, and nothing under it is attempted.
  WriteFile(dir.Join("a/file"), "x");
  RequireError(tr_plat_make_dirs(dir.Join("a/file/sub/dir").c_str()), TR_IO,
               {"'" + dir.Join("a/file") + "'", "exists and is not a directory"});
  RequireError(tr_plat_make_dirs(dir.Join("a/file").c_str()), TR_IO,
               {"exists and is not a directory"});
  RequireError(tr_plat_make_dirs(""), TR_VALUE, {"empty"});
}

TEST_CASE("shared memory: a segment created here is mapped again by name, and names are checked", "[shm]") {
  char name[TR_PLAT_SHM_NAME_MAX];
  snprintf(name, sizeof(name), "/tilerun-test-%lld-%llu", (long long)tr_plat_process_id(),
           (unsigned long long)(tr_plat_now_ns() % 1000000));
  void *a = nullptr;
  REQUIRE_OK(tr_plat_shm_create(name, 10000, &a));
  REQUIRE(a != nullptr);
  CHECK(static_cast<unsigned char *>(a)[9999] == 0);  // zero-filled
  static_cast<unsigned char *>(a)[1234] = 77;
  // A second mapping sees the same bytes, and its size.
  void *b = nullptr;
  size_t size = 0;
  REQUIRE_OK(tr_plat_shm_map(name, &b, &size));
  CHECK(size == 10000);
  CHECK(b != a);
  CHECK(tr_plat_shm_exists(name) == 1);
  CHECK(static_cast<unsigned char *>(b)[1234] == 77);
  static_cast<unsigned char *>(b)[5] = 9;
  CHECK(static_cast<unsigned char *>(a)[5] == 9);
  // The name cannot be created twice; once unlinked it cannot be mapped, but mappings stay.
  void *again = nullptr;
  RequireError(tr_plat_shm_create(name, 100, &again), TR_IO, {name, "cannot create"});
  CHECK(again == nullptr);
  tr_plat_shm_unlink(name);
  RequireError(tr_plat_shm_map(name, &again, &size), TR_IO, {name, "No such file"});
  CHECK(tr_plat_shm_exists(name) == 0);
  CHECK(tr_plat_shm_exists("bad") == 0);
  CHECK(static_cast<unsigned char *>(b)[1234] == 77);
  tr_plat_shm_unmap(a, 10000);
  tr_plat_shm_unmap(b, 10000);
  tr_plat_shm_unlink(name);  // gone already: fine

  RequireError(tr_plat_shm_create("no-slash", 10, &again), TR_VALUE, {"'no-slash'", "not a shared memory name"});
  RequireError(tr_plat_shm_create("/a/b", 10, &again), TR_VALUE, {"'/a/b'"});
  RequireError(tr_plat_shm_map("/", &again, &size), TR_VALUE, {"'/'"});
  RequireError(tr_plat_shm_create(name, 0, &again), TR_VALUE, {"0 bytes"});
  CHECK(tr_plat_process_id() > 0);
}

TEST_CASE("tilerun's own file and the prefix it stands in") {
  char path[4096], prefix[4096];
  REQUIRE(tr_plat_self_path(path, sizeof(path)) == nullptr);
  CHECK(path[0] == '/');
  CHECK(tr_plat_file_exists(path));
  REQUIRE(tr_plat_self_prefix(prefix, sizeof(prefix)) == nullptr);
  std::string p(path), pre(prefix);
  REQUIRE(p.size() > pre.size());
  CHECK(p.compare(0, pre.size(), pre) == 0);  // the file lies under its prefix, two folders down
  CHECK(std::count(p.begin() + (long)pre.size(), p.end(), '/') == (pre == "/" ? 1 : 2));
  char tiny[2];
  tr_status *small = tr_plat_self_path(tiny, sizeof(tiny));
  REQUIRE(small != nullptr);
  CHECK(std::string(tr_status_message(small)).find("does not fit") != std::string::npos);
  tr_status_destroy(&small);
}
