/* What the C kernels share (riskppo/nn/native: lstm.c, actor_step.c): exp and tanh, the
 * Cephes single-precision approximations (about 2 ulp), written branch-free so that the compiler
 * vectorises them (NaN inputs give NaN outputs); the register-tiled matrix product gemm_acc; and
 * the LSTM forward that the rollout's actor step runs for one step.
 */
#ifndef RISKPPO_COMMON_H
#define RISKPPO_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The type of every size product, offset and loop counter in the kernels: 64 bits, since a
 * product of sizes below 2^31 each (B * 4H, T * B) need not fit an int (lstm.c). */
typedef ptrdiff_t idx_t;

static inline float exp_f(float x) {
    x = x > 88.0f ? 88.0f : x; /* NaN compares false and passes through */
    x = x < -87.0f ? -87.0f : x;
    float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    n = x != x ? 0.0f : n; /* NaN to int below would be undefined behaviour (C11 6.3.1.4) */
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x != x ? x : p * scale;
}

static inline float tanh_f(float x) {
    float a = x < 0.0f ? -x : x;
    float z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                    1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    float big = 1.0f - 2.0f / (exp_f(2.0f * a) + 1.0f);
    big = x < 0.0f ? -big : big;
    return a > 0.625f ? big : small; /* NaN: a > 0.625 is false, small is NaN */
}

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4))); /* unaligned loads/stores */
#define LD(p) (*(const v8u *)(p))
#define ST(p, v) (*(v8u *)(p) = (v))

/* C[M, N] += A[M, Kd] W[Kd, N] (row-major, leading dimensions lda, ldw, ldc), in tiles of rows
 * held in registers while a strip of W (reused by every row tile) streams past: 8 x 32 tiles
 * of 512-bit vectors where the CPU has AVX-512 (16 accumulators of its 32 registers: on one Zen 4
 * core the LSTM step's 16 x 256 x 64 product takes 4.7 us, against 10.3 us in 4 x 16 tiles),
 * else 4 x 16 tiles of 256-bit vectors (8 of 16 registers). Every element is summed over j in
 * the same order, one fused multiply-add per j, on every path, so a row's result does not depend
 * on M, on where the row falls in a tile, or on which path ran. */
#if defined(__AVX512F__)
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));
#define LD16(p) (*(const v16u *)(p))
#define ST16(p, v) (*(v16u *)(p) = (v))

/* Columns [n0, n0 + 32) of rows [m, m + R), R <= 8: always inlined and called with a constant
 * R, so that the loops over r unroll and the accumulators stay in registers. */
static inline __attribute__((always_inline)) void tile32(int R, idx_t m, idx_t n0, idx_t Kd,
                                                         const float *restrict A, ptrdiff_t a_m,
                                                         ptrdiff_t a_j, const float *restrict W,
                                                         ptrdiff_t ldw, float *restrict C,
                                                         ptrdiff_t ldc) {
    v16 x[8], y[8];
    for (int r = 0; r < R; ++r) {
        x[r] = LD16(C + (m + r) * ldc + n0);
        y[r] = LD16(C + (m + r) * ldc + n0 + 16);
    }
    for (idx_t j = 0; j < Kd; ++j) {
        const v16 w0 = LD16(W + j * ldw + n0), w1 = LD16(W + j * ldw + n0 + 16);
        for (int r = 0; r < R; ++r) {
            const float a = A[(m + r) * a_m + j * a_j];
            x[r] += a * w0, y[r] += a * w1;
        }
    }
    for (int r = 0; r < R; ++r) {
        ST16(C + (m + r) * ldc + n0, x[r]);
        ST16(C + (m + r) * ldc + n0 + 16, y[r]);
    }
}
#endif

/* C[M, N] += A[M, Kd] W[Kd, N] with A's element (m, j) at A[m * a_m + j * a_j]: row-major A
 * (a_j = 1) or a transposed one (a_m = 1). */
static inline void gemm_strided(idx_t M, idx_t N, idx_t Kd, const float *restrict A,
                                ptrdiff_t a_m, ptrdiff_t a_j, const float *restrict W,
                                ptrdiff_t ldw, float *restrict C, ptrdiff_t ldc) {
    idx_t n0 = 0;
#if defined(__AVX512F__)
    for (; n0 + 32 <= N; n0 += 32) {
        idx_t m = 0;
        for (; m + 8 <= M; m += 8) tile32(8, m, n0, Kd, A, a_m, a_j, W, ldw, C, ldc);
        for (; m + 4 <= M; m += 4) tile32(4, m, n0, Kd, A, a_m, a_j, W, ldw, C, ldc);
        for (; m < M; ++m) tile32(1, m, n0, Kd, A, a_m, a_j, W, ldw, C, ldc);
    }
#endif
    for (; n0 + 16 <= N; n0 += 16) {
        idx_t m = 0;
        for (; m + 4 <= M; m += 4) {
            float *c0 = C + m * ldc + n0, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
            const float *a0 = A + m * a_m, *a1 = a0 + a_m, *a2 = a1 + a_m, *a3 = a2 + a_m;
            v8 x0 = LD(c0), y0 = LD(c0 + 8), x1 = LD(c1), y1 = LD(c1 + 8);
            v8 x2 = LD(c2), y2 = LD(c2 + 8), x3 = LD(c3), y3 = LD(c3 + 8);
            for (idx_t j = 0; j < Kd; ++j) {
                const v8 w0 = LD(W + j * ldw + n0), w1 = LD(W + j * ldw + n0 + 8);
                const float b0 = a0[j * a_j], b1 = a1[j * a_j], b2 = a2[j * a_j], b3 = a3[j * a_j];
                x0 += b0 * w0, y0 += b0 * w1, x1 += b1 * w0, y1 += b1 * w1;
                x2 += b2 * w0, y2 += b2 * w1, x3 += b3 * w0, y3 += b3 * w1;
            }
            ST(c0, x0), ST(c0 + 8, y0), ST(c1, x1), ST(c1 + 8, y1);
            ST(c2, x2), ST(c2 + 8, y2), ST(c3, x3), ST(c3 + 8, y3);
        }
        for (; m < M; ++m) {
            float *c0 = C + m * ldc + n0;
            const float *a0 = A + m * a_m;
            v8 x0 = LD(c0), y0 = LD(c0 + 8);
            for (idx_t j = 0; j < Kd; ++j) {
                const float a = a0[j * a_j];
                x0 += a * LD(W + j * ldw + n0), y0 += a * LD(W + j * ldw + n0 + 8);
            }
            ST(c0, x0), ST(c0 + 8, y0);
        }
    }
    for (idx_t m = 0; m < M; ++m)
        for (idx_t j = 0; j < Kd; ++j)
            for (idx_t n = n0; n < N; ++n) C[m * ldc + n] += A[m * a_m + j * a_j] * W[j * ldw + n];
}

static inline void gemm_acc(idx_t M, idx_t N, idx_t Kd, const float *restrict A, ptrdiff_t lda,
                            const float *restrict W, ptrdiff_t ldw, float *restrict C,
                            ptrdiff_t ldc) {
    gemm_strided(M, N, Kd, A, lda, 1, W, ldw, C, ldc);
}

/* The masked LSTM recurrence (lstm.c; its arguments are documented there). */
int riskppo_lstm_forward(int T, int K, int B, int H, const float *xproj, ptrdiff_t xs_t,
                         ptrdiff_t xs_k, ptrdiff_t xs_b, const float *w_t, const float *h0,
                         const float *c0, const float *keep, float *hs, float *cs, float *acts,
                         float *tanh_c, int g_doubled);

#endif
