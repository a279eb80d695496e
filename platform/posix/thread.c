/* thread.c: threads, mutexes, conditions and run-once (pthreads) for the POSIX platform layer. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "platform/platform.h"
#include "platform/posix/internal.h"

/* tr_plat_mutex's opaque storage must hold a pthread_mutex_t. */
_Static_assert(sizeof(pthread_mutex_t) <= sizeof(((tr_plat_mutex *)0)->storage_),
               "tr_plat_mutex storage is too small for pthread_mutex_t");
_Static_assert(_Alignof(pthread_mutex_t) <= _Alignof(tr_plat_mutex),
               "tr_plat_mutex storage is not aligned enough for pthread_mutex_t");

/* A pthread call failed where the caller broke a contract or the system is broken: there is no
 * status to return, so say what happened and stop. */
static void tr__plat_die(const char *call, int err) {
  char text[TR__PLAT_ERRTEXT_SIZE];
  fprintf(stderr, "tilerun: %s failed: %s\n", call, tr__plat_errtext(err, text, sizeof text));
  abort();
}

static pthread_mutex_t *tr__plat_pthread_mutex(tr_plat_mutex *mutex) {
  return (pthread_mutex_t *)(void *)mutex->storage_.bytes;
}

tr_status *tr_plat_mutex_init(tr_plat_mutex *mutex) {
  int rc = pthread_mutex_init(tr__plat_pthread_mutex(mutex), NULL);
  if (rc != 0) {
    char text[TR__PLAT_ERRTEXT_SIZE];
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot initialise a mutex: %s",
                     tr__plat_errtext(rc, text, sizeof text));
  }
  return NULL;
}

void tr_plat_mutex_lock(tr_plat_mutex *mutex) {
  int rc = pthread_mutex_lock(tr__plat_pthread_mutex(mutex));
  if (rc != 0) tr__plat_die("pthread_mutex_lock", rc);
}

void tr_plat_mutex_unlock(tr_plat_mutex *mutex) {
  int rc = pthread_mutex_unlock(tr__plat_pthread_mutex(mutex));
  if (rc != 0) tr__plat_die("pthread_mutex_unlock", rc);
}

void tr_plat_mutex_destroy(tr_plat_mutex *mutex) {
  int rc = pthread_mutex_destroy(tr__plat_pthread_mutex(mutex));
  if (rc != 0) tr__plat_die("pthread_mutex_destroy", rc);
}

/* ---- Conditions --------------------------------------------------------------------------- */

_Static_assert(sizeof(pthread_cond_t) <= sizeof(((tr_plat_cond *)0)->storage_),
               "tr_plat_cond storage is too small for pthread_cond_t");
_Static_assert(_Alignof(pthread_cond_t) <= _Alignof(tr_plat_cond),
               "tr_plat_cond storage is not aligned enough for pthread_cond_t");

static pthread_cond_t *tr__plat_pthread_cond(tr_plat_cond *cond) {
  return (pthread_cond_t *)(void *)cond->storage_.bytes;
}

tr_status *tr_plat_cond_init(tr_plat_cond *cond) {
  int rc = pthread_cond_init(tr__plat_pthread_cond(cond), NULL);
  if (rc != 0) {
    char text[TR__PLAT_ERRTEXT_SIZE];
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot initialise a condition variable: %s",
                     tr__plat_errtext(rc, text, sizeof text));
  }
  return NULL;
}

void tr_plat_cond_wait(tr_plat_cond *cond, tr_plat_mutex *mutex) {
  int rc = pthread_cond_wait(tr__plat_pthread_cond(cond), tr__plat_pthread_mutex(mutex));
  if (rc != 0) tr__plat_die("pthread_cond_wait", rc);
}

void tr_plat_cond_signal(tr_plat_cond *cond) {
  int rc = pthread_cond_signal(tr__plat_pthread_cond(cond));
  if (rc != 0) tr__plat_die("pthread_cond_signal", rc);
}

void tr_plat_cond_broadcast(tr_plat_cond *cond) {
  int rc = pthread_cond_broadcast(tr__plat_pthread_cond(cond));
  if (rc != 0) tr__plat_die("pthread_cond_broadcast", rc);
}

void tr_plat_cond_destroy(tr_plat_cond *cond) {
  int rc = pthread_cond_destroy(tr__plat_pthread_cond(cond));
  if (rc != 0) tr__plat_die("pthread_cond_destroy", rc);
}

/* ---- Run once ----------------------------------------------------------------------------
 * A `once` is an int: 0 not run, 1 running, 2 done. One process-wide lock and condition guard
 * every change; fn runs without the lock held, so it may use other onces. Where the compiler
 * offers atomics, a finished once is seen without taking the lock. */
enum { TR__ONCE_NOT_RUN = 0, TR__ONCE_RUNNING = 1, TR__ONCE_DONE = 2 };

static pthread_mutex_t tr__plat_once_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tr__plat_once_done = PTHREAD_COND_INITIALIZER;

#if defined(__GNUC__) || defined(__clang__)
#define TR__ONCE_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define TR__ONCE_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#else
#define TR__ONCE_LOAD(p) TR__ONCE_NOT_RUN /* always take the lock */
#define TR__ONCE_STORE(p, v) (*(p) = (v))
#endif

void tr_plat_once_run(tr_plat_once *once, void (*fn)(void)) {
  int *state = &once->storage_.state;
  if (TR__ONCE_LOAD(state) == TR__ONCE_DONE) return;
  int rc = pthread_mutex_lock(&tr__plat_once_lock);
  if (rc != 0) tr__plat_die("pthread_mutex_lock (once)", rc);
  while (*state == TR__ONCE_RUNNING) {
    rc = pthread_cond_wait(&tr__plat_once_done, &tr__plat_once_lock);
    if (rc != 0) tr__plat_die("pthread_cond_wait (once)", rc);
  }
  if (*state == TR__ONCE_DONE) {
    pthread_mutex_unlock(&tr__plat_once_lock);
    return;
  }
  TR__ONCE_STORE(state, TR__ONCE_RUNNING);
  pthread_mutex_unlock(&tr__plat_once_lock);

  fn();

  rc = pthread_mutex_lock(&tr__plat_once_lock);
  if (rc != 0) tr__plat_die("pthread_mutex_lock (once)", rc);
  TR__ONCE_STORE(state, TR__ONCE_DONE);
  pthread_cond_broadcast(&tr__plat_once_done);
  pthread_mutex_unlock(&tr__plat_once_lock);
}

/* ---- Threads ----------------------------------------------------------------------------- */

struct tr_plat_thread {
  pthread_t id;
  void (*fn)(void *arg);
  void *arg;
};

static void *tr__plat_thread_main(void *self) {
  tr_plat_thread *thread = self;
  thread->fn(thread->arg);
  return NULL;
}

tr_status *tr_plat_thread_start(void (*fn)(void *arg), void *arg, tr_plat_thread **out) {
  *out = NULL;
  tr_plat_thread *thread = calloc(1, sizeof *thread);
  if (thread == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot start a thread: out of memory for its handle");
  }
  thread->fn = fn;
  thread->arg = arg;
  int rc = pthread_create(&thread->id, NULL, tr__plat_thread_main, thread);
  if (rc != 0) {
    free(thread);
    char text[TR__PLAT_ERRTEXT_SIZE];
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot start a thread: %s",
                     tr__plat_errtext(rc, text, sizeof text));
  }
  *out = thread;
  return NULL;
}

void tr_plat_thread_join(tr_plat_thread **t_p) {
  if (t_p == NULL || *t_p == NULL) return;
  tr_plat_thread *thread = *t_p;
  int rc = pthread_join(thread->id, NULL);
  if (rc != 0) tr__plat_die("pthread_join", rc);
  free(thread);
  *t_p = NULL;
}

/* ---- Thread exit hooks -------------------------------------------------------------------- */

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 18))
/* glibc's hook for C++ thread_local destructors: they run as the thread ends, before any
 * pthread key destructor (where the CUDA driver, among others, cleans up the thread), and a
 * registration keeps this shared object loaded until its hooks have run. */
extern int __cxa_thread_atexit_impl(void (*fn)(void *), void *arg, void *dso_symbol);
extern void *__dso_handle;

int tr_plat_at_thread_exit(void (*fn)(void *arg), void *arg) {
  return __cxa_thread_atexit_impl(fn, arg, &__dso_handle) == 0;
}
#else
/* No hook that runs before other libraries' per-thread clean-up: none is registered. */
int tr_plat_at_thread_exit(void (*fn)(void *arg), void *arg) {
  (void)fn;
  (void)arg;
  return 0;
}
#endif
