/* The optimizer step after the backward in C (riskppo.optim.step, compile: true). */
#include <stdint.h>

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

/* The sum of x[j]^2 over n floats, in double, as 16 partial sums (independent chains the compiler
 * can vectorise; one serial chain is bound by the add's latency, 4x slower) added in a fixed
 * order at the end: the same result on every CPU for a given n. */
static double sum_sq(const float *x, int64_t n) {
    double acc[16] = {0.0};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; ++k) acc[k] += (double)x[j + k] * x[j + k];
    double s = 0.0;
    for (int k = 0; k < 16; ++k) s += acc[k];
    for (; j < n; ++j) s += (double)x[j] * x[j];
    return s;
}

int riskppo_clip_adam(int n, const int64_t *sizes, float *const *grads, float *const *params,
                      float *const *m, float *const *v, float *const *steps, const int64_t *owner,
                      int n_groups, const int64_t *clip_owner, int n_clip, int per_group,
                      float loss, double max_norm, double lr, double beta1, double beta2,
                      double eps, double wd, int decoupled, double *out) {
    if (n_clip < 1 || n_clip > RISKPPO_MAX_CLIP_GROUPS) return -1;
    double total = 0.0, *clip = out + n_groups;
    for (int k = 0; k < n_groups + n_clip; ++k) out[k] = 0.0;
    for (int i = 0; i < n; ++i) {
        const double s = sum_sq(grads[i], sizes[i]);
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
