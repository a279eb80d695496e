/* status.h: tr_status, how every failure in tilerun travels: NULL is success. */
#ifndef TILERUN_STATUS_H_
#define TILERUN_STATUS_H_

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TR_MUST_USE __attribute__((warn_unused_result))
#define TR_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define TR_MUST_USE
#define TR_PRINTF(fmt_index, first_arg)
#endif

/* The one table of status codes: X(ENUM_SUFFIX, "PrintedName", "what it means").
 * The enum and the names are generated from it, so they cannot drift. Codes are only ever
 * appended (their numbers travel in messages between components). The Python binding raises
 * ValueError's as exceptions that are Python ValueErrors too: a kernel's own value error, a
 * misused argument (a NULL handle) and the selection refusal "no implementation serves this
 * call", which the spec's selection tests catch as ValueError. */
#define TR_STATUS_CODES(X)                                                                   \
  X(OK, "Ok", "success (never carried by a status object)")                                  \
  X(BACKEND, "BackendError", "a backend misbehaved: a detector, builder or read failed")     \
  X(UNKNOWN_TARGET, "UnknownTargetError", "no backend registered the target named")          \
  X(AMBIGUOUS_TARGET, "AmbiguousTargetError", "two or more targets claimed the device")      \
  X(OP_NOT_AVAILABLE, "OpNotAvailableError", "the settled target does not serve the op")     \
  X(SIGNATURE_DTYPE, "SignatureError(dtype)", "a tensor's dtype breaks the op's signature")   \
  X(SIGNATURE_SHAPE, "SignatureError(shape)", "a tensor's shape breaks the op's signature")   \
  X(SIGNATURE_PARAM, "SignatureError(param)", "a param is missing, unknown or mistyped")      \
  X(SELECTION, "SelectionError", "selection is ambiguous, or kernel types are refused")      \
  X(VALUE, "ValueError", "a value is out of range, or no implementation serves a call")      \
  X(MANIFEST, "ManifestError", "a manifest or configuration file is malformed")              \
  X(TRANSPORT, "TransportError", "a component could not be reached or answered badly")       \
  X(COMPILE, "CompileError", "a kernel failed to compile")                                   \
  X(OUT_OF_MEMORY, "OutOfMemoryError", "an allocation failed")                               \
  X(IO, "IOError", "a file, directory or shared object could not be read")                   \
  X(INTERNAL, "InternalError", "a bug in tilerun: please report it")                         \
  X(SIGNATURE_DEVICE, "SignatureError(device)", "a call's inputs are not on one device")

typedef enum tr_code {
#define TR__CODE_ENUM(suffix, name, doc) TR_##suffix,
  TR_STATUS_CODES(TR__CODE_ENUM)
#undef TR__CODE_ENUM
  TR_CODE_COUNT
} tr_code;

/* An error: a code, the message a user reads, and where it was raised. Opaque; single owner. */
typedef struct tr_status tr_status;

/* The printed name of a code ("SignatureError(shape)", "ValueError"...); "UnknownCode" for a value outside the table.
 * Cannot fail; the string is static. Thread-safe. */
const char *tr_code_name(tr_code code);

/* Parses a printed name back into a code. Returns 1 and sets *out on success, 0 when the name
 * is not in the table (then *out is untouched). Thread-safe. */
int tr_code_from_name(const char *name, tr_code *out);

/* 1 for the signature-error codes (dtype, shape, param, device), 0 otherwise. */
int tr_code_is_signature_error(tr_code code);

/* Makes a status; use TR_STATUS(code, fmt, ...) instead, which records the file and line.
 * `code` must not be TR_OK. Never returns NULL: when memory runs out it returns a shared static
 * out-of-memory status (which tr_status_destroy recognises and does not free). The caller owns
 * the result and frees it with tr_status_destroy. Thread-safe. */
tr_status *tr_status_make(tr_code code, const char *file, int line, const char *fmt, ...)
    TR_PRINTF(4, 5) TR_MUST_USE;
tr_status *tr_status_makev(tr_code code, const char *file, int line, const char *fmt,
                           va_list args) TR_MUST_USE;

#define TR_STATUS(code, ...) tr_status_make((code), __FILE__, __LINE__, __VA_ARGS__)

/* Appends text to a status's message (e.g. "; 2 backends failed to load"), keeping its code and
 * origin. Returns `status` (NULL stays NULL). When memory runs out the message is left as it
 * was. Not thread-safe on one status. */
tr_status *tr_status_append(tr_status *status, const char *fmt, ...) TR_PRINTF(2, 3);

/* The code of a status; TR_OK for NULL. Cannot fail. */
tr_code tr_status_code(const tr_status *status);

/* The message a user reads; "" for NULL. Owned by the status. */
const char *tr_status_message(const tr_status *status);

/* Where the status was raised: the source file ("" for NULL) and line (0 for NULL). */
const char *tr_status_file(const tr_status *status);
int tr_status_line(const tr_status *status);

/* Writes "<CodeName>: <message>" into buf (always NUL-terminated when size > 0) and returns the
 * length the whole text needs, as snprintf does. For NULL it writes "Ok". Cannot fail. */
size_t tr_status_format(const tr_status *status, char *buf, size_t size);

/* Frees *status_p (NULL allowed) and sets *status_p to NULL. */
void tr_status_destroy(tr_status **status_p);

/* Evaluates expr (a tr_status *); returns it from the enclosing function when it is an error. */
#define TR_RETURN_IF_ERROR(expr)          \
  do {                                    \
    tr_status *tr__status_ = (expr);      \
    if (tr__status_ != NULL) return tr__status_; \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_STATUS_H_ */
