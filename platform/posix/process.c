/* process.c: child processes on POSIX: fork and exec (tied to this process), kill, waitpid with a
 * timeout. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "platform/platform.h"

extern char **environ;

struct tr_plat_process {
  pid_t pid;
};

/* fork and exec rather than posix_spawn: the child is tied to this process (on Linux it is sent
 * SIGTERM when the thread that started it ends, so a benchmark or test killed midway leaves no
 * server behind), and an exec that fails reports its errno through a close-on-exec pipe. Between
 * fork and exec the child calls only async-signal-safe functions. */
tr_status *tr_plat_process_spawn(const char *const *argv, tr_plat_process **out) {
  *out = NULL;
  tr_plat_process *p = malloc(sizeof(*p));
  if (p == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "starting '%s'", argv[0]);
  int report[2];
  if (pipe(report) != 0) {
    int e = errno;
    free(p);
    return TR_STATUS(TR_IO, "cannot start '%s': %s", argv[0], strerror(e));
  }
  (void)fcntl(report[0], F_SETFD, FD_CLOEXEC);
  (void)fcntl(report[1], F_SETFD, FD_CLOEXEC);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    close(report[0]);
#ifdef __linux__
    (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127); /* the parent ended before the tie was made */
#else
    (void)parent;
#endif
    execve(argv[0], (char *const *)argv, environ);
    int e = errno;
    ssize_t w = write(report[1], &e, sizeof(e));
    (void)w;
    _exit(127);
  }
  close(report[1]);
  if (pid < 0) {
    int e = errno;
    close(report[0]);
    free(p);
    return TR_STATUS(TR_IO, "cannot start '%s': %s", argv[0], strerror(e));
  }
  int child_errno = 0;
  ssize_t got;
  do {
    got = read(report[0], &child_errno, sizeof(child_errno));
  } while (got < 0 && errno == EINTR);
  close(report[0]);
  if (got == (ssize_t)sizeof(child_errno)) { /* the exec failed: reap the child */
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    free(p);
    return TR_STATUS(TR_IO, "cannot start '%s': %s", argv[0], strerror(child_errno));
  }
  p->pid = pid;
  *out = p;
  return NULL;
}

void tr_plat_process_pause(tr_plat_process *process, int paused) {
  if (process != NULL) kill(process->pid, paused ? SIGSTOP : SIGCONT);
}

void tr_plat_process_kill(tr_plat_process *process, int hard) {
  if (process != NULL) kill(process->pid, hard ? SIGKILL : SIGTERM);
}

int tr_plat_process_wait(tr_plat_process **process_p, uint32_t timeout_ms) {
  if (process_p == NULL || *process_p == NULL) return -1;
  tr_plat_process *p = *process_p;
  int status = 0, result = -1;
  uint64_t waited_ms = 0;
  for (;;) {
    pid_t done = waitpid(p->pid, &status, timeout_ms ? WNOHANG : 0);
    if (done == p->pid) {
      result = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (done < 0 && errno != EINTR) break;
    if (timeout_ms && waited_ms >= timeout_ms) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, &status, 0);
      result = -1;
      break;
    }
    struct timespec nap = {0, 5 * 1000 * 1000};
    nanosleep(&nap, NULL);
    waited_ms += 5;
  }
  free(p);
  *process_p = NULL;
  return result;
}

static volatile int *g_terminate_flag;

static void on_terminate(int signal_number) {
  (void)signal_number;
  if (g_terminate_flag != NULL) *g_terminate_flag = 1;
}

/* ---- last words ---- */

static const char *(*g_culprit)(void);
static struct sigaction g_before[5];
static const int kFatal[5] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
static const char *const kFatalNames[5] = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"};

static void say(const char *text) { /* write(2) only: this runs in a signal handler */
  size_t n = strlen(text);
  while (n > 0) {
    ssize_t w = write(2, text, n);
    if (w <= 0) return;
    text += w;
    n -= (size_t)w;
  }
}

static void last_words_at_exit(void) {
  const char *who = g_culprit != NULL ? g_culprit() : NULL;
  if (who == NULL) return;
  say("tilerun: ");
  say(who);
  say(" ended the process (it called exit)\n");
  _exit(70);
}

static void last_words_on_signal(int signal_number) {
  int i = 0;
  while (i < 4 && kFatal[i] != signal_number) i++;
  const char *who = g_culprit != NULL ? g_culprit() : NULL;
  if (who != NULL) {
    say("tilerun: ");
    say(who);
    say(" crashed the process (");
    say(kFatalNames[i]);
    say(")\n");
  }
  sigaction(signal_number, &g_before[i], NULL); /* the handler before (a sanitizer's), or the default */
  raise(signal_number);
}

void tr_plat_last_words(const char *(*culprit)(void)) {
  g_culprit = culprit;
  atexit(last_words_at_exit);
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = last_words_on_signal;
  action.sa_flags = SA_NODEFER;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 5; i++) sigaction(kFatal[i], &action, &g_before[i]);
}

void tr_plat_on_terminate(volatile int *flag) {
  g_terminate_flag = flag;
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = on_terminate;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, NULL);
  sigaction(SIGINT, &action, NULL);
}
