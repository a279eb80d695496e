/* launch.h: the launch component: a built kernel run on tensors, as a message handler, and the
 * caller's side of the contract. Two forms of request (proto/components.proto):
 *
 *  - by address (in process): the address of a tr_kernel and of each tensor's data in the
 *    caller's process, trusted as a function call would be. Only a handler in the caller's
 *    process (inline and thread placements) accepts it.
 *  - by descriptor (any placement): the op, its settled params and its target; the handler runs
 *    the op with kernels its own process built (nothing received is executed), on tensors whose
 *    memory travels as references another process can map (sharing/sharing.h: cpu tensors from
 *    tilerun's shared-memory allocator, cuda tensors through CUDA IPC). `tilerun serve launch`
 *    serves this form. A tensor whose memory cannot be shared is a ValueError naming it, on the
 *    caller's side, before anything is sent. */
#ifndef TILERUN_COMPONENTS_LAUNCH_H_
#define TILERUN_COMPONENTS_LAUNCH_H_

#include <stddef.h>
#include <stdint.h>

#include "registry/registry.h"
#include "sharing/sharing.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op a request by descriptor names. */
typedef struct tr_launch_descriptor {
  const char *op;
  const char *target; /* a target's name, or TR_BUILTIN */
  const tr_named_value *params;
  size_t n_params;
  int tuned; /* a call: the caller's op is in tuned mode, so the op here enters it too */
} tr_launch_descriptor;

/* An op's kernel config as it travels: at most TR_LAUNCH_CONFIG_MAX values, each name's text
 * in `names` (values[i].name points there), the values owned (tr_launch_config_clear). */
enum { TR_LAUNCH_CONFIG_MAX = 16, TR_LAUNCH_CONFIG_NAME_MAX = 64 };
typedef struct tr_launch_config {
  size_t n;
  char names[TR_LAUNCH_CONFIG_MAX][TR_LAUNCH_CONFIG_NAME_MAX];
  tr_named_value values[TR_LAUNCH_CONFIG_MAX];
} tr_launch_config;
/* Copies values (NULL names and the values past the 16th dropped, names cut to 63 bytes) over
 * what `out` held. */
tr_status *tr_launch_config_set(tr_launch_config *out, const tr_named_value *values, size_t n) TR_MUST_USE;
void tr_launch_config_clear(tr_launch_config *c);

/* What the handler asks of the ops it runs by descriptor, with kernels this process builds (the
 * runtime's op cache: runtime/op_cache.h): a call into given outputs; tuned mode (request_tune);
 * the kernel config, copied into `out`. */
typedef struct tr_launch_ops {
  tr_status *(*call)(void *ctx, const tr_launch_descriptor *d, DLTensor *const *inputs, size_t n_inputs,
                     DLTensor *const *outputs, size_t n_outputs);
  tr_status *(*tune)(void *ctx, const tr_launch_descriptor *d);
  tr_status *(*config)(void *ctx, const tr_launch_descriptor *d, tr_launch_config *out);
} tr_launch_ops;

/* The handler's context. */
typedef struct tr_launch_context {
  const tr_registry *registry; /* device names back to DLPack devices */
  int in_process;              /* 1: addresses (kernel and data) are accepted */
  tr_share_maps *maps;         /* where shared references are mapped; NULL: none accepted */
  const tr_launch_ops *ops;    /* the descriptor form; NULL: refused */
  void *ops_ctx;
} tr_launch_context;

/* The handler: `ctx` is a tr_launch_context. A request that does not decode is a
 * TransportError; a null kernel, a kernel address out of process, a tensor whose spec does not
 * parse, null data for a present tensor, a tensor without a reference out of process, or one
 * that overruns its memory is a reply carrying a ValueError naming the tensor; a reference that
 * cannot be opened keeps its error's code (IOError: the segment is gone), named the same way;
 * the kernel's own error is the reply's, unchanged. An ask (tune, config) that carries tensors or
 * names no op, or an action this handler does not know, is a ValueError naming it. By
 * descriptor, a call's cuda work is finished (the
 * stream synchronised) before the reply, whether the op succeeded or not. Thread-safe when the
 * kernels are. */
tr_status *tr_launch_handle(void *ctx, const uint8_t *request, size_t request_size, uint8_t *reply,
                            size_t reply_cap, size_t *reply_size);

/* The caller's side, by address: NULL entries in `inputs` (an absent optional input) or
 * `outputs` travel as absent. More than 16 inputs or 8 outputs, a rank above TR_MAX_RANK or a
 * device the registry cannot name is a ValueError. */
tr_status *tr_launch_encode(const tr_registry *registry, const tr_kernel *kernel, DLTensor *const *inputs,
                            size_t n_inputs, DLTensor *const *outputs, size_t n_outputs, uint8_t *buf,
                            size_t size, size_t *out_size) TR_MUST_USE;

/* The caller's side, by descriptor: as tr_launch_encode, and each present tensor's memory as a
 * shared reference (its address travels too, for a handler in this process). Memory that
 * cannot be shared is a ValueError naming the tensor ("input 1: cpu memory at 0x... cannot be
 * shared..."). */
tr_status *tr_launch_encode_shared(const tr_registry *registry, const tr_launch_descriptor *descriptor,
                                   DLTensor *const *inputs, size_t n_inputs, DLTensor *const *outputs,
                                   size_t n_outputs, uint8_t *buf, size_t size, size_t *out_size) TR_MUST_USE;

/* The caller's side of the asks with no tensors, by descriptor: tuned mode for the op there
 * (TR_LAUNCH_TUNE), or its kernel config (TR_LAUNCH_CONFIG; a string value longer than 255
 * bytes comes back cut to 255). Another action is a ValueError. */
typedef enum tr_launch_action { TR_LAUNCH_TUNE = 1, TR_LAUNCH_CONFIG = 2 } tr_launch_action;
tr_status *tr_launch_encode_ask(const tr_launch_descriptor *descriptor, tr_launch_action action, uint8_t *buf,
                                size_t size, size_t *out_size) TR_MUST_USE;

/* The most a LaunchRequest takes encoded, and a LaunchReply (a buffer of this size always fits
 * one). */
#define TR_LAUNCH_REQUEST_MAX (64 * 1024)
#define TR_LAUNCH_REPLY_MAX (32 * 1024)

/* Decodes a reply: NULL when the kernel ran, else its error. With `config` (a reply to
 * TR_LAUNCH_CONFIG), what it held is cleared and the config the reply carries copied there. */
tr_status *tr_launch_decode(const uint8_t *reply, size_t size, tr_launch_config *config) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_COMPONENTS_LAUNCH_H_ */
