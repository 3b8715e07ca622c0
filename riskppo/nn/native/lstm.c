/* The masked LSTM recurrence of riskppo.nn.lstm_kernel in C (float32, one thread).
 *
 * Why: the recurrence is T sequential steps of one small matmul plus a handful of
 * elementwise ops on [K, B, H] tensors; in PyTorch every one of those ops pays a dispatch and
 * an allocation that cost more than its arithmetic. Here a step is one loop nest: the matmul
 * h' W_hh^T accumulated row by row in registers, then the gates and the cell update fused.
 * The large matmuls that are not sequential (the input projection, the weight gradient) stay in
 * PyTorch (riskppo/nn/native.py).
 *
 * Same equations, gate layout [i, f, g, o] and saved quantities as the PyTorch kernel:
 *   h', c' = keep_t h_{t-1}, keep_t c_{t-1}
 *   z      = xproj_t + h' W_hh^T,   i, f, o = sig(z_i, z_f, z_o),   s = sig(2 z_g), g = 2 s - 1
 *   c_t    = (f c' - i) + 2 i s,     h_t = o tanh(c_t)
 * exp and tanh are the Cephes single-precision approximations (about 2 ulp), written
 * branch-free so that the compiler vectorises them; NaN inputs give NaN outputs.
 *
 * Returns 0, or -1 if its scratch memory could not be allocated (nothing was computed).
 * keep NULL: no reset (all ones). g_doubled: xproj's g gate is already doubled (the rollout step's fused weights); else it is
 * doubled here.
 *
 * Layouts (element strides): xproj [T, K, B, 4H] with strides (xs_t, xs_k, xs_b, 1); acts
 * [T, K, B, 4H], hs / cs / tanh_c [T, K, B, H], h0 / c0 [K, B, H], keep [T, B] contiguous;
 * w_t [K, H, 4H] = (W_hh with the g rows doubled)^T and w_hh [K, 4H, H] contiguous;
 * dz [T, K, B, 4H] with strides (dz_t, dz_k, dz_b, 1).
 */
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

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

static inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

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

/* C[M, N] += A[M, Kd] W[Kd, N] (row-major, leading dimensions lda, ldw, ldc), in 4 x 16 tiles
 * held in registers while a 16-column strip of W (reused by every row tile) streams past.
 * Every element is summed over j in the same order on every path, so a row's result does not
 * depend on M or on where the row falls in a tile. */
static void gemm_acc(int M, int N, int Kd, const float *restrict A, ptrdiff_t lda,
                     const float *restrict W, ptrdiff_t ldw, float *restrict C, ptrdiff_t ldc) {
    int n0 = 0;
    for (; n0 + 16 <= N; n0 += 16) {
        int m = 0;
        for (; m + 4 <= M; m += 4) {
            float *c0 = C + m * ldc + n0, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
            const float *a0 = A + m * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
            v8 x0 = LD(c0), y0 = LD(c0 + 8), x1 = LD(c1), y1 = LD(c1 + 8);
            v8 x2 = LD(c2), y2 = LD(c2 + 8), x3 = LD(c3), y3 = LD(c3 + 8);
            for (int j = 0; j < Kd; ++j) {
                const v8 w0 = LD(W + j * ldw + n0), w1 = LD(W + j * ldw + n0 + 8);
                x0 += a0[j] * w0, y0 += a0[j] * w1, x1 += a1[j] * w0, y1 += a1[j] * w1;
                x2 += a2[j] * w0, y2 += a2[j] * w1, x3 += a3[j] * w0, y3 += a3[j] * w1;
            }
            ST(c0, x0), ST(c0 + 8, y0), ST(c1, x1), ST(c1 + 8, y1);
            ST(c2, x2), ST(c2 + 8, y2), ST(c3, x3), ST(c3 + 8, y3);
        }
        for (; m < M; ++m) {
            float *c0 = C + m * ldc + n0;
            const float *a0 = A + m * lda;
            v8 x0 = LD(c0), y0 = LD(c0 + 8);
            for (int j = 0; j < Kd; ++j)
                x0 += a0[j] * LD(W + j * ldw + n0), y0 += a0[j] * LD(W + j * ldw + n0 + 8);
            ST(c0, x0), ST(c0 + 8, y0);
        }
    }
    for (int m = 0; m < M; ++m)
        for (int j = 0; j < Kd; ++j)
            for (int n = n0; n < N; ++n) C[m * ldc + n] += A[m * lda + j] * W[j * ldw + n];
}

/* The gates from their pre-activations z (in place: z becomes [i, f, s, o]) and the cell update
 * from the state c_prev entering the step (masked by kp here). */
static void cell(int H, float *restrict z, const float *restrict c_prev, float kp,
                 float *restrict c, float *restrict tc, float *restrict h) {
    for (int j = 0; j < 4 * H; ++j) z[j] = sigmoid_f(z[j]);
    const float *restrict i = z, *restrict f = z + H, *restrict s = z + 2 * H,
                          *restrict o = z + 3 * H;
    for (int j = 0; j < H; ++j) {
        float cj = (f[j] * (c_prev[j] * kp) - i[j]) + 2.0f * (i[j] * s[j]);
        float tcj = tanh_f(cj);
        c[j] = cj;
        tc[j] = tcj;
        h[j] = o[j] * tcj;
    }
}

int riskppo_lstm_forward(int T, int K, int B, int H, const float *xproj, ptrdiff_t xs_t,
                          ptrdiff_t xs_k, ptrdiff_t xs_b, const float *w_t, const float *h0,
                          const float *c0, const float *keep, float *hs, float *cs, float *acts,
                          float *tanh_c, int g_doubled) {
    const int G = 4 * H;
    const ptrdiff_t BH = (ptrdiff_t)B * H, KBH = K * BH, KBG = (ptrdiff_t)K * B * G;
    float *hp = malloc(sizeof(float) * (BH > 0 ? BH : 1)); /* masked states entering a step */
    if (!hp) return -1;
    for (int t = 0; t < T; ++t) {
        for (int k = 0; k < K; ++k) {
            const float *h_prev = t ? hs + (t - 1) * KBH + k * BH : h0 + k * BH;
            const float *c_prev = t ? cs + (t - 1) * KBH + k * BH : c0 + k * BH;
            float *z = acts + t * KBG + (ptrdiff_t)k * B * G;
            for (int b = 0; b < B; ++b) {
                const float kp = keep ? keep[(ptrdiff_t)t * B + b] : 1.0f;
                const float *x = xproj + t * xs_t + k * xs_k + b * xs_b;
                for (int j = 0; j < H; ++j) hp[b * H + j] = h_prev[b * H + j] * kp;
                for (int j = 0; j < G; ++j) z[b * G + j] = x[j];
                if (!g_doubled)
                    for (int j = 2 * H; j < 3 * H; ++j) z[b * G + j] += x[j];
            }
            gemm_acc(B, G, H, hp, H, w_t + (ptrdiff_t)k * H * G, G, z, G);
            for (int b = 0; b < B; ++b) {
                const ptrdiff_t row = k * BH + b * H;
                cell(H, z + b * G, c_prev + b * H, keep ? keep[(ptrdiff_t)t * B + b] : 1.0f,
                     cs + t * KBH + row, tanh_c + t * KBH + row, hs + t * KBH + row);
            }
        }
    }
    free(hp);
    return 0;
}

/* One step back through cell(): from the gradients dh, dc of its outputs h, c, the gradient dz
 * of its pre-activations and (in dc, in place) of the state c_prev entering it. */
static void cell_backward(int H, const float *restrict z, const float *restrict tc,
                          const float *restrict c_prev, float kp, const float *restrict dh,
                          float *restrict dc, float *restrict dz) {
    const float *restrict i = z, *restrict f = z + H, *restrict s = z + 2 * H,
                          *restrict o = z + 3 * H;
    for (int j = 0; j < H; ++j) {
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

/* Backward of riskppo_lstm_forward. d_hs / d_cs: [T, K, B, H] output gradients or NULL.
 * Writes dz (the gradient of the gate pre-activations z, g unscaled) and the gradients of
 * the inputs h0, c0 (dh0, dc0: the step-0 mask is applied to them). */
void riskppo_lstm_backward(int T, int K, int B, int H, const float *w_hh, const float *c0,
                           const float *keep, const float *cs, const float *acts,
                           const float *tanh_c, const float *d_hs, const float *d_cs,
                           float *dz_out, ptrdiff_t dz_t, ptrdiff_t dz_k, ptrdiff_t dz_b,
                           float *dh0, float *dc0) {
    const int G = 4 * H;
    const ptrdiff_t BH = (ptrdiff_t)B * H, KBH = K * BH, KBG = (ptrdiff_t)K * B * G;
    /* dh0, dc0 hold the running gradients of the states leaving step t */
    for (ptrdiff_t j = 0; j < KBH; ++j) {
        dh0[j] = d_hs ? d_hs[(T - 1) * KBH + j] : 0.0f;
        dc0[j] = 0.0f;
    }
    for (int t = T - 1; t >= 0; --t) {
        if (d_cs)
            for (ptrdiff_t j = 0; j < KBH; ++j) dc0[j] += d_cs[t * KBH + j];
        for (int k = 0; k < K; ++k) {
            const float *c_prev = t ? cs + (t - 1) * KBH + k * BH : c0 + k * BH;
            float *dz = dz_out + t * dz_t + k * dz_k, *dh = dh0 + k * BH;
            for (int b = 0; b < B; ++b) {
                const ptrdiff_t row = k * BH + b * H;
                cell_backward(H, acts + t * KBG + row * 4, tanh_c + t * KBH + row,
                              c_prev + b * H, keep[(ptrdiff_t)t * B + b], dh + b * H,
                              dc0 + row, dz + b * dz_b);
            }
            /* dh_{t-1} = keep_t (dz W_hh) + d_hs[t-1] */
            for (ptrdiff_t j = 0; j < BH; ++j) dh[j] = 0.0f;
            gemm_acc(B, H, G, dz, dz_b, w_hh + (ptrdiff_t)k * G * H, H, dh, H);
            for (int b = 0; b < B; ++b)
                for (int j = 0; j < H; ++j) dh[b * H + j] *= keep[(ptrdiff_t)t * B + b];
        }
        if (d_hs && t > 0)
            for (ptrdiff_t j = 0; j < KBH; ++j) dh0[j] += d_hs[(t - 1) * KBH + j];
    }
}

/* y[B, n] = act(x[B, k] W[k, n] + b) for act 0: identity, 1: tanh, 2: relu. */
static void linear(int B, int k, int n, const float *x, const float *W, const float *b, int act,
                   float *y) {
    for (int r = 0; r < B; ++r) memcpy(y + (ptrdiff_t)r * n, b, sizeof(float) * n);
    gemm_acc(B, n, k, x, k, W, n, y, n);
    if (act == 1)
        for (ptrdiff_t j = 0; j < (ptrdiff_t)B * n; ++j) y[j] = tanh_f(y[j]);
    else if (act == 2)
        for (ptrdiff_t j = 0; j < (ptrdiff_t)B * n; ++j) y[j] = y[j] > 0.0f ? y[j] : 0.0f;
}

/* The widest of the MLP's layers dims[1..n_layers] (at least 1). */
static int max_width(int n_layers, const int *dims) {
    int width = 1;
    for (int l = 1; l <= n_layers; ++l) width = dims[l] > width ? dims[l] : width;
    return width;
}

/* The floats of scratch memory actor_trunk needs for B rows. */
static size_t trunk_floats(int B, int H, int n_layers, const int *dims) {
    return (size_t)B * (3 * 4 * H + H) + 2 * (size_t)B * max_width(n_layers, dims);
}

/* The rollout actor's LSTM step and MLP (riskppo.nn.policy.RolloutActor), shared by its heads:
 *   z = b_in + x w_in (the fused step weights: g gate doubled), one LSTM step from (h0, c0)
 *   (resets already applied) into hc = [h, c]; then n_layers linear layers from h, the last
 *   one (the action head's output layer) without activation and the others with `act`.
 * Returns the last layer's output [B, dims[n_layers]] (in scratch, trunk_floats long) and sets
 * *latent to its input [B, dims[n_layers - 1]]; NULL if scratch memory ran out. */
static float *actor_trunk(int B, int D, int H, const float *x, const float *w_in,
                          const float *b_in, const float *w_t, const float *h0, const float *c0,
                          float *hc, int n_layers, const int *dims, const float *const *ws,
                          const float *const *bs, int act, float *scratch, const float **latent) {
    const int G = 4 * H, width = max_width(n_layers, dims);
    float *zx = scratch, *acts = zx + (ptrdiff_t)B * G, *tc = acts + (ptrdiff_t)B * G;
    float *buf[2] = {tc + (ptrdiff_t)B * H, tc + (ptrdiff_t)B * H + (ptrdiff_t)B * width};
    linear(B, D, G, x, w_in, b_in, 0, zx);
    if (riskppo_lstm_forward(1, 1, B, H, zx, 0, 0, G, w_t, h0, c0, NULL, hc,
                             hc + (ptrdiff_t)B * H, acts, tc, 1))
        return NULL;
    const float *in = hc;
    for (int l = 0; l < n_layers; ++l) {
        *latent = in;
        linear(B, dims[l], dims[l + 1], in, ws[l], bs[l], l + 1 < n_layers ? act : 0, buf[l & 1]);
        in = buf[l & 1];
    }
    return buf[(n_layers - 1) & 1];
}

/* The rollout's whole actor step with a categorical head, in one call: actor_trunk, whose
 * output is the logits; their log-softmax; the action: the inverse CDF at u[r] (the cumulated
 * probabilities, as CategoricalDist.sample) or, u NULL, the first argmax; its log-probability.
 * x [B, D], w_in [D, 4H], b_in [4H], w_t [H, 4H], h0 / c0 [B, H], hc [2, B, H];
 * dims [n_layers + 1] = (H, widths..., n_actions), ws[l] [dims[l], dims[l + 1]] row-major,
 * bs[l] [dims[l + 1]]. Returns 0, or -1 if scratch memory could not be allocated. */
int riskppo_actor_step(int B, int D, int H, const float *x, const float *w_in, const float *b_in,
                       const float *w_t, const float *h0, const float *c0, float *hc,
                       int n_layers, const int *dims, const float *const *ws,
                       const float *const *bs, int act, const float *u, int64_t *actions,
                       float *log_probs) {
    float *scratch = malloc(sizeof(float) * trunk_floats(B, H, n_layers, dims));
    if (!scratch) return -1;
    const float *latent;
    float *logits = actor_trunk(B, D, H, x, w_in, b_in, w_t, h0, c0, hc, n_layers, dims, ws, bs,
                                act, scratch, &latent);
    if (!logits) {
        free(scratch);
        return -1;
    }
    const int A = dims[n_layers];
    for (int r = 0; r < B; ++r) {
        float *lg = logits + (ptrdiff_t)r * A;
        float m = lg[0];
        for (int a = 1; a < A; ++a) m = lg[a] > m ? lg[a] : m;
        float sum = 0.0f;
        for (int a = 0; a < A; ++a) sum += __builtin_expf(lg[a] - m);
        const float lse = __builtin_logf(sum);
        for (int a = 0; a < A; ++a) lg[a] = (lg[a] - m) - lse;
        int pick = 0;
        if (u) { /* the first action whose cumulated probability reaches u * total */
            float total = 0.0f;
            for (int a = 0; a < A; ++a) total += __builtin_expf(lg[a]);
            const float target = u[r] * total;
            float cdf = 0.0f;
            for (pick = 0; pick < A - 1; ++pick) {
                cdf += __builtin_expf(lg[pick]);
                if (cdf >= target) break;
            }
        } else {
            for (int a = 1; a < A; ++a) pick = lg[a] > lg[pick] ? a : pick;
        }
        actions[r] = pick;
        log_probs[r] = lg[pick];
    }
    free(scratch);
    return 0;
}

/* The rollout's whole actor step with a diagonal Gaussian head (DiagGaussianDist), in one
 * call: actor_trunk, whose output is the mean [B, A]; the log-std: the parameter log_std [A]
 * or, w_std non-NULL, clamp(latent w_std + b_std, -20, 2) per row (w_std [dims[n_layers - 1], A],
 * b_std [A], the state-dependent head); the action: mean + eps[r, a] exp(log_std) (eps [B, A]
 * standard normals drawn by the caller) or, eps NULL, the mean; its log-probability
 * sum_a -z^2 / 2 - log_std - log(2 pi) / 2 with z = (action - mean) exp(-log_std), in the
 * order DiagGaussianDist.log_prob computes it. actions [B, A]; the other arguments as
 * riskppo_actor_step. Returns 0, or -1 if scratch memory could not be allocated. */
int riskppo_actor_step_gauss(int B, int D, int H, const float *x, const float *w_in,
                             const float *b_in, const float *w_t, const float *h0,
                             const float *c0, float *hc, int n_layers, const int *dims,
                             const float *const *ws, const float *const *bs, int act,
                             const float *log_std, const float *w_std, const float *b_std,
                             const float *eps, float *actions, float *log_probs) {
    const int A = dims[n_layers];
    const size_t trunk = trunk_floats(B, H, n_layers, dims);
    float *scratch = malloc(sizeof(float) * (trunk + (w_std ? (size_t)B * A : 0)));
    if (!scratch) return -1;
    const float *latent;
    const float *mean = actor_trunk(B, D, H, x, w_in, b_in, w_t, h0, c0, hc, n_layers, dims, ws,
                                    bs, act, scratch, &latent);
    if (!mean) {
        free(scratch);
        return -1;
    }
    float *ls = scratch + trunk;
    if (w_std) {
        linear(B, dims[n_layers - 1], A, latent, w_std, b_std, 0, ls);
        for (ptrdiff_t j = 0; j < (ptrdiff_t)B * A; ++j) { /* NaN passes through, as clamp */
            ls[j] = ls[j] < -20.0f ? -20.0f : ls[j];
            ls[j] = ls[j] > 2.0f ? 2.0f : ls[j];
        }
    }
    const float half_log_2pi = 0.918938533204672742f;
    for (int r = 0; r < B; ++r) {
        const float *m = mean + (ptrdiff_t)r * A, *l = w_std ? ls + (ptrdiff_t)r * A : log_std;
        float *a = actions + (ptrdiff_t)r * A, lp = 0.0f;
        for (int k = 0; k < A; ++k) {
            a[k] = eps ? m[k] + eps[(ptrdiff_t)r * A + k] * __builtin_expf(l[k]) : m[k];
            const float z = (a[k] - m[k]) * __builtin_expf(-l[k]);
            lp += (-0.5f * (z * z) - l[k]) - half_log_2pi;
        }
        log_probs[r] = lp;
    }
    free(scratch);
    return 0;
}

/* After the backward of one minibatch (riskppo.algo.update, compile: true): the gradient norms,
 * the finite check, clipping at max_norm and one step of Adam (AdamW if decoupled) over n
 * tensors, in one pass instead of ~20 PyTorch ops. Per tensor i of sizes[i] floats: grads[i],
 * params[i], the moments m[i], v[i] and its step count steps[i] (one float). owner[i]: its
 * logged group in [0, n_groups) or n_groups for none; clip_owner[i]: its clip group in
 * [0, n_clip). per_group: each clip group is clipped to max_norm on its own, else the total.
 * out[n_groups + n_clip + 2]: the logged groups' L2 norms, the clip groups' L2 norms, the total
 * norm before clipping, after clipping. Returns 1 if the step was taken, 0 if loss or the total
 * norm is not finite (then nothing but out is written: the caller skips the minibatch), -1 if
 * n_clip is outside [1, RISKPPO_MAX_CLIP_GROUPS] (then nothing is written). */
#define RISKPPO_MAX_CLIP_GROUPS 8
int riskppo_clip_adam(int n, const int64_t *sizes, float *const *grads, float *const *params,
                      float *const *m, float *const *v, float *const *steps, const int64_t *owner,
                      int n_groups, const int64_t *clip_owner, int n_clip, int per_group,
                      float loss, double max_norm, double lr, double beta1, double beta2,
                      double eps, double wd, int decoupled, double *out) {
    if (n_clip < 1 || n_clip > RISKPPO_MAX_CLIP_GROUPS) return -1;
    double total = 0.0, *clip = out + n_groups;
    for (int k = 0; k < n_groups + n_clip; ++k) out[k] = 0.0;
    for (int i = 0; i < n; ++i) {
        double s = 0.0;
        for (int64_t j = 0; j < sizes[i]; ++j) s += (double)grads[i][j] * grads[i][j];
        total += s;
        if (owner[i] < n_groups) out[owner[i]] += s;
        clip[clip_owner[i]] += s;
    }
    for (int k = 0; k < n_groups + n_clip; ++k) out[k] = __builtin_sqrt(out[k]);
    const double pre = __builtin_sqrt(total);
    out[n_groups + n_clip] = pre;
    if (!__builtin_isfinite(loss) || !__builtin_isfinite(pre)) return 0;
    float coefs[RISKPPO_MAX_CLIP_GROUPS];
    double post = 0.0;
    for (int k = 0; k < n_clip; ++k) {
        const double norm = per_group ? clip[k] : pre, r = max_norm / (norm + 1e-6);
        coefs[k] = (float)(r < 1.0 ? r : 1.0);
        post += clip[k] * coefs[k] * (clip[k] * coefs[k]);
    }
    out[n_groups + n_clip + 1] = per_group ? __builtin_sqrt(post) : pre * coefs[0];
    const float b1 = (float)beta1, b2 = (float)beta2, e = (float)eps;
    const float decay = decoupled ? (float)(1.0 - lr * wd) : 1.0f, l2 = decoupled ? 0.0f : (float)wd;
    for (int i = 0; i < n; ++i) {
        const float step = *steps[i] + 1.0f;
        *steps[i] = step;
        const float step_size = (float)(lr / (1.0 - __builtin_pow(beta1, step)));
        const float bc2_sqrt = (float)__builtin_sqrt(1.0 - __builtin_pow(beta2, step));
        float *restrict g = grads[i], *restrict p = params[i], *restrict mi = m[i],
                        *restrict vi = v[i];
        const float coef = coefs[clip_owner[i]];
        for (int64_t j = 0; j < sizes[i]; ++j) {
            const float gj = g[j] * coef;
            g[j] = gj;
            const float p0 = p[j] * decay, gd = gj + l2 * p0;
            mi[j] = b1 * mi[j] + (1.0f - b1) * gd;
            vi[j] = b2 * vi[j] + (1.0f - b2) * gd * gd;
            p[j] = p0 - step_size * mi[j] / (__builtin_sqrtf(vi[j]) / bc2_sqrt + e);
        }
    }
    return 1;
}
