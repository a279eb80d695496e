/* process.c: child processes on POSIX: posix_spawn, kill, waitpid with a timeout. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "platform/platform.h"

extern char **environ;

struct tr_plat_process {
  pid_t pid;
};

tr_status *tr_plat_process_spawn(const char *const *argv, tr_plat_process **out) {
  *out = NULL;
  tr_plat_process *p = malloc(sizeof(*p));
  if (p == NULL) return TR_STATUS(TR_OUT_OF_MEMORY, "starting '%s'", argv[0]);
  int rc = posix_spawn(&p->pid, argv[0], NULL, NULL, (char *const *)argv, environ);
  if (rc != 0) {
    free(p);
    return TR_STATUS(TR_IO, "cannot start '%s': %s", argv[0], strerror(rc));
  }
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
