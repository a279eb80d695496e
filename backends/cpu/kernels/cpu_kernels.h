/* cpu_kernels.h: the CPU backend's compute kernels, plain C11 over raw contiguous buffers. */
#ifndef TILERUN_BACKENDS_CPU_KERNELS_CPU_KERNELS_H_
#define TILERUN_BACKENDS_CPU_KERNELS_CPU_KERNELS_H_

/* The kernels know nothing of the runtime: every tensor is a pointer to its first element, laid
 * out row-major with no gaps, and the caller gives the sizes. The semantics are PyTorch's (the
 * manifest's ref_api for each op, the files under manifest/spec).
 *
 * Common rules, true of every kernel below:
 * - Returns NULL on success. Otherwise a ValueError naming the argument that is unmet and the
 *   value received (an unsupported dtype, a negative size, a NULL buffer where elements must be
 *   read or written, a size product that overflows int64, a value out of range), or an
 *   OutOfMemoryError when scratch memory cannot be had. The caller frees it with
 *   tr_status_destroy. Arguments are checked before anything is written; an OutOfMemoryError
 *   may leave outputs partly written.
 * - float16 and bfloat16 are read exactly and stored rounding to nearest, ties to even (inf,
 *   nan and subnormals kept). Arithmetic runs in float32 (float64 where a float64 tensor takes
 *   part); reductions sum in float32 lanes, chunk totals in float64.
 * - `threads`: how many ranges to split the work into, run by the backend's pool (threads
 *   started once per process, one fewer than tr_cpu_default_threads(), and the calling thread);
 *   0 means tr_cpu_default_threads(); at most TR_CPU_MAX_THREADS. Work of 1 << 16 elements or
 *   less (TR_CPU_PARALLEL_MIN) runs on the calling thread, and so does a call made while another
 *   thread's call holds the pool. Work is split by rows (or another whole unit each kernel
 *   names), so the result is bit-identical for every thread count. Negative is a ValueError.
 *   gemm's multiply runs on OpenBLAS's own threads instead, but for its skinny path (see
 *   tr_cpu_gemm).
 * - Thread-safe: calls share no state. Outputs must not overlap inputs, except that an output
 *   may be exactly its same-dtype, same-shaped input (in place) where a kernel says so.
 * - Nothing returned needs freeing except the status. */

#include <stdint.h>

#include "tilerun/dtype.h"
#include "tilerun/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most threads a kernel starts, whatever `threads` asks. */
#define TR_CPU_MAX_THREADS 64
/* Work of at most this many elements (multiply-adds for gemm and attention) runs on one thread. */
#define TR_CPU_PARALLEL_MIN (1 << 16)

/* The thread count that `threads == 0` means, and the pool's size (workers plus the caller):
 * $TILERUN_CPU_THREADS when it holds an integer in [1, TR_CPU_MAX_THREADS], else the processors
 * this process may run on (at most TR_CPU_MAX_THREADS). Read once per process (the first call
 * decides). Cannot fail. Thread-safe. */
int tr_cpu_default_threads(void);

/* ---- Element conversions (exact, shared with the tests and the plugin glue) --------------- */

/* float16 / bfloat16 bits to float32: exact for every pattern (a nan keeps its sign and
 * payload). Cannot fail. Thread-safe. */
float tr_cpu_f16_to_f32(uint16_t bits);
float tr_cpu_bf16_to_f32(uint16_t bits);

/* float32 to float16 / bfloat16 bits, rounding to nearest, ties to even; overflow gives inf, a
 * nan stays a nan with its sign (and the payload's top bits; quiet when those are zero). Cannot
 * fail. Thread-safe. */
uint16_t tr_cpu_f32_to_f16(float value);
uint16_t tr_cpu_f32_to_bf16(float value);

/* ---- Normalization (norm.c); dtype float16, bfloat16 or float32 ---------------------------- */

/* RMSNorm over the last axis (torch.nn.functional.rms_norm): x and y are [rows, n], weight [n]
 * or NULL. y = round(round(x * rsqrt(mean(x^2) + eps)) * weight), the inner rounding to dtype
 * only when a weight is given (as torch's composite rounds before multiplying by the weight).
 * eps arrives resolved (the caller turns None into torch.finfo(dtype).eps). Threads split rows.
 * y may be x. */
tr_status *tr_cpu_rms_norm(const void *x, const void *weight, void *y, int64_t rows, int64_t n,
                           tr_dtype dtype, double eps, int threads) TR_MUST_USE;

/* LayerNorm over the last axis (torch.nn.functional.layer_norm): x and y [rows, n], weight and
 * bias [n] or NULL. y = (x - mean) / sqrt(var + eps) * weight + bias, var biased. Threads split
 * rows. y may be x. */
tr_status *tr_cpu_layer_norm(const void *x, const void *weight, const void *bias, void *y,
                             int64_t rows, int64_t n, tr_dtype dtype, double eps,
                             int threads) TR_MUST_USE;

/* GroupNorm (torch.nn.functional.group_norm): x and y [N, C, spatial], weight and bias [C] or
 * NULL. Statistics (biased variance) per sample and group of C / groups channels. groups must be
 * > 0 and divide C (ValueError otherwise, naming both). Threads split (sample, group) pairs.
 * y may be x. */
tr_status *tr_cpu_group_norm(const void *x, const void *weight, const void *bias, void *y,
                             int64_t N, int64_t C, int64_t spatial, int64_t groups,
                             tr_dtype dtype, double eps, int threads) TR_MUST_USE;

/* BatchNorm (torch.nn.functional.batch_norm): x and y [N, C, spatial]; running_mean,
 * running_var, weight, bias [C] of dtype, each may be NULL (but see below).
 * training != 0: normalizes with the batch statistics of each channel (biased variance);
 *   N * spatial must be > 1 (ValueError otherwise, as torch). When running_mean / running_var
 *   are given they are updated in place: mean <- (1 - momentum) * mean + momentum * batch_mean,
 *   var likewise with the UNBIASED batch variance. mean_out / rstd_out (float32 [C], or NULL)
 *   receive the batch mean and 1 / sqrt(biased var + eps).
 * training == 0: normalizes with running_mean and running_var, which are then required
 *   (ValueError naming the missing one); mean_out and rstd_out are not written.
 * Threads split channels. y may be x. */
tr_status *tr_cpu_batch_norm(const void *x, void *running_mean, void *running_var,
                             const void *weight, const void *bias, void *y, float *mean_out,
                             float *rstd_out, int64_t N, int64_t C, int64_t spatial,
                             int training, double momentum, double eps, tr_dtype dtype,
                             int threads) TR_MUST_USE;

/* ---- Softmax (softmax.c) -------------------------------------------------------------------- */

/* Softmax along the middle axis of x viewed as [outer, dim_size, inner]
 * (torch.nn.functional.softmax(x, dim, dtype=out_dtype)): y = exp(x - max) / sum(exp(x - max)).
 * in_dtype: float16, bfloat16, float32; out_dtype: those or float64. As torch, x is first
 * converted to out_dtype, then softmax runs in out_dtype (float32 arithmetic, float64 for a
 * float64 out_dtype). Threads split the outer rows (and blocks of inner columns). y may be x when
 * in_dtype equals out_dtype. */
tr_status *tr_cpu_softmax(const void *x, void *y, int64_t outer, int64_t dim_size, int64_t inner,
                          tr_dtype in_dtype, tr_dtype out_dtype, int threads) TR_MUST_USE;

/* ---- Elementwise (elementwise.c) ------------------------------------------------------------ */

/* c = a + alpha * b over numel elements (torch.add), dtype float16, bfloat16, float32, float64,
 * int32 or int64. For integer dtypes alpha must be integral and fit the dtype (ValueError naming
 * alpha otherwise) and the arithmetic wraps as torch's does. c may be a or b. */
tr_status *tr_cpu_add(const void *a, const void *b, void *c, int64_t numel, tr_dtype dtype,
                      double alpha, int threads) TR_MUST_USE;

/* ---- GEMM (gemm.c) -------------------------------------------------------------------------- */

/* d[M, N] = op(a) @ op(b) (torch.matmul of 2-D operands): a is [K, M] when trans_a else [M, K];
 * b is [N, K] when trans_b else [K, N]. dtype float16, bfloat16 or float32. OpenBLAS's
 * cblas_sgemm does the multiply, summing in float32; float16 and bfloat16 operands are converted
 * to float32 in blocks of at most 4096 rows, columns and depth (by the pool, on `threads`; up to
 * 192 MiB of scratch), d's block accumulating in float32 over the depth blocks and rounded once.
 * The multiply runs on OpenBLAS's threads, whose count is the process's (OPENBLAS_NUM_THREADS;
 * default the processors), not `threads`: numpy and others in the process share that library
 * and its setting, so the backend leaves it alone. Except the skinny path: float16 and bfloat16
 * with op(a) of at most 16 rows, or 48 where b is [N, K] (trans_b) of at least 8Mi elements (and
 * op(a) in float32 of at most 64 MiB; float16: K at most 1Mi), stream b once on the pool's
 * `threads`, op(a) converted to float32 once, summing in float32. K == 0 gives zeros.
 * Every path gives the same bits for every thread count. d must not overlap a or b. */
tr_status *tr_cpu_gemm(const void *a, const void *b, void *d, int64_t M, int64_t N, int64_t K,
                       int trans_a, int trans_b, tr_dtype dtype, int threads) TR_MUST_USE;

/* ---- Rotary embedding (rope.c) -------------------------------------------------------------- */

/* vLLM's rotary embedding: x and y [tokens, heads, head_dim]; positions [tokens] of pos_dtype
 * (int32 or int64); cache [cache_rows, head_dim] of dtype, row p = [cos(p * theta_i) for
 * i < head_dim / 2, then sin(p * theta_i)]. is_neox != 0 rotates the halves (x[:D/2], x[D/2:]),
 * else interleaved pairs (x[0::2], x[1::2]), GPT-J style: y1 = x1 * cos - x2 * sin,
 * y2 = x2 * cos + x1 * sin. head_dim must be even. A position < 0 or >= cache_rows is a
 * ValueError naming the token index and the position (the first such token; nothing written).
 * dtype float16, bfloat16 or float32. Threads split tokens. y may be x. */
tr_status *tr_cpu_rope(const void *positions, tr_dtype pos_dtype, const void *x,
                       const void *cache, void *y, int64_t tokens, int64_t heads,
                       int64_t head_dim, int64_t cache_rows, int is_neox, tr_dtype dtype,
                       int threads) TR_MUST_USE;

/* ---- Attention (attention.c) ---------------------------------------------------------------- */

/* One GQA decode step: q and o [B, heads, dim]; k_cache and v_cache [B, S, heads_kv, dim];
 * seqlens int32 [B]. Query head h attends to the first seqlens[b] entries of KV head
 * h / (heads / heads_kv): logits = (q . k) * scale; when softcap > 0,
 * logits = softcap * tanh(logits / softcap); p = softmax(logits); o = sum p * v. scale arrives
 * resolved (the caller turns None into 1 / sqrt(dim)). seqlens[b] == 0 gives zeros; a seqlens
 * value < 0 or > S is a ValueError naming the batch index and the value (nothing written).
 * heads_kv must be > 0 and divide heads. dtype float16 or bfloat16 (the op's signature). Threads
 * split (batch, KV head) pairs. o must not overlap the inputs. */
tr_status *tr_cpu_gqa_decode(const void *q, const void *k_cache, const void *v_cache,
                             const int32_t *seqlens, void *o, int64_t B, int64_t heads,
                             int64_t heads_kv, int64_t dim, int64_t S, double softcap,
                             double scale, tr_dtype dtype, int threads) TR_MUST_USE;

/* Causal GQA attention over a prompt: q and o [B, L, heads, dim]; k and v [B, L, heads_kv, dim].
 * Query row i of head h attends to key rows 0..i of KV head h / (heads / heads_kv) in its batch
 * row: logits = (q . k) * scale, p = softmax(logits), o = sum p * v, in float32. scale arrives
 * resolved (the caller turns None into 1 / sqrt(dim)). heads_kv must be > 0 and divide heads.
 * dtype float16 or bfloat16 (the op's signature). Threads split query rows. o must not overlap
 * the inputs. */
tr_status *tr_cpu_gqa_prefill(const void *q, const void *k, const void *v, void *o, int64_t B,
                              int64_t L, int64_t heads, int64_t heads_kv, int64_t dim,
                              double scale, tr_dtype dtype, int threads) TR_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_BACKENDS_CPU_KERNELS_CPU_KERNELS_H_ */
