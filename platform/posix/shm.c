/* shm.c: named shared memory on POSIX: shm_open, ftruncate, mmap. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "platform/platform.h"
#include "platform/posix/internal.h"

static tr_status *check_name(const char *name) {
  size_t n = name != NULL ? strlen(name) : 0;
  if (n < 2 || n >= TR_PLAT_SHM_NAME_MAX || name[0] != '/' || strchr(name + 1, '/') != NULL) {
    return TR_STATUS(TR_VALUE, "'%s' is not a shared memory name ('/' then 1 to %d bytes without '/')",
                     name ? name : "(null)", TR_PLAT_SHM_NAME_MAX - 2);
  }
  return NULL;
}

tr_status *tr_plat_shm_create(const char *name, size_t size, void **out) {
  *out = NULL;
  TR_RETURN_IF_ERROR(check_name(name));
  if (size == 0) return TR_STATUS(TR_VALUE, "shared memory '%s': a segment of 0 bytes", name);
  char why[TR__PLAT_ERRTEXT_SIZE];
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return TR_STATUS(TR_IO, "cannot create shared memory '%s': %s", name, tr__plat_errtext(errno, why, sizeof(why)));
  /* the pages reserved now: a full /dev/shm is an error here, never a SIGBUS on first touch */
  int err = posix_fallocate(fd, 0, (off_t)size);
  if (err == EINVAL || err == EOPNOTSUPP) err = ftruncate(fd, (off_t)size) != 0 ? errno : 0;
  if (err != 0) {
    close(fd);
    shm_unlink(name);
    return TR_STATUS(TR_IO, "cannot size shared memory '%s' to %zu bytes: %s", name, size,
                     tr__plat_errtext(err, why, sizeof(why)));
  }
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name);
    return TR_STATUS(TR_IO, "cannot map shared memory '%s' (%zu bytes): %s", name, size,
                     tr__plat_errtext(err, why, sizeof(why)));
  }
  *out = p;
  return NULL;
}

tr_status *tr_plat_shm_map(const char *name, void **out, size_t *size) {
  *out = NULL;
  *size = 0;
  TR_RETURN_IF_ERROR(check_name(name));
  char why[TR__PLAT_ERRTEXT_SIZE];
  int fd = shm_open(name, O_RDWR, 0);
  if (fd < 0) return TR_STATUS(TR_IO, "cannot open shared memory '%s': %s", name, tr__plat_errtext(errno, why, sizeof(why)));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    int err = errno;
    close(fd);
    return TR_STATUS(TR_IO, "shared memory '%s' has no size: %s", name, tr__plat_errtext(err, why, sizeof(why)));
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    return TR_STATUS(TR_IO, "cannot map shared memory '%s': %s", name, tr__plat_errtext(err, why, sizeof(why)));
  }
  *out = p;
  *size = (size_t)st.st_size;
  return NULL;
}

void tr_plat_shm_unmap(void *data, size_t size) {
  if (data != NULL) munmap(data, size);
}

void tr_plat_shm_unlink(const char *name) {
  tr_status *bad = check_name(name);
  if (bad == NULL) shm_unlink(name);
  tr_status_destroy(&bad);
}

int tr_plat_shm_exists(const char *name) {
  tr_status *bad = check_name(name);
  if (bad != NULL) {
    tr_status_destroy(&bad);
    return 0;
  }
  int fd = shm_open(name, O_RDONLY, 0);
  if (fd < 0) return 0;
  close(fd);
  return 1;
}

int64_t tr_plat_process_id(void) { return (int64_t)getpid(); }
