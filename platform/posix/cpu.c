/* cpu.c: the processor count (affinity mask on Linux, else sysconf) for the POSIX platform layer. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */

#include <sched.h>
#include <unistd.h>

#include "platform/platform.h"

int tr_plat_cpu_count(void) {
#if defined(__linux__) && defined(CPU_COUNT)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? (online > 1 << 20 ? 1 << 20 : (int)online) : 1;
}
