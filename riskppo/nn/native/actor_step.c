/* The rollout's actor step in C (riskppo.nn.actor_step, float32, one thread): one LSTM step
 * (lstm.c) and the actor's MLP, then the action and its log-probability, for a categorical
 * head (riskppo_actor_step) or a diagonal Gaussian one (riskppo_actor_step_gauss).
 */
#include <stdlib.h>

#include "common.h"

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
 *   times keep (keep [B]: 0 where an episode starts; NULL: no reset) into hc = [h, c]; then
 *   n_layers linear layers from h, the last one (the action head's output layer) without
 *   activation and the others with `act`.
 * Returns the last layer's output [B, dims[n_layers]] (in scratch, trunk_floats long) and sets
 * *latent to its input [B, dims[n_layers - 1]]; NULL if scratch memory ran out. */
static float *actor_trunk(int B, int D, int H, const float *x, const float *w_in,
                          const float *b_in, const float *w_t, const float *h0, const float *c0,
                          const float *keep, float *hc, int n_layers, const int *dims,
                          const float *const *ws, const float *const *bs, int act,
                          float *scratch, const float **latent) {
    const int G = 4 * H, width = max_width(n_layers, dims);
    float *zx = scratch, *acts = zx + (ptrdiff_t)B * G, *tc = acts + (ptrdiff_t)B * G;
    float *buf[2] = {tc + (ptrdiff_t)B * H, tc + (ptrdiff_t)B * H + (ptrdiff_t)B * width};
    linear(B, D, G, x, w_in, b_in, 0, zx);
    if (riskppo_lstm_forward(1, 1, B, H, zx, 0, 0, G, w_t, h0, c0, keep, hc,
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
 * x [B, D], w_in [D, 4H], b_in [4H], w_t [H, 4H], h0 / c0 [B, H], keep [B] (or NULL),
 * hc [2, B, H];
 * dims [n_layers + 1] = (H, widths..., n_actions), ws[l] [dims[l], dims[l + 1]] row-major,
 * bs[l] [dims[l + 1]]. Returns 0, or -1 if scratch memory could not be allocated. */
int riskppo_actor_step(int B, int D, int H, const float *x, const float *w_in, const float *b_in,
                       const float *w_t, const float *h0, const float *c0, const float *keep,
                       float *hc, int n_layers, const int *dims, const float *const *ws,
                       const float *const *bs, int act, const float *u, int64_t *actions,
                       float *log_probs) {
    float *scratch = malloc(sizeof(float) * trunk_floats(B, H, n_layers, dims));
    if (!scratch) return -1;
    const float *latent;
    float *logits = actor_trunk(B, D, H, x, w_in, b_in, w_t, h0, c0, keep, hc, n_layers, dims,
                                ws, bs, act, scratch, &latent);
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
                             const float *c0, const float *keep, float *hc, int n_layers,
                             const int *dims, const float *const *ws, const float *const *bs,
                             int act, const float *log_std, const float *w_std, const float *b_std,
                             const float *eps, float *actions, float *log_probs) {
    const int A = dims[n_layers];
    const size_t trunk = trunk_floats(B, H, n_layers, dims);
    float *scratch = malloc(sizeof(float) * (trunk + (w_std ? (size_t)B * A : 0)));
    if (!scratch) return -1;
    const float *latent;
    const float *mean = actor_trunk(B, D, H, x, w_in, b_in, w_t, h0, c0, keep, hc, n_layers,
                                    dims, ws, bs, act, scratch, &latent);
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
