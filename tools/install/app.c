/* app.c: a program outside the repository, built against an installed tilerun with pkg-config:
 * runs AddFwdOp on two cpu tensors through the installed CPU backend and manifest, found with no
 * environment variable, and prints the version. */
#include <stdio.h>
#include <string.h>

#include <tilerun/tilerun.h>

int main(void) {
  tr_runtime *rt = NULL;
  tr_status *status = tr_runtime_new(NULL, &rt);
  tr_op *op = NULL;
  if (status == NULL) status = tr_op_new(rt, "AddFwdOp", NULL, 0, NULL, &op);
  float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40}, c[4] = {0};
  int64_t shape[1] = {4};
  DLTensor ta = {a, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0}, tb = ta, tc = ta;
  tb.data = b;
  tc.data = c;
  const DLTensor *in[2] = {&ta, &tb};
  DLTensor *out[1] = {&tc};
  if (status == NULL) status = tr_op_call_into(op, in, 2, out, 1);
  if (status != NULL) {
    fprintf(stderr, "app: %s: %s\n", tr_code_name(tr_status_code(status)), tr_status_message(status));
    tr_status_destroy(&status);
    return 1;
  }
  printf("tilerun %s (headers %s) on %s: %g %g %g %g\n", tr_version(), TILERUN_VERSION, tr_op_target(op), c[0], c[1],
         c[2], c[3]);
  int ok = c[0] == 11 && c[1] == 22 && c[2] == 33 && c[3] == 44 && strcmp(tr_version(), TILERUN_VERSION) == 0;
  tr_op_destroy(&op);
  tr_runtime_destroy(&rt);
  return ok ? 0 : 1;
}
