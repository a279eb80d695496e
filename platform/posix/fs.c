/* fs.c: files and directories (read, write, atomic replace, rename, mkdir -p, list, temp dirs,
 * removal) for POSIX. */
#define _XOPEN_SOURCE 700 /* POSIX 2008 with XSI: realpath */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "platform/platform.h"
#include "platform/posix/internal.h"

/* A status for a failed system call on `path`, raised at file:line: TR_OUT_OF_MEMORY for
 * ENOMEM, TR_IO otherwise. `what` says what was being done ("cannot read file"). */
static tr_status *tr__fs_error(const char *file, int line, int err, const char *what,
                               const char *path) {
  char text[TR__PLAT_ERRTEXT_SIZE];
  tr__plat_errtext(err, text, sizeof text);
  return tr_status_make(err == ENOMEM ? TR_OUT_OF_MEMORY : TR_IO, file, line, "%s '%s': %s",
                        what, path, text);
}
#define TR__FS_ERROR(err, what, path) tr__fs_error(__FILE__, __LINE__, (err), (what), (path))

/* A malloc'd "dir/name". NULL when memory runs out. */
static char *tr__fs_join(const char *dir, const char *name) {
  size_t dir_len = strlen(dir), name_len = strlen(name);
  int needs_sep = dir_len > 0 && dir[dir_len - 1] != '/';
  char *joined = malloc(dir_len + (size_t)needs_sep + name_len + 1);
  if (joined == NULL) return NULL;
  memcpy(joined, dir, dir_len);
  if (needs_sep) joined[dir_len] = '/';
  memcpy(joined + dir_len + needs_sep, name, name_len + 1);
  return joined;
}

/* ---- Reading and writing ----------------------------------------------------------------- */

tr_status *tr_plat_read_file(const char *path, char **out_data, size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  int fd;
  do {
    fd = open(path, O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return TR__FS_ERROR(errno, "cannot read file", path);

  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return TR__FS_ERROR(err, "cannot read file", path);
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return TR__FS_ERROR(EISDIR, "cannot read file", path);
  }
  /* The size from fstat is a hint: files in /proc say 0, and a file may grow meanwhile. */
  size_t capacity = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
  size_t size = 0;
  char *data = malloc(capacity);
  if (data == NULL) {
    close(fd);
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot read file '%s': out of memory for %zu bytes",
                     path, capacity);
  }
  for (;;) {
    if (size + 1 >= capacity) {
      size_t grown = capacity * 2;
      char *bigger = grown > capacity ? realloc(data, grown) : NULL;
      if (bigger == NULL) {
        free(data);
        close(fd);
        return TR_STATUS(TR_OUT_OF_MEMORY,
                         "cannot read file '%s': out of memory for %zu bytes", path, grown);
      }
      data = bigger;
      capacity = grown;
    }
    ssize_t got = read(fd, data + size, capacity - 1 - size);
    if (got < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      free(data);
      close(fd);
      return TR__FS_ERROR(err, "cannot read file", path);
    }
    if (got == 0) break;
    size += (size_t)got;
  }
  close(fd);
  data[size] = '\0';
  *out_data = data;
  *out_size = size;
  return NULL;
}

/* Writes all `size` bytes to `fd` and closes it (always). Returns 0, or the errno of the
 * first failure. */
static int tr__fs_write_close(int fd, const void *data, size_t size) {
  const char *bytes = data;
  size_t done = 0;
  while (done < size) {
    ssize_t put = write(fd, bytes + done, size - done);
    if (put < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      return err;
    }
    done += (size_t)put;
  }
  /* close reports late write failures (a full disk on a network file system). */
  if (close(fd) != 0 && errno != EINTR) return errno;
  return 0;
}

tr_status *tr_plat_write_file(const char *path, const void *data, size_t size) {
  int fd;
  do {
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return TR__FS_ERROR(errno, "cannot write file", path);
  int err = tr__fs_write_close(fd, data, size);
  return err != 0 ? TR__FS_ERROR(err, "cannot write file", path) : NULL;
}

/* Distinguishes the temporary files of one process's threads. */
static atomic_uint tr__fs_temp_counter;

tr_status *tr_plat_write_file_atomic(const char *path, const void *data, size_t size) {
  /* "<path>.tmp-<pid>-<n>": beside the file (so the rename stays on its file system), made
   * with O_EXCL (so no two writers share one), 0666 less the umask like write_file's files. */
  size_t path_len = strlen(path);
  size_t temp_size = path_len + 64;
  char *temp = malloc(temp_size);
  if (temp == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot write file '%s': out of memory", path);
  }
  int fd = -1, err = 0;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    snprintf(temp, temp_size, "%s.tmp-%ld-%u", path, (long)getpid(),
             atomic_fetch_add(&tr__fs_temp_counter, 1u));
    do {
      fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    } while (fd < 0 && errno == EINTR);
    err = fd < 0 ? errno : 0;
    if (fd < 0 && err != EEXIST) break; /* a stale file of a dead process with our pid: retry */
  }
  if (fd < 0) {
    free(temp);
    return TR__FS_ERROR(err, "cannot write file", path);
  }
  err = tr__fs_write_close(fd, data, size);
  if (err == 0 && rename(temp, path) != 0) err = errno;
  if (err != 0) {
    (void)unlink(temp);
    char text[TR__PLAT_ERRTEXT_SIZE];
    tr__plat_errtext(err, text, sizeof text);
    tr_status *status = TR_STATUS(err == ENOMEM ? TR_OUT_OF_MEMORY : TR_IO,
                                  "cannot write file '%s' (through the temporary file '%s'): %s",
                                  path, temp, text);
    free(temp);
    return status;
  }
  free(temp);
  return NULL;
}

tr_status *tr_plat_rename(const char *from, const char *to) {
  if (rename(from, to) != 0) {
    char text[TR__PLAT_ERRTEXT_SIZE];
    tr__plat_errtext(errno, text, sizeof text);
    return TR_STATUS(TR_IO, "cannot rename '%s' to '%s': %s", from, to, text);
  }
  return NULL;
}

/* ---- Directories ------------------------------------------------------------------------- */

static int tr__fs_compare_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void tr_plat_free_names(char ***names_p, size_t count) {
  if (names_p == NULL || *names_p == NULL) return;
  char **names = *names_p;
  for (size_t i = 0; i < count; ++i) free(names[i]);
  free(names);
  *names_p = NULL;
}

tr_status *tr_plat_list_dir(const char *path, char ***out_names, size_t *out_count) {
  *out_names = NULL;
  *out_count = 0;
  DIR *dir = opendir(path);
  if (dir == NULL) return TR__FS_ERROR(errno, "cannot list directory", path);

  size_t count = 0, capacity = 16;
  char **names = malloc(capacity * sizeof *names);
  tr_status *status = NULL;
  if (names == NULL) {
    status = TR_STATUS(TR_OUT_OF_MEMORY, "cannot list directory '%s': out of memory", path);
    goto done;
  }
  for (;;) {
    errno = 0;
    struct dirent *entry = readdir(dir);
    if (entry == NULL) {
      if (errno != 0) status = TR__FS_ERROR(errno, "cannot list directory", path);
      break;
    }
    const char *name = entry->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
    if (count + 1 >= capacity) { /* keep room for the closing NULL */
      char **bigger = realloc(names, capacity * 2 * sizeof *names);
      if (bigger == NULL) {
        status = TR_STATUS(TR_OUT_OF_MEMORY, "cannot list directory '%s': out of memory", path);
        break;
      }
      names = bigger;
      capacity *= 2;
    }
    size_t len = strlen(name);
    char *copy = malloc(len + 1);
    if (copy == NULL) {
      status = TR_STATUS(TR_OUT_OF_MEMORY, "cannot list directory '%s': out of memory", path);
      break;
    }
    memcpy(copy, name, len + 1);
    names[count++] = copy;
  }
done:
  closedir(dir);
  if (status != NULL) {
    tr_plat_free_names(&names, count);
    return status;
  }
  qsort(names, count, sizeof *names, tr__fs_compare_names);
  names[count] = NULL;
  *out_names = names;
  *out_count = count;
  return NULL;
}

int tr_plat_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int tr_plat_file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int tr_plat_same_file(const char *a, const char *b) {
  struct stat sa, sb;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int tr_plat_is_socket(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

tr_status *tr_plat_make_dirs(const char *path) {
  if (path == NULL || path[0] == '\0') {
    return TR_STATUS(TR_VALUE, "cannot make directories: the path is empty");
  }
  if (tr_plat_is_dir(path)) return NULL;
  size_t len = strlen(path);
  char *prefix = malloc(len + 1);
  if (prefix == NULL) {
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot make directory '%s': out of memory", path);
  }
  memcpy(prefix, path, len + 1);
  /* Each prefix ending before a '/' (and the whole path), parents first; "a//b" and a
   * trailing '/' make empty or repeated prefixes, which are skipped or found existing. */
  tr_status *status = NULL;
  for (size_t end = 1; end <= len && status == NULL; ++end) {
    if (end < len && path[end] != '/') continue;
    if (path[end - 1] == '/') continue;
    prefix[end] = '\0';
    if (mkdir(prefix, 0777) != 0) {
      /* A directory already there is fine, whoever made it and whenever (some systems say
       * EACCES or EROFS rather than EEXIST for one). */
      int err = errno;
      struct stat st;
      int exists = stat(prefix, &st) == 0;
      if (exists && !S_ISDIR(st.st_mode)) {
        status = TR_STATUS(TR_IO, "cannot make directory '%s': it exists and is not a "
                           "directory", prefix);
      } else if (!exists) {
        status = TR__FS_ERROR(err, "cannot make directory", prefix);
      }
    }
    prefix[end] = path[end];
  }
  free(prefix);
  return status;
}

/* ---- Temporary trees --------------------------------------------------------------------- */

tr_status *tr_plat_make_temp_dir(const char *prefix, char **out_path) {
  *out_path = NULL;
  if (strchr(prefix, '/') != NULL) {
    return TR_STATUS(TR_VALUE, "temporary directory prefix '%s' contains a path separator '/'",
                     prefix);
  }
  const char *base = getenv("TMPDIR");
  if (base == NULL || base[0] == '\0') base = "/tmp";
  /* An absolute, symlink-free base, so the result is absolute wherever TMPDIR points. */
  char *real_base = realpath(base, NULL);
  if (real_base == NULL) return TR__FS_ERROR(errno, "cannot use temporary directory", base);

  size_t base_len = strlen(real_base), prefix_len = strlen(prefix);
  char *template_path = malloc(base_len + 1 + prefix_len + 6 + 1);
  if (template_path == NULL) {
    free(real_base);
    return TR_STATUS(TR_OUT_OF_MEMORY, "cannot make a temporary directory in '%s': out of memory",
                     base);
  }
  /* realpath gives "/" for the root; no doubled separator then. */
  size_t at = base_len;
  memcpy(template_path, real_base, base_len);
  if (at == 0 || template_path[at - 1] != '/') template_path[at++] = '/';
  memcpy(template_path + at, prefix, prefix_len);
  memcpy(template_path + at + prefix_len, "XXXXXX", 7);
  free(real_base);

  if (mkdtemp(template_path) == NULL) {
    tr_status *status = TR__FS_ERROR(errno, "cannot make temporary directory", template_path);
    free(template_path);
    return status;
  }
  *out_path = template_path;
  return NULL;
}

tr_status *tr_plat_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return TR__FS_ERROR(errno, "cannot remove", path);
  if (!S_ISDIR(st.st_mode)) {
    if (unlink(path) != 0) return TR__FS_ERROR(errno, "cannot remove file", path);
    return NULL;
  }
  char **names = NULL;
  size_t count = 0;
  TR_RETURN_IF_ERROR(tr_plat_list_dir(path, &names, &count));
  tr_status *status = NULL;
  for (size_t i = 0; i < count && status == NULL; ++i) {
    char *child = tr__fs_join(path, names[i]);
    if (child == NULL) {
      status = TR_STATUS(TR_OUT_OF_MEMORY, "cannot remove directory '%s': out of memory", path);
      break;
    }
    status = tr_plat_remove_tree(child);
    free(child);
  }
  tr_plat_free_names(&names, count);
  if (status != NULL) return status;
  if (rmdir(path) != 0) return TR__FS_ERROR(errno, "cannot remove directory", path);
  return NULL;
}

const char *tr_plat_path_separator_list(void) { return ":"; }

const char *tr_plat_path_separator_dir(void) { return "/"; }

tr_status *tr_plat_list_files(const char *dir, const char *suffix, char ***out_paths,
                              size_t *out_count) {
  *out_paths = NULL;
  *out_count = 0;
  char **names = NULL;
  size_t count = 0;
  TR_RETURN_IF_ERROR(tr_plat_list_dir(dir, &names, &count));
  char **paths = calloc(count + 1, sizeof(char *));
  size_t n = 0, suffix_len = strlen(suffix), dir_len = strlen(dir);
  tr_status *status = paths ? NULL : TR_STATUS(TR_OUT_OF_MEMORY, "listing '%s'", dir);
  for (size_t i = 0; status == NULL && i < count; i++) {
    size_t len = strlen(names[i]);
    if (len <= suffix_len || strcmp(names[i] + len - suffix_len, suffix) != 0) continue;
    if ((paths[n] = malloc(dir_len + len + 2)) == NULL) {
      status = TR_STATUS(TR_OUT_OF_MEMORY, "listing '%s'", dir);
      break;
    }
    memcpy(paths[n], dir, dir_len);
    paths[n][dir_len] = '/';
    memcpy(paths[n] + dir_len + 1, names[i], len + 1);
    n++;
  }
  tr_plat_free_names(&names, count);
  if (status != NULL) {
    tr_plat_free_names(&paths, n);
    return status;
  }
  *out_paths = paths;
  *out_count = n;
  return NULL;
}
