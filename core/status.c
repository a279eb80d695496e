/* status.c: tr_status, the error object every tilerun function returns (NULL is success). */
#include "tilerun/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tr_status {
  tr_code code;
  int is_static; /* the shared out-of-memory status (a plugin may hold its own copy) */
  int line;
  const char *file; /* a string literal (__FILE__) */
  char *message;
  size_t length;
};

static const char *const kCodeNames[] = {
#define TR__CODE_NAME(suffix, name, doc) name,
    TR_STATUS_CODES(TR__CODE_NAME)
#undef TR__CODE_NAME
};

/* Returned when a status itself cannot be allocated; never freed. */
static char kOomMessage[] = "out of memory while reporting an error";
static struct tr_status kOomStatus = {TR_OUT_OF_MEMORY, 1, __LINE__, __FILE__, kOomMessage,
                                      sizeof(kOomMessage) - 1};

const char *tr_code_name(tr_code code) {
  if ((int)code < 0 || code >= TR_CODE_COUNT) return "UnknownCode";
  return kCodeNames[code];
}

int tr_code_from_name(const char *name, tr_code *out) {
  if (name == NULL) return 0;
  for (int i = 0; i < TR_CODE_COUNT; i++) {
    if (strcmp(kCodeNames[i], name) == 0) {
      *out = (tr_code)i;
      return 1;
    }
  }
  return 0;
}

int tr_code_is_signature_error(tr_code code) {
  return code == TR_SIGNATURE_DTYPE || code == TR_SIGNATURE_SHAPE || code == TR_SIGNATURE_PARAM ||
         code == TR_SIGNATURE_DEVICE;
}

/* vasprintf without the GNU extension: measure, allocate, write. */
static char *format_alloc(const char *fmt, va_list args, size_t *out_len) {
  va_list measure;
  va_copy(measure, args);
  int n = vsnprintf(NULL, 0, fmt, measure);
  va_end(measure);
  if (n < 0) return NULL;
  char *text = malloc((size_t)n + 1);
  if (text == NULL) return NULL;
  vsnprintf(text, (size_t)n + 1, fmt, args);
  *out_len = (size_t)n;
  return text;
}

tr_status *tr_status_makev(tr_code code, const char *file, int line, const char *fmt,
                           va_list args) {
  tr_status *status = malloc(sizeof(*status));
  if (status == NULL) return &kOomStatus;
  status->message = format_alloc(fmt != NULL ? fmt : "", args, &status->length);
  if (status->message == NULL) {
    free(status);
    return &kOomStatus;
  }
  status->code = (code == TR_OK) ? TR_INTERNAL : code;
  status->is_static = 0;
  status->file = file != NULL ? file : "";
  status->line = line;
  return status;
}

tr_status *tr_status_make(tr_code code, const char *file, int line, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  tr_status *status = tr_status_makev(code, file, line, fmt, args);
  va_end(args);
  return status;
}

tr_status *tr_status_append(tr_status *status, const char *fmt, ...) {
  if (status == NULL || status->is_static) return status;
  va_list args;
  va_start(args, fmt);
  size_t extra_len = 0;
  char *extra = format_alloc(fmt, args, &extra_len);
  va_end(args);
  if (extra == NULL) return status;
  char *joined = realloc(status->message, status->length + extra_len + 1);
  if (joined != NULL) {
    memcpy(joined + status->length, extra, extra_len + 1);
    status->message = joined;
    status->length += extra_len;
  }
  free(extra);
  return status;
}

tr_code tr_status_code(const tr_status *status) { return status ? status->code : TR_OK; }

const char *tr_status_message(const tr_status *status) { return status ? status->message : ""; }

const char *tr_status_file(const tr_status *status) { return status ? status->file : ""; }

int tr_status_line(const tr_status *status) { return status ? status->line : 0; }

size_t tr_status_format(const tr_status *status, char *buf, size_t size) {
  int n = status == NULL
              ? snprintf(buf, size, "Ok")
              : snprintf(buf, size, "%s: %s", tr_code_name(status->code), status->message);
  return n < 0 ? 0 : (size_t)n;
}

void tr_status_destroy(tr_status **status_p) {
  if (status_p == NULL || *status_p == NULL) return;
  tr_status *status = *status_p;
  *status_p = NULL;
  if (status->is_static) return;
  free(status->message);
  free(status);
}
