/* platform.h: the OS layer; every operating-system call of tilerun goes through tr_plat_. */
#ifndef TILERUN_PLATFORM_PLATFORM_H_
#define TILERUN_PLATFORM_PLATFORM_H_

/* Only standard C headers here: callers never see an OS header. */
#include <stddef.h>
#include <stdint.h>

#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Environment ------------------------------------------------------------------------- */

/* The value of environment variable `name`, or NULL when it is unset. Cannot fail. The string
 * belongs to the environment: copy it if you keep it, since a later tr_plat_setenv of the same
 * name may free or change it. Safe to call from several threads at once, but not while another
 * thread calls tr_plat_setenv. */
const char *tr_plat_getenv(const char *name);

/* Sets environment variable `name` to `value` (overwriting), or unsets it when `value` is NULL.
 * Meant for tests and for start-up, before threads exist. Fails with TR_VALUE when `name` is
 * empty or contains '=' (the message names it), TR_OUT_OF_MEMORY when the environment cannot
 * grow. Not thread-safe: no other thread may read or write the environment meanwhile. The
 * caller frees a returned status. */
tr_status *tr_plat_setenv(const char *name, const char *value) TR_MUST_USE;

/* ---- Clock ------------------------------------------------------------------------------- */

/* Nanoseconds on a monotonic clock with an arbitrary origin: only differences mean anything.
 * Never goes backwards. Cannot fail. Thread-safe. */
uint64_t tr_plat_now_ns(void);

/* Sleeps the calling thread for at least `ns` nanoseconds (resuming after signals). Cannot
 * fail. Thread-safe. */
void tr_plat_sleep_ns(uint64_t ns);

/* ---- Shared objects ---------------------------------------------------------------------- */

/* A loaded shared object (a .so here). Opaque; single owner: close it with tr_plat_lib_close. */
typedef struct tr_plat_lib tr_plat_lib;

/* Loads the shared object at `path` with all its symbols resolved now and kept local to it.
 * A path without a '/' is searched for the way the system loader does ("libm.so.6"). Sets
 * *out to NULL first; on success *out is the caller's, to close with tr_plat_lib_close. Fails
 * with TR_IO naming the path and the loader's own text (missing file, wrong architecture,
 * unresolved symbol...), or what tr_plat_lib_check found wrong, before the loader sees the file.
 * Thread-safe. */
tr_status *tr_plat_lib_open(const char *path, tr_plat_lib **out) TR_MUST_USE;

/* Checks that the file at `path` can be handed to the loader: a truncated or foreign file can
 * kill the process inside it (SIGBUS). Here (ELF) the file begins with the ELF magic and holds
 * everything its ELF header, program headers, loadable segments and section headers say it
 * does. Fails with TR_IO naming the path and what is wrong ("not an ELF file ...", "truncated:
 * it is N bytes long, but ..."). NULL when it passes, and when the file cannot be opened or is
 * not a regular file (the loader then says why). tr_plat_lib_open runs it on every path with a
 * directory part. Thread-safe. */
tr_status *tr_plat_lib_check(const char *path) TR_MUST_USE;

/* The address of symbol `name` in `lib`, or NULL when the library does not define it. Cannot
 * fail otherwise. The address stays valid until the library is closed. Thread-safe. */
void *tr_plat_lib_symbol(tr_plat_lib *lib, const char *name);

/* As tr_plat_lib_symbol, but a missing symbol is an error: sets *out to NULL first, then to the
 * address; fails with TR_IO naming the symbol, the library's path and the loader's text.
 * Thread-safe. */
tr_status *tr_plat_lib_find(tr_plat_lib *lib, const char *name, void **out) TR_MUST_USE;

/* One entry point to bind: its name, and where its address goes in the caller's table of
 * function pointers (offsetof the member). */
typedef struct tr_plat_lib_entry {
  const char *name;
  size_t offset;
} tr_plat_lib_entry;

/* Finds each of `symbols` in `lib` and writes its address into `table` at its offset (as a
 * function pointer: the loader's contract, POSIX dlsym, gives function and data pointers one
 * size). Stops at the first one missing, with tr_plat_lib_find's TR_IO naming it; the table is
 * then partly written (the caller clears it). Thread-safe. */
tr_status *tr_plat_lib_bind(tr_plat_lib *lib, const tr_plat_lib_entry *symbols, size_t n, void *table) TR_MUST_USE;

/* The path the library was opened with. Owned by the library. Cannot fail. Thread-safe. */
const char *tr_plat_lib_path(const tr_plat_lib *lib);

/* Closes *lib_p (NULL allowed) and sets *lib_p to NULL; symbols found in it must no longer be
 * used. The system may keep the object mapped while others still use it. Cannot fail. Not
 * thread-safe on one library (no other thread may use it meanwhile). */
void tr_plat_lib_close(tr_plat_lib **lib_p);

/* The absolute path of the file holding tilerun's own code (libtilerun.so, or the program it is
 * linked into), into buf. TR_IO where the loader cannot say; TR_VALUE where it does not fit. */
tr_status *tr_plat_self_path(char *buf, size_t size) TR_MUST_USE;

/* The same for the loaded file holding `code` (a function or symbol address from a library
 * tr_plat_lib_open loaded, say). Errors as tr_plat_self_path. Thread-safe. */
tr_status *tr_plat_code_path(const void *code, char *buf, size_t size) TR_MUST_USE;

/* The install prefix that file stands in: two folders up (<prefix>/lib/libtilerun.so.0 gives
 * <prefix>). Errors as tr_plat_self_path. */
tr_status *tr_plat_self_prefix(char *buf, size_t size) TR_MUST_USE;

/* ---- Threads and locks ------------------------------------------------------------------- */

/* A mutual-exclusion lock, not recursive, that callers embed in their own structs. Its storage
 * is opaque and large enough for every implementation's lock; touch it only through the
 * functions below. Not copyable once initialised. There is no static initialiser: initialise
 * lazily with tr_plat_once_run. */
typedef struct tr_plat_mutex {
  union {
    unsigned char bytes[64];
    long long align_ll;
    double align_d;
    void *align_p;
  } storage_;
} tr_plat_mutex;

/* Initialises *mutex. Fails with TR_OUT_OF_MEMORY when the system has no room for another lock
 * (the message says why); on failure *mutex is left unusable and needs no destroy. Not
 * thread-safe on one mutex. The caller frees a returned status. */
tr_status *tr_plat_mutex_init(tr_plat_mutex *mutex) TR_MUST_USE;

/* Locks the mutex, waiting as long as needed. Locking a mutex the calling thread already holds
 * is a broken contract (it may deadlock or abort). Cannot fail otherwise. Thread-safe. */
void tr_plat_mutex_lock(tr_plat_mutex *mutex);

/* Unlocks a mutex the calling thread holds (unlocking any other is a broken contract, with
 * undefined results). Cannot fail otherwise. Thread-safe. */
void tr_plat_mutex_unlock(tr_plat_mutex *mutex);

/* Releases what tr_plat_mutex_init took. The mutex must be unlocked and unused by any thread.
 * Cannot fail. */
void tr_plat_mutex_destroy(tr_plat_mutex *mutex);

/* A condition variable, used with a tr_plat_mutex; embedded like one (opaque storage, no static
 * initialiser, not copyable once initialised). */
typedef struct tr_plat_cond {
  union {
    unsigned char bytes[64];
    long long align_ll;
    double align_d;
    void *align_p;
  } storage_;
} tr_plat_cond;

/* Initialises *cond. Fails with TR_OUT_OF_MEMORY when the system has no room for it (the message
 * says why); on failure *cond is left unusable and needs no destroy. Not thread-safe on one
 * condition. The caller frees a returned status. */
tr_status *tr_plat_cond_init(tr_plat_cond *cond) TR_MUST_USE;

/* Unlocks `mutex` (which the calling thread holds), waits until the condition is signalled or
 * broadcast, and locks `mutex` again before returning. It may also return spuriously: callers
 * wait in a loop over their own predicate. Cannot fail otherwise. Thread-safe. */
void tr_plat_cond_wait(tr_plat_cond *cond, tr_plat_mutex *mutex);

/* Wakes at least one thread waiting on the condition (signal) or all of them (broadcast); none
 * waiting is fine. Cannot fail. Thread-safe. */
void tr_plat_cond_signal(tr_plat_cond *cond);
void tr_plat_cond_broadcast(tr_plat_cond *cond);

/* Releases what tr_plat_cond_init took. No thread may wait on it. Cannot fail. */
void tr_plat_cond_destroy(tr_plat_cond *cond);

/* Runs a function exactly once across all threads. Initialise with TR_PLAT_ONCE_INIT (it may
 * be static); touch only through tr_plat_once_run. */
typedef struct tr_plat_once {
  union {
    int state;
    void *align_p;
  } storage_;
} tr_plat_once;

#define TR_PLAT_ONCE_INIT {{0}}

/* Calls fn() the first time any thread reaches this `once`; every caller returns only after fn
 * has returned. Cannot fail. Thread-safe. fn may itself run another `once`, but must not wait
 * on a thread that runs one, and must not reach its own `once` again. */
void tr_plat_once_run(tr_plat_once *once, void (*fn)(void));

/* The number of processors the calling process may run on (its affinity mask where the system
 * has one, else the processors online); at least 1. Cannot fail. Thread-safe. */
int tr_plat_cpu_count(void);

/* A running thread. Opaque; single owner: join it with tr_plat_thread_join. */
typedef struct tr_plat_thread tr_plat_thread;

/* Starts a thread running fn(arg). Sets *out to NULL first; on success *out is the caller's,
 * who must join it exactly once. Fails with TR_OUT_OF_MEMORY when the system refuses a new
 * thread (the message gives the system's reason); then fn never runs. Thread-safe. */
tr_status *tr_plat_thread_start(void (*fn)(void *arg), void *arg,
                                tr_plat_thread **out) TR_MUST_USE;

/* Waits for the thread *t_p (NULL allowed) to return from its function, frees it and sets *t_p
 * to NULL. A thread joining itself is a broken contract (it aborts). Not thread-safe on one
 * thread handle: one joiner only. */
void tr_plat_thread_join(tr_plat_thread **t_p);

/* Arranges for fn(arg) to run on the calling thread when it ends (returns from its function, or
 * calls the system's thread exit; for the thread that ends the process, at exit()), before the
 * per-thread clean-up other libraries register with the system: the CUDA driver's, for one, so
 * that fn still finds the thread's current context and its per-thread default stream, with the
 * work the thread queued there (checked on an H200: a hook registered so still saw a 200 ms
 * kernel running there; a pthread key destructor made after the driver's found neither).
 * Hooks of one thread run in the reverse order of their registration; a hook registered by one
 * of them runs next, before the hooks registered earlier; one registered after they have all
 * run (by a pthread key destructor; for the thread that ends the process, by atexit code) is
 * taken but never runs. fn's code must stay loaded until then (this layer's own object is kept
 * loaded for it). Returns 1 when registered; 0 where the system offers no such hook (then
 * nothing is registered and fn never runs) or could not register it. Thread-safe: each thread
 * registers for itself. */
int tr_plat_at_thread_exit(void (*fn)(void *arg), void *arg);

/* ---- Files and directories --------------------------------------------------------------- */

/* Reads the whole file at `path`. Sets *out_data to NULL and *out_size to 0 first; on success
 * *out_data holds *out_size bytes followed by a NUL (which *out_size does not count), and the
 * caller frees it with free(). Fails with TR_IO naming the path and the system's reason
 * (missing, a directory, no permission...), TR_OUT_OF_MEMORY naming the path and size.
 * Thread-safe. */
tr_status *tr_plat_read_file(const char *path, char **out_data, size_t *out_size) TR_MUST_USE;

/* Creates or truncates the file at `path` and writes `size` bytes of `data` to it (for caches
 * and tests; not atomic: a reader may see a partial file). Fails with TR_IO naming the path and
 * the system's reason. Thread-safe (but two writers of one path race). */
tr_status *tr_plat_write_file(const char *path, const void *data, size_t size) TR_MUST_USE;

/* Replaces the file at `path` with `size` bytes of `data` atomically: the bytes go to a new
 * temporary file beside it (same directory, a name starting with the file's own name and
 * containing ".tmp-"), which is then renamed over `path`. A reader opening `path` sees the old
 * file or the whole new one, never a partial one. Not flushed to disk (no fsync): after a power
 * cut the file may be old, empty or short, so keep it checkable (a cache). Fails with TR_IO
 * naming `path` and the system's reason (missing directory, no permission, full disk...); the
 * temporary file is removed then, and `path` is left as it was. The directory must exist.
 * Thread-safe; two writers of one path each leave a whole file (the last rename wins). */
tr_status *tr_plat_write_file_atomic(const char *path, const void *data,
                                     size_t size) TR_MUST_USE;

/* Renames `from` to `to`, atomically replacing a file already at `to` (both on one file
 * system). Fails with TR_IO naming both paths and the system's reason (`from` missing, `to` a
 * directory, another file system...). Thread-safe. */
tr_status *tr_plat_rename(const char *from, const char *to) TR_MUST_USE;

/* Creates directory `path` and any missing parent, like `mkdir -p` (permissions from the
 * umask). A directory already there (or made meanwhile by another process) is success. Fails
 * with TR_VALUE for an empty path, TR_IO naming the first component that could not be made and
 * why (no permission, a regular file in the way: "exists and is not a directory"...);
 * components made before the failure stay. Thread-safe. */
tr_status *tr_plat_make_dirs(const char *path) TR_MUST_USE;

/* The names of the entries of directory `path` (not "." or ".."), sorted byte-wise (strcmp),
 * bare names, not paths. Sets *out_names to NULL and *out_count to 0 first; on success the
 * caller frees the array with tr_plat_free_names (it also ends with a NULL entry). Fails with
 * TR_IO naming the path and the system's reason (missing, not a directory...),
 * TR_OUT_OF_MEMORY naming the path. Thread-safe. */
tr_status *tr_plat_list_dir(const char *path, char ***out_names, size_t *out_count) TR_MUST_USE;

/* The paths ("dir/name") of a directory's entries whose names end with `suffix` (and are longer
 * than it), sorted by name: how spec files and backend descriptors are found. Fails as
 * tr_plat_list_dir does. The caller frees the array with tr_plat_free_names. */
tr_status *tr_plat_list_files(const char *dir, const char *suffix, char ***out_paths,
                              size_t *out_count) TR_MUST_USE;

/* Frees an array from tr_plat_list_dir and each name in it, and sets *names_p to NULL. NULL
 * (or *names_p NULL) is allowed. Cannot fail. */
void tr_plat_free_names(char ***names_p, size_t count);

/* 1 when `path` names a directory (following symbolic links), 0 otherwise, including when it
 * cannot be examined. Cannot fail. Thread-safe. */
int tr_plat_is_dir(const char *path);

/* 1 when something exists at `path` (a file, a directory, anything else; symbolic links
 * followed), 0 otherwise, including when it cannot be examined. Cannot fail. Thread-safe. */
int tr_plat_file_exists(const char *path);

/* 1 when `a` and `b` name the same file (following symbolic links: one file under two names);
 * 0 otherwise, including when either cannot be examined. Cannot fail. Thread-safe. */
int tr_plat_same_file(const char *a, const char *b);

/* 1 when `path` names a local (Unix-domain) socket's file, following symbolic links; 0 otherwise,
 * including when it cannot be examined. Cannot fail. Thread-safe. */
int tr_plat_is_socket(const char *path);

/* Creates a new, empty, private directory whose name starts with `prefix`, inside $TMPDIR (or
 * the system's temporary directory when that is unset or empty). Sets *out_path to NULL first;
 * on success *out_path is its absolute path, freed by the caller with free(). Fails with
 * TR_VALUE when `prefix` contains a path separator, TR_IO naming the directory tried and the
 * system's reason. Thread-safe (each call gets its own directory). For tests. */
tr_status *tr_plat_make_temp_dir(const char *prefix, char **out_path) TR_MUST_USE;

/* Removes `path` and, when it is a directory, everything under it. Symbolic links are removed,
 * never followed. Fails with TR_IO naming the entry that could not be removed (or `path` when it
 * does not exist) and the system's reason; entries removed before the failure stay removed.
 * Not thread-safe against others changing the same tree. For tests. */
tr_status *tr_plat_remove_tree(const char *path) TR_MUST_USE;

/* The separator of search-path lists such as PATH: ":" on POSIX (";" on Windows). Static
 * string. Cannot fail. Thread-safe. */
const char *tr_plat_path_separator_list(void);

/* The separator between a directory and a name in a path: "/" on POSIX. Static string. Cannot
 * fail. Thread-safe. */
const char *tr_plat_path_separator_dir(void);

/* ---- shared memory --------------------------------------------------------------------- */

/* Named memory that other processes of this machine can map (POSIX shared memory). Names start
 * with '/', have no other '/', and are at most 63 bytes. */
#define TR_PLAT_SHM_NAME_MAX 64

/* Creates a new segment `name` of `size` bytes (zero-filled), readable and writable by this user
 * only, and maps it. Sets *out to NULL first. Fails with TR_VALUE for a bad name or size 0, TR_IO
 * naming the segment and the system's reason (it exists already, no room...); nothing is left
 * behind then. Thread-safe. */
tr_status *tr_plat_shm_create(const char *name, size_t size, void **out) TR_MUST_USE;

/* Maps the whole of an existing segment `name`; *size receives its size. Sets *out to NULL and
 * *size to 0 first. Fails with TR_VALUE for a bad name, TR_IO naming the segment and the system's
 * reason (no such segment...). Thread-safe. */
tr_status *tr_plat_shm_map(const char *name, void **out, size_t *size) TR_MUST_USE;

/* Unmaps a mapping from tr_plat_shm_create or tr_plat_shm_map (NULL allowed). Cannot fail. */
void tr_plat_shm_unmap(void *data, size_t size);

/* Removes the name: processes that mapped the segment keep their mapping, no new one can be
 * made. Cannot fail (a name already gone is fine). */
void tr_plat_shm_unlink(const char *name);

/* 1 when a segment `name` exists (0 otherwise, or when it cannot be examined). Cannot fail. */
int tr_plat_shm_exists(const char *name);

/* The calling process's id (names of per-process resources). Cannot fail. */
int64_t tr_plat_process_id(void);

/* ---- child processes ---- */

typedef struct tr_plat_process tr_plat_process;

/* Starts `argv[0]` (a path) with arguments `argv` (NULL-terminated), inheriting the environment
 * and the standard streams. A program that cannot be started is an IOError naming it. The caller
 * waits for it (tr_plat_process_wait) or kills it. The child is tied to the caller: on Linux it is
 * asked to stop (SIGTERM) when the calling thread ends, killed or not, so start children from a
 * thread that lives as long as they should. */
tr_status *tr_plat_process_spawn(const char *const *argv, tr_plat_process **out) TR_MUST_USE;

/* Asks the process to stop (SIGTERM), or kills it outright (`hard`: SIGKILL). */
void tr_plat_process_kill(tr_plat_process *process, int hard);

/* Pauses the process (`paused`: SIGSTOP on POSIX; it stays alive and holds its sockets, but
 * answers nothing) or lets it go on (SIGCONT). For tests of a server that stops answering. */
void tr_plat_process_pause(tr_plat_process *process, int paused);

/* Waits for the process to end (at most `timeout_ms`; 0: forever), frees the handle and sets
 * *process_p to NULL; returns its exit status (128 + signal when killed), or -1 when it did not
 * end in time (it is then killed hard and reaped). */
int tr_plat_process_wait(tr_plat_process **process_p, uint32_t timeout_ms);

/* Sets *flag to 1 when the process is asked to stop (SIGTERM or SIGINT on POSIX), so a serving
 * loop can end cleanly. One flag per process; a later call replaces it. */
void tr_plat_on_terminate(volatile int *flag);

/* A program's last words for code it does not own (a backend's init or detector): from here on,
 * should the process end through exit() or a crash (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT on
 * POSIX) while `culprit()` returns a description (not NULL), it writes "tilerun: <description>
 * ended the process (it called exit)" or "... crashed the process (SIGSEGV)" to stderr; an exit
 * then ends with status 70 (whatever status that code gave), a crash as it would have (the
 * handler before this one runs). `culprit` must be async-signal-safe (read a static record). For
 * programs, not libraries; call once. */
void tr_plat_last_words(const char *(*culprit)(void));

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_PLATFORM_PLATFORM_H_ */
