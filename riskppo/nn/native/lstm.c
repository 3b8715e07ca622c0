/* The masked LSTM recurrence of riskppo.nn.lstm_kernel in C (float32, one thread).
 *
 * Why: the recurrence is T sequential steps of one small matmul plus a handful of
 * elementwise ops on [K, B, H] tensors; in PyTorch every one of those ops pays a dispatch and
 * an allocation that cost more than its arithmetic. Here a step is one loop nest: the matmul
 * h' W_hh^T accumulated row by row in registers, then the gates and the cell update fused.
 * riskppo_lstm_forward reads the input projection made before it (in PyTorch: the layers above
 * the first, riskppo/nn/lstm_kernel.py; the rollout step's own); riskppo_lstm_layer_forward
 * makes the first layer's itself, step by step into the gates (riskppo/nn/lstm_layer.py). The
 * weights' gradients are one product each over all steps, after the backward recursion
 * (weight_grad, riskppo_lstm_input_grad).
 *
 * Same equations, gate layout [i, f, g, o] and saved quantities as the PyTorch kernel:
 *   h', c' = keep_t h_{t-1}, keep_t c_{t-1}
 *   z      = xproj_t + h' W_hh^T,   i, f, o = sig(z_i, z_f, z_o),   s = sig(2 z_g), g = 2 s - 1
 *   c_t    = (f c' - i) + 2 i s,     h_t = o tanh(c_t)
 *
 * Returns 0, or -1 if its scratch memory could not be allocated (nothing was computed).
 * keep NULL: no reset (all ones). g_doubled: xproj's g gate is already doubled (the rollout
 * step's fused weights); else it is doubled here. exp_f, tanh_f and gemm_acc: common.h.
 *
 * Layouts (element strides): xproj [T, K, B, 4H] with strides (xs_t, xs_k, xs_b, 1); acts
 * [T, K, B, 4H], hs / cs / tanh_c [T, K, B, H], h0 / c0 [K, B, H], keep [T, B] contiguous;
 * w_t [K, H, 4H] = (W_hh with the g rows doubled)^T and w_hh [K, 4H, H] contiguous;
 * dz [T, K, B, 4H] with strides (dz_t, dz_k, dz_b, 1).
 *
 * Indices: each size arrives as an int (below 2^31, riskppo/nn/c_args.py), but their products
 * do not fit one (B * 4H, T * B: a batch of 2^16 sequences of 8192 units is 2^31 gate values).
 * So every size, loop counter and offset here is an idx_t (common.h: ptrdiff_t, 64 bits on
 * every platform riskppo builds on), converted from the int arguments before any arithmetic.
 */
#include <stdlib.h>

#include "common.h"

static inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

/* out [n, 4H] = w^T for gate weights w [4H, n], the g gate's columns doubled (tanh(z) =
 * 2 sig(2z) - 1: one sigmoid for all four gates). Rows written in order, w read with a stride. */
static void transpose_doubled(idx_t H, const float *w, idx_t n, float *out) {
    const idx_t G = 4 * H;
    for (idx_t j = 0; j < n; ++j) {
        float *row = out + j * G;
        for (idx_t g = 0; g < G; ++g) row[g] = w[g * n + j];
        for (idx_t g = 2 * H; g < 3 * H; ++g) row[g] *= 2.0f;
    }
}

/* The gates from their pre-activations z (in place: z becomes [i, f, s, o]) and the cell update
 * from the state c_prev entering the step (masked by kp here). */
static void cell(idx_t H, float *restrict z, const float *restrict c_prev, float kp,
                 float *restrict c, float *restrict tc, float *restrict h) {
    for (idx_t j = 0; j < 4 * H; ++j) z[j] = sigmoid_f(z[j]);
    const float *restrict i = z, *restrict f = z + H, *restrict s = z + 2 * H,
                          *restrict o = z + 3 * H;
    for (idx_t j = 0; j < H; ++j) {
        float cj = (f[j] * (c_prev[j] * kp) - i[j]) + 2.0f * (i[j] * s[j]);
        float tcj = tanh_f(cj);
        c[j] = cj;
        tc[j] = tcj;
        h[j] = o[j] * tcj;
    }
}

/* One step of one LSTM from the gates' input part already in z [B, 4H]: z += (keep_t h_prev) w_t
 * (w_t [H, 4H]; keep_t [B] or NULL: no reset), then the gates and the cell update into c, tc,
 * h ([B, H] each). hp [B, H] is scratch. */
static void recur_step(idx_t B, idx_t H, const float *h_prev, const float *c_prev,
                       const float *keep_t, const float *w_t, float *hp, float *z, float *c,
                       float *tc, float *h) {
    const idx_t G = 4 * H;
    for (idx_t b = 0; b < B; ++b) {
        const float kp = keep_t ? keep_t[b] : 1.0f;
        for (idx_t j = 0; j < H; ++j) hp[b * H + j] = h_prev[b * H + j] * kp;
    }
    gemm_acc(B, G, H, hp, H, w_t, G, z, G);
    for (idx_t b = 0; b < B; ++b)
        cell(H, z + b * G, c_prev + b * H, keep_t ? keep_t[b] : 1.0f, c + b * H, tc + b * H,
             h + b * H);
}

int riskppo_lstm_forward(int T_, int K_, int B_, int H_, const float *xproj, ptrdiff_t xs_t,
                          ptrdiff_t xs_k, ptrdiff_t xs_b, const float *w_t, const float *h0,
                          const float *c0, const float *keep, float *hs, float *cs, float *acts,
                          float *tanh_c, int g_doubled) {
    const idx_t T = T_, K = K_, B = B_, H = H_, G = 4 * H;
    const idx_t BH = B * H, KBH = K * BH, KBG = K * B * G;
    float *hp = malloc(sizeof(float) * (BH > 0 ? BH : 1)); /* masked states entering a step */
    if (!hp) return -1;
    for (idx_t t = 0; t < T; ++t) {
        for (idx_t k = 0; k < K; ++k) {
            float *z = acts + t * KBG + k * B * G;
            for (idx_t b = 0; b < B; ++b) {
                const float *x = xproj + t * xs_t + k * xs_k + b * xs_b;
                for (idx_t j = 0; j < G; ++j) z[b * G + j] = x[j];
                if (!g_doubled)
                    for (idx_t j = 2 * H; j < 3 * H; ++j) z[b * G + j] += x[j];
            }
            const idx_t prev = (t - 1) * KBH + k * BH, out = t * KBH + k * BH;
            recur_step(B, H, t ? hs + prev : h0 + k * BH, t ? cs + prev : c0 + k * BH,
                       keep ? keep + t * B : NULL, w_t + k * H * G, hp, z, cs + out,
                       tanh_c + out, hs + out);
        }
    }
    free(hp);
    return 0;
}

/* The first layer of K LSTMs that read one input x [T, B, D] (riskppo.nn.lstm_layer): as
 * riskppo_lstm_forward, with the input projection done here, step by step, into the gates:
 * z = b + x_t W_ih^T + h' W_hh^T, from the parameters as nn.LSTM holds them, w_ih [K, 4H, D],
 * bias [K, 4H] (b_ih + b_hh), w_hh [K, 4H, H]; they are transposed, and their g gate doubled,
 * once per call in scratch memory. All arrays contiguous; returns 0, or -1 if scratch memory
 * could not be allocated. */
int riskppo_lstm_layer_forward(int T_, int K_, int B_, int H_, int D_, const float *x,
                               const float *w_ih, const float *bias, const float *w_hh,
                               const float *h0, const float *c0, const float *keep, float *hs,
                               float *cs, float *acts, float *tanh_c) {
    const idx_t T = T_, K = K_, B = B_, H = H_, D = D_, G = 4 * H;
    const idx_t BH = B * H, KBH = K * BH, KBG = K * B * G, KG = K * G;
    float *hp = malloc(sizeof(float) * (BH + KG * (D + 1 + H) + 1));
    if (!hp) return -1;
    /* W_ih^T [K, D, 4H], the bias [K, 4H] and W_hh^T [K, H, 4H], the g gate doubled */
    float *w_ih_t = hp + BH, *b = w_ih_t + KG * D, *w_t = b + KG;
    for (idx_t k = 0; k < K; ++k) {
        transpose_doubled(H, w_ih + k * G * D, D, w_ih_t + k * D * G);
        transpose_doubled(H, w_hh + k * G * H, H, w_t + k * H * G);
        transpose_doubled(H, bias + k * G, 1, b + k * G);
    }
    for (idx_t t = 0; t < T; ++t) {
        for (idx_t k = 0; k < K; ++k) {
            float *z = acts + t * KBG + k * B * G;
            for (idx_t r = 0; r < B; ++r) memcpy(z + r * G, b + k * G, sizeof(float) * G);
            gemm_acc(B, G, D, x + t * B * D, D, w_ih_t + k * D * G, G, z, G);
            const idx_t prev = (t - 1) * KBH + k * BH, out = t * KBH + k * BH;
            recur_step(B, H, t ? hs + prev : h0 + k * BH, t ? cs + prev : c0 + k * BH,
                       keep + t * B, w_t + k * H * G, hp, z, cs + out, tanh_c + out, hs + out);
        }
    }
    free(hp);
    return 0;
}

/* The input projection's gradients for riskppo_lstm_layer_forward from dz as
 * riskppo_lstm_backward writes it (rows evenly spaced, strides dz_k, dz_b): dw_ih [K, 4H, D] =
 * sum over t, b of dz[t, k, b]^T x[t, b] and db [K, 4H] = sum of dz[t, k, b], in (t, b) order:
 * per k one product [x^T; 1] [D + 1, T B] dz_k [T B, 4H], then transposed. Returns 0, or -1 if
 * scratch memory could not be allocated. */
int riskppo_lstm_input_grad(int T_, int K_, int B_, int H_, int D_, const float *x,
                            const float *dz, ptrdiff_t dz_k, ptrdiff_t dz_b, float *dw_ih,
                            float *db) {
    const idx_t K = K_, H = H_, D = D_, G = 4 * H;
    const idx_t TB = (idx_t)T_ * B_, D1 = D + 1;
    float *a = malloc(sizeof(float) * (D1 * TB + D1 * G));
    if (!a) return -1;
    float *out = a + D1 * TB;
    for (idx_t r = 0; r < TB; ++r) {
        for (idx_t d = 0; d < D; ++d) a[d * TB + r] = x[r * D + d];
        a[D * TB + r] = 1.0f;
    }
    for (idx_t k = 0; k < K; ++k) {
        memset(out, 0, sizeof(float) * D1 * G);
        gemm_acc(D1, G, TB, a, TB, dz + k * dz_k, dz_b, out, G);
        for (idx_t g = 0; g < G; ++g) {
            for (idx_t d = 0; d < D; ++d) dw_ih[(k * G + g) * D + d] = out[d * G + g];
            db[k * G + g] = out[D * G + g];
        }
    }
    free(a);
    return 0;
}

/* One step back through cell(): from the gradients dh, dc of its outputs h, c, the gradient dz
 * of its pre-activations and (in dc, in place) of the state c_prev entering it. */
static void cell_backward(idx_t H, const float *restrict z, const float *restrict tc,
                          const float *restrict c_prev, float kp, const float *restrict dh,
                          float *restrict dc, float *restrict dz) {
    const float *restrict i = z, *restrict f = z + H, *restrict s = z + 2 * H,
                          *restrict o = z + 3 * H;
    for (idx_t j = 0; j < H; ++j) {
        float tcj = tc[j], oj = o[j], ij = i[j], fj = f[j];
        float g = 2.0f * s[j] - 1.0f;
        float dct = dc[j] + dh[j] * (oj * (1.0f - tcj * tcj));
        dz[j] = dct * (g * (ij * (1.0f - ij)));
        dz[H + j] = dct * ((c_prev[j] * kp) * (fj * (1.0f - fj)));
        dz[2 * H + j] = dct * (ij * (1.0f - g * g));
        dz[3 * H + j] = dh[j] * (tcj * (oj * (1.0f - oj)));
        dc[j] = dct * (fj * kp);
    }
}

/* The recurrent weights' gradient dw_hh [K, 4H, H] = sum over t, b of dz[t, k, b]^T h'[t, k, b],
 * h' the state entering step t after the mask (h0 at t = 0): per k, the masked h' of every step
 * [T * B, H] in scratch and one product with dz's rows (evenly spaced: dz_t = B * dz_b) read as a
 * transposed A (gemm_strided), summed in (t, b) order. */
static int weight_grad(idx_t T, idx_t K, idx_t B, idx_t H, const float *h0, const float *keep,
                       const float *hs, const float *dz, ptrdiff_t dz_k, ptrdiff_t dz_b,
                       float *dw_hh) {
    const idx_t G = 4 * H;
    const idx_t BH = B * H, KBH = K * BH;
    float *hp = malloc(sizeof(float) * (T * BH > 0 ? T * BH : 1));
    if (!hp) return -1;
    memset(dw_hh, 0, sizeof(float) * K * G * H);
    for (idx_t k = 0; k < K; ++k) {
        for (idx_t t = 0; t < T; ++t) {
            const float *h = (t ? hs + (t - 1) * KBH : h0) + k * BH;
            for (idx_t b = 0; b < B; ++b) {
                const float kp = keep[t * B + b];
                for (idx_t j = 0; j < H; ++j) hp[t * BH + b * H + j] = h[b * H + j] * kp;
            }
        }
        gemm_strided(G, H, T * B, dz + k * dz_k, 1, dz_b, hp, H, dw_hh + k * G * H, H);
    }
    free(hp);
    return 0;
}

/* Backward of riskppo_lstm_forward. d_hs / d_cs: [T, K, B, H] output gradients or NULL.
 * Writes dz (the gradient of the gate pre-activations z, g unscaled), the gradients of the
 * inputs h0, c0 (dh0, dc0: the step-0 mask is applied to them) and of the recurrent weights
 * (dw_hh [K, 4H, H], weight_grad). Returns 0; -1 if the scratch memory of dw_hh could not be
 * allocated (dz, dh0 and dc0 are written); -2, with nothing written, if dz's rows are not evenly
 * spaced (dz_t != B * dz_b). */
int riskppo_lstm_backward(int T_, int K_, int B_, int H_, const float *w_hh, const float *h0,
                          const float *c0, const float *keep, const float *hs, const float *cs,
                          const float *acts, const float *tanh_c, const float *d_hs,
                          const float *d_cs, float *dz_out, ptrdiff_t dz_t, ptrdiff_t dz_k,
                          ptrdiff_t dz_b, float *dh0, float *dc0, float *dw_hh) {
    const idx_t T = T_, K = K_, B = B_, H = H_, G = 4 * H;
    if (dz_t != B * dz_b) return -2;
    const idx_t BH = B * H, KBH = K * BH, KBG = K * B * G;
    /* dh0, dc0 hold the running gradients of the states leaving step t */
    for (idx_t j = 0; j < KBH; ++j) {
        dh0[j] = d_hs ? d_hs[(T - 1) * KBH + j] : 0.0f;
        dc0[j] = 0.0f;
    }
    for (idx_t t = T - 1; t >= 0; --t) {
        if (d_cs)
            for (idx_t j = 0; j < KBH; ++j) dc0[j] += d_cs[t * KBH + j];
        for (idx_t k = 0; k < K; ++k) {
            const float *c_prev = t ? cs + (t - 1) * KBH + k * BH : c0 + k * BH;
            float *dz = dz_out + t * dz_t + k * dz_k, *dh = dh0 + k * BH;
            for (idx_t b = 0; b < B; ++b) {
                const idx_t row = k * BH + b * H;
                cell_backward(H, acts + t * KBG + row * 4, tanh_c + t * KBH + row,
                              c_prev + b * H, keep[t * B + b], dh + b * H, dc0 + row,
                              dz + b * dz_b);
            }
            /* dh_{t-1} = keep_t (dz W_hh) + d_hs[t-1] */
            for (idx_t j = 0; j < BH; ++j) dh[j] = 0.0f;
            gemm_acc(B, H, G, dz, dz_b, w_hh + k * G * H, H, dh, H);
            for (idx_t b = 0; b < B; ++b)
                for (idx_t j = 0; j < H; ++j) dh[b * H + j] *= keep[t * B + b];
        }
        if (d_hs && t > 0)
            for (idx_t j = 0; j < KBH; ++j) dh0[j] += d_hs[(t - 1) * KBH + j];
    }
    return weight_grad(T, K, B, H, h0, keep, hs, dz_out, dz_k, dz_b, dw_hh);
}

/* The offset of the last gate value of a [B, 4H] block, (B - 1) * 4H + 4H - 1, computed as the
 * loops above compute z[b * G + j]: for the test that an offset past 2^31 does not wrap
 * (tests/unit/nn/test_native_lstm.py), which the kernels themselves could only show on arrays
 * of gigabytes. */
ptrdiff_t riskppo_lstm_last_gate_offset(int B_, int H_) {
    const idx_t B = B_, G = 4 * (idx_t)H_;
    return (B - 1) * G + (G - 1);
}
