/* probe.h: the smallest nvcc-built kernel, proving the nvcc path builds, links and runs. */
#ifndef TILERUN_KERNELS_PROBE_H_
#define TILERUN_KERNELS_PROBE_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Writes out[i] = i * i for i < n on the current CUDA device, synchronously. Returns 0 on
 * success, or the CUDA error number (whose name tr_cuda_probe_error gives). */
int tr_cuda_probe_squares(int *out_host, int n);
const char *tr_cuda_probe_error(int error);

#ifdef __cplusplus
}
#endif

#endif /* TILERUN_KERNELS_PROBE_H_ */
