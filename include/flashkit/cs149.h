/* flashkit C API of the CS149 ops (include/flashkit/cs149.hpp): contiguous buffers, shapes given explicitly,
 * device FK_CPU (0) or FK_CUDA (1; on the stream set with fk_cuda_set_stream). Every call returns an fk_status;
 * on failure fk_last_error() names the argument at fault and what was expected. */
#ifndef FLASHKIT_CS149_H
#define FLASHKIT_CS149_H
#include <stdint.h>

#include "flashkit/flashkit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* data uint8 [length, channels] -> out int32 [channels, num_bins]. */
FK_API fk_status fk_cs149_histogram(const uint8_t* data, int64_t length, int64_t channels, int64_t num_bins,
                                    int32_t* out, int32_t device);
/* out [m, n] = swish_beta(x w + b) * (x v + c); x [m, k], w and v [k, n], b and c [n], all f32.
 * kernel: 0 automatic, 2 the CUDA kernel v2 (split per fragment) (1 and 3, the retired v1 and v3, are rejected);
 * the CPU ignores it. */
FK_API fk_status fk_cs149_swiglu(const float* x, const float* w, const float* v, const float* b, const float* c,
                                 float beta, int64_t m, int64_t k, int64_t n, float* out, int32_t device,
                                 int32_t kernel);
/* RK4 heat equation on u0 f32 [nz, ny, nx] for n_steps; out (same shape, not aliasing u0) receives the field.
 * kernel: 0 automatic, 4 the CUDA stage kernel v4 (L1, 128-byte aligned warps) (1, 2, 3, 5 and 6, the retired v1,
 * v2, v3, v5 and v6, are rejected). */
FK_API fk_status fk_cs149_rk4(const float* u0, int64_t nz, int64_t ny, int64_t nx, float alpha, float hx, float hy,
                              float hz, int64_t n_steps, float* out, int32_t device, int32_t kernel);
/* The occupancy decoder's head: out[r] = LayerNorm(x[r]) . w + bias[0] (no affine; eps); x [rows, width],
 * w [width], bias [1], out [rows], all of dtype FK_F32 or FK_F16. */
FK_API fk_status fk_cs149_layernorm_head(const void* x, const void* w, const void* bias, float eps, int64_t rows,
                                         int64_t width, int32_t dtype, void* out, int32_t device);
/* The occupancy decoder's query input layer + SiLU: h = silu(q w^T + b); q [rows, in_dim <= 16], w [width,
 * in_dim], b [width], h [rows, width], all of dtype FK_F32 or FK_F16. */
FK_API fk_status fk_cs149_query_embed(const void* q, const void* w, const void* b, int64_t rows, int64_t in_dim,
                                      int64_t width, int32_t dtype, void* h, int32_t device);

#ifdef __cplusplus
}
#endif
#endif
