/* elementwise.c: c = a + alpha * b over same-shaped tensors (torch.add), floats and ints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/cpu/kernels/cpu_kernels.h"
#include "backends/cpu/kernels/internal.h"

/* Elements one work item covers. */
#define TR__ADD_BLOCK 4096

typedef struct tr__add_ctx {
  const void *a, *b;
  void *c;
  int64_t numel;
  tr__cpu_kind kind;
  double alpha;       /* float kinds */
  uint64_t alpha_int; /* int kinds: alpha as two's complement, for wrapping arithmetic */
} tr__add_ctx;

static tr_status *tr__add_blocks(void *vctx, int64_t begin, int64_t end) {
  const tr__add_ctx *ctx = vctx;
  const int64_t lo = begin * TR__ADD_BLOCK;
  const int64_t hi = end * TR__ADD_BLOCK < ctx->numel ? end * TR__ADD_BLOCK : ctx->numel;
  switch (ctx->kind) {
    case TR__CPU_F64: {
      const double *a = ctx->a, *b = ctx->b;
      double *c = ctx->c;
      const double alpha = ctx->alpha;
      for (int64_t i = lo; i < hi; i++) c[i] = a[i] + alpha * b[i];
      break;
    }
    case TR__CPU_I32: {
      const int32_t *a = ctx->a, *b = ctx->b;
      int32_t *c = ctx->c;
      const uint32_t alpha = (uint32_t)ctx->alpha_int;
      for (int64_t i = lo; i < hi; i++) {
        c[i] = (int32_t)((uint32_t)a[i] + alpha * (uint32_t)b[i]);
      }
      break;
    }
    case TR__CPU_I64: {
      const int64_t *a = ctx->a, *b = ctx->b;
      int64_t *c = ctx->c;
      const uint64_t alpha = ctx->alpha_int;
      for (int64_t i = lo; i < hi; i++) {
        c[i] = (int64_t)((uint64_t)a[i] + alpha * (uint64_t)b[i]);
      }
      break;
    }
    default: {
      float abuf[TR__CPU_CHUNK], bbuf[TR__CPU_CHUNK], out[TR__CPU_CHUNK];
      const float alpha = (float)ctx->alpha;
      for (int64_t s = lo; s < hi; s += TR__CPU_CHUNK) {
        int64_t m = hi - s < TR__CPU_CHUNK ? hi - s : TR__CPU_CHUNK;
        const float *af = tr__cpu_load(ctx->a, ctx->kind, s, m, abuf);
        const float *bf = tr__cpu_load(ctx->b, ctx->kind, s, m, bbuf);
        for (int64_t i = 0; i < m; i++) out[i] = af[i] + alpha * bf[i];
        tr__cpu_store(ctx->c, ctx->kind, s, m, out);
      }
      break;
    }
  }
  return NULL;
}

/* Writes alpha with the fewest digits that read back as the same double. */
static void tr__format_double(double v, char *buf, size_t size) {
  for (int precision = 1; precision <= 17; precision++) {
    snprintf(buf, size, "%.*g", precision, v);
    if (strtod(buf, NULL) == v) return;
  }
}

tr_status *tr_cpu_add(const void *a, const void *b, void *c, int64_t numel, tr_dtype dtype,
                      double alpha, int threads) {
  static const char op[] = "add";
  tr__cpu_kind kind;
  TR_RETURN_IF_ERROR(tr__cpu_check_threads(op, threads));
  TR_RETURN_IF_ERROR(tr__cpu_check_dtype(
      op, "dtype", dtype,
      TR__CPU_HALVES_F32 | TR__CPU_SET(TR__CPU_F64) | TR__CPU_SET(TR__CPU_I32) |
          TR__CPU_SET(TR__CPU_I64),
      &kind));
  TR_RETURN_IF_ERROR(tr__cpu_check_size(op, "numel", numel));
  tr__add_ctx ctx = {a, b, c, numel, kind, alpha, 0};
  if (kind == TR__CPU_I32 || kind == TR__CPU_I64) {
    const double lo = kind == TR__CPU_I32 ? -2147483648.0 : -9223372036854775808.0;
    const double hi = kind == TR__CPU_I32 ? 2147483648.0 : 9223372036854775808.0; /* excluded */
    const char *name = kind == TR__CPU_I32 ? "int32" : "int64";
    char text[32];
    tr__format_double(alpha, text, sizeof text);
    if (!(alpha == floor(alpha))) { /* nan fails here; inf fails the range below */
      return TR_STATUS(TR_VALUE, "add: alpha %s is not integral, as dtype %s requires", text,
                       name);
    }
    if (!(alpha >= lo && alpha < hi)) {
      return TR_STATUS(TR_VALUE, "add: alpha %s is out of range for dtype %s", text, name);
    }
    ctx.alpha_int = (uint64_t)(int64_t)alpha;
  }
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "a", a, numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "b", b, numel));
  TR_RETURN_IF_ERROR(tr__cpu_check_ptr(op, "c", c, numel));
  const int64_t blocks = numel / TR__ADD_BLOCK + (numel % TR__ADD_BLOCK != 0);
  return tr__cpu_parallel_for(threads, blocks, TR__ADD_BLOCK, tr__add_blocks, &ctx);
}
