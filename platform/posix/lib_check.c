/* lib_check.c: a shared object checked before the loader maps it (ELF: magic, header, program
 * headers, loadable segments, section headers within the file), for POSIX systems using ELF. */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "platform/platform.h"

enum { EI_CLASS = 4, EI_DATA = 5, CLASS32 = 1, CLASS64 = 2, LSB = 1, MSB = 2, PT_LOAD = 1 };

/* An unsigned field of `size` bytes at `at` in `b`, in the file's byte order. */
static uint64_t field(const unsigned char *b, size_t at, size_t size, int msb) {
  uint64_t v = 0;
  for (size_t i = 0; i < size; i++) v |= (uint64_t)b[at + i] << (8 * (msb ? size - 1 - i : i));
  return v;
}

/* Reads exactly `size` bytes at `offset`; 0 when the file is shorter or the read fails. */
static int read_at(int fd, unsigned char *buf, size_t size, uint64_t offset) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = pread(fd, buf + got, size - got, (off_t)(offset + got));
    if (n <= 0) return 0;
    got += (size_t)n;
  }
  return 1;
}

/* The file's ELF layout against its length; `path` names it in the error. */
static tr_status *check_elf(int fd, const char *path, uint64_t length) {
  unsigned char h[64] = {0};
  size_t have = length < sizeof(h) ? (size_t)length : sizeof(h);
  if (!read_at(fd, h, have, 0)) return NULL; /* unreadable: the loader says why */
  if (have < 4 || h[0] != 0x7f || h[1] != 'E' || h[2] != 'L' || h[3] != 'F') {
    char first[16] = "";
    size_t used = 0;
    for (size_t i = 0; i < have && i < 4; i++) used += (size_t)snprintf(first + used, sizeof(first) - used, "%s%02x", i ? " " : "", h[i]);
    if (have == 0) return TR_STATUS(TR_IO, "cannot load shared object '%s': not an ELF file (it is empty)", path);
    return TR_STATUS(TR_IO, "cannot load shared object '%s': not an ELF file (it begins with %s, not 7f 45 4c 46)",
                     path, first);
  }
  int wide = h[EI_CLASS] == CLASS64, msb = h[EI_DATA] == MSB;
  if ((h[EI_CLASS] != CLASS32 && !wide) || (h[EI_DATA] != LSB && !msb)) {
    return TR_STATUS(TR_IO, "cannot load shared object '%s': its ELF header has class %u and byte order %u (known: "
                     "1 or 2 each)", path, (unsigned)h[EI_CLASS], (unsigned)h[EI_DATA]);
  }
  size_t header = wide ? 64 : 52;
  if (length < header) {
    return TR_STATUS(TR_IO, "cannot load shared object '%s': truncated: it is %llu bytes long, shorter than its ELF "
                     "header (%zu bytes)", path, (unsigned long long)length, header);
  }
  uint64_t phoff = wide ? field(h, 32, 8, msb) : field(h, 28, 4, msb);
  uint64_t shoff = wide ? field(h, 40, 8, msb) : field(h, 32, 4, msb);
  uint64_t phentsize = field(h, wide ? 54 : 42, 2, msb), phnum = field(h, wide ? 56 : 44, 2, msb);
  uint64_t shentsize = field(h, wide ? 58 : 46, 2, msb), shnum = field(h, wide ? 60 : 48, 2, msb);
  size_t phdr = wide ? 56 : 32;
  if (phnum > 0 && phentsize < phdr) {
    return TR_STATUS(TR_IO, "cannot load shared object '%s': its program headers are %llu bytes each, shorter than "
                     "the %zu of an ELF program header", path, (unsigned long long)phentsize, phdr);
  }
  if (phnum == 0xffff) phnum = 0; /* PN_XNUM: the count is in section 0; the loader reads it, not we */
  uint64_t ph_end = phoff + phnum * phentsize;
  if (phnum > 0 && (phoff > length || ph_end > length)) {
    return TR_STATUS(TR_IO, "cannot load shared object '%s': truncated: it is %llu bytes long, but its program "
                     "headers end at byte %llu", path, (unsigned long long)length, (unsigned long long)ph_end);
  }
  for (uint64_t i = 0; i < phnum; i++) {
    unsigned char p[56];
    if (!read_at(fd, p, phdr, phoff + i * phentsize)) return NULL;
    if (field(p, 0, 4, msb) != PT_LOAD) continue;
    uint64_t offset = wide ? field(p, 8, 8, msb) : field(p, 4, 4, msb);
    uint64_t filesz = wide ? field(p, 32, 8, msb) : field(p, 16, 4, msb);
    if (filesz > 0 && (offset > length || filesz > length - offset)) { /* bss-only: nothing mapped from the file */
      return TR_STATUS(TR_IO, "cannot load shared object '%s': truncated: it is %llu bytes long, but its loadable "
                       "segment at program header %llu ends at byte %llu", path, (unsigned long long)length,
                       (unsigned long long)i, (unsigned long long)(offset + filesz));
    }
  }
  uint64_t sh_end = shoff + shnum * shentsize;
  if (shnum > 0 && (shoff > length || sh_end > length)) {
    return TR_STATUS(TR_IO, "cannot load shared object '%s': truncated: it is %llu bytes long, but its section "
                     "headers end at byte %llu", path, (unsigned long long)length, (unsigned long long)sh_end);
  }
  return NULL;
}

tr_status *tr_plat_lib_check(const char *path) {
  if (path == NULL) return NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL; /* missing or unreadable: the loader's own text says so */
  struct stat st;
  tr_status *status = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) status = check_elf(fd, path, (uint64_t)st.st_size);
  close(fd);
  return status;
}
