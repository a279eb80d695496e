/* inspect.h: what a call would do, asked without making it: the manifest's ops (op_def.h), the
 * output specs the manifest infers, the in-tree kernel selection (the spec's op.key_for /
 * op.kernel_for, device facts stated or derived) and the inventory of the in-tree ops (interfaces,
 * implementation keys). No builder runs and no target is settled, except where kernel_for builds.
 * docs/calling-ops.md, "Asking before calling". */
#ifndef TILERUN_INSPECT_H_
#define TILERUN_INSPECT_H_

#include <stddef.h>
#include <stdint.h>

#include "tilerun/kernel_type.h"
#include "tilerun/op_def.h"
#include "tilerun/tilerun.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the manifest ---- */

/* The folder whose *.yaml the runtime loaded (the option given, else the default tr_runtime_new
 * chose: $TILERUN_MANIFEST_DIR, the installed manifest or "manifest/spec"). Owned by the runtime;
 * NULL for a NULL runtime. */
const char *tr_runtime_manifest_dir(const tr_runtime *runtime);

/* How many ops the runtime's manifest declares, and the i-th of them in name order (NULL past the
 * count). The op_def.h accessors read each. Cannot fail; thread-safe. */
size_t tr_runtime_op_count(const tr_runtime *runtime);
const tr_op_def *tr_runtime_op_at(const tr_runtime *runtime, size_t i);

/* The op named `op_name` in the runtime's manifest, or NULL when it has none (or an argument is
 * NULL). Thread-safe. */
const tr_op_def *tr_runtime_find_op(const tr_runtime *runtime, const char *op_name);

/* ---- output specs ---- */

/* The output specs of a call of `op` with inputs of these specs (in declaration order; NULL or
 * left out for a trailing absent optional input): `outputs[i]` and `present[i]` for each of the
 * manifest's outputs (present 0, outputs[i] zeroed, for one whose `when` is false for this call).
 * Checks the call as tr_op_call would (the op's settled params, every input's dtype and shape):
 * the same SignatureError on a call the manifest refuses; a ValueError when `n_outputs` is below
 * the op's output count. Reads only the manifest: no target, no builder, no device. Writes
 * nothing on failure. Thread-safe. */
tr_status *tr_op_output_specs(const tr_op *op, const tr_tensor_spec *const *inputs, size_t n_inputs,
                              tr_tensor_spec *outputs, uint8_t *present, size_t n_outputs) TR_MUST_USE;

/* The same for the op named `op_name` with these params (no op instance needed): the params are
 * settled as tr_op_new settles them (an op not in the manifest is an OpNotAvailableError, a bad
 * param a SignatureError(param)). Runs no backend discovery. Thread-safe. */
tr_status *tr_runtime_output_specs(tr_runtime *runtime, const char *op_name, const tr_named_value *params,
                                   size_t n_params, const tr_tensor_spec *const *inputs, size_t n_inputs,
                                   tr_tensor_spec *outputs, uint8_t *present, size_t n_outputs) TR_MUST_USE;

/* ---- in-tree selection ---- */

/* What selection answered for a call: the kernel interface the call goes to and the key of the
 * implementation that serves it (static strings: tilerun's, or the registering plugin's, valid
 * while the runtime lives), and for kernel_for the kernel built (owned by the runtime, valid
 * until tr_runtime_destroy: call it, never release it). */
typedef struct tr_op_selection {
  const char *interface;
  const char *key;
  const tr_kernel *kernel; /* kernel_for only; NULL from key_for */
} tr_op_selection;

/* The spec's op.key_for: which in-tree implementation (or plugin kernel type joined to the op's
 * selection) serves a call of `op` with inputs of these specs on their device, whatever target
 * the op would settle. `stated` (TR_FACT_* of kernel_type.h) names the device facts taken from
 * `facts` (NULL when `stated` is 0); the rest are read from the device (a cuda device's from
 * the driver: a BackendError or DeviceError where there is none), so a test states all four
 * (TR_FACT_ARCH | TR_FACT_CALIBRATION | TR_FACT_SM_COUNT | TR_FACT_SMEM_BUDGET) to be
 * independent of the machine. Errors: the call's SignatureError (it is checked first); an op
 * with no in-tree kernels, or a device no implementation runs on, an OpNotAvailableError
 * ("<op>'s in-tree kernels do not run on <device>"); the selection's own SelectionError ("no
 * implementation serves this call" with each key's reason, "dispatch is ambiguous"). Builds
 * nothing. *out is cleared first. Thread-safe. */
tr_status *tr_op_key_for(const tr_op *op, const tr_tensor_spec *const *inputs, size_t n_inputs, uint32_t stated,
                         const tr_device_facts *facts, tr_op_selection *out) TR_MUST_USE;

/* The spec's op.kernel_for: selects as key_for and builds the kernel (the factory once per build
 * identity, kept by the runtime and shared by later calls asking the same). Device facts are
 * derived from the device: a `stated` mask other than 0 is the spec's SelectionError "this call
 * spec states ['arch']". The in-tree implementations compile with NVRTC and load on the call's
 * cuda device (the device must be present). Errors as key_for, then the factory's (a
 * CompileError with NVRTC's log, a DeviceError). *out is cleared first. Thread-safe. */
tr_status *tr_op_kernel_for(const tr_op *op, const tr_tensor_spec *const *inputs, size_t n_inputs, uint32_t stated,
                            const tr_device_facts *facts, tr_op_selection *out) TR_MUST_USE;

/* ---- the inventory ---- */

/* The most kernel types one op's inventory lists (in-tree ones and those plugins registered). */
#define TR_INVENTORY_MAX_TYPES 64

/* One in-tree op: its kernel interfaces and every implementation in its selection, in-tree ones
 * first (in their table's order), then those plugins registered with register_kernel_type. Each
 * type gives its key, interface, devices, architectures, general and preferred_over. The
 * pointers are static data (tilerun's or a loaded plugin's), valid while the runtime lives. */
typedef struct tr_op_inventory {
  const char *op;
  size_t n_interfaces;
  const tr_kernel_interface *const *interfaces;
  size_t n_types;
  const tr_kernel_type *types[TR_INVENTORY_MAX_TYPES];
} tr_op_inventory;

/* How many ops have in-tree kernels (RMSNormFwdOp, LayerNormFwdOp, SoftmaxFwdOp, AddFwdOp, ...).
 * Cannot fail; thread-safe. */
size_t tr_runtime_inventory_count(const tr_runtime *runtime);

/* The i-th of them (in the in-tree table's order, family by family), with the kernel types
 * plugins added: runs backend discovery first (its errors are returned). An `i` at or past the
 * count is a ValueError naming it. *out is zeroed first. Thread-safe. */
tr_status *tr_runtime_inventory_at(tr_runtime *runtime, size_t i, tr_op_inventory *out) TR_MUST_USE;

/* The same for the op named `op_name`: an op the manifest has but with no in-tree kernels (or
 * an op it has not) is an OpNotAvailableError naming it and listing the ops that have them. */
tr_status *tr_runtime_inventory_of(tr_runtime *runtime, const char *op_name, tr_op_inventory *out) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_INSPECT_H_ */
