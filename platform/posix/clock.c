/* clock.c: the monotonic clock and sleeping, for the POSIX platform layer. */
#define _POSIX_C_SOURCE 200809L

#include <assert.h>
#include <errno.h>
#include <time.h>

#include "platform/platform.h"

uint64_t tr_plat_now_ns(void) {
  struct timespec ts;
  int rc = clock_gettime(CLOCK_MONOTONIC, &ts);
  assert(rc == 0 && "CLOCK_MONOTONIC is always available on POSIX 2008");
  (void)rc;
  return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

void tr_plat_sleep_ns(uint64_t ns) {
  struct timespec left;
  left.tv_sec = (time_t)(ns / UINT64_C(1000000000));
  left.tv_nsec = (long)(ns % UINT64_C(1000000000));
  /* nanosleep says how much was left when a signal cut it short. */
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}
