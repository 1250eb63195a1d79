"""C99 for action-chunk policies from a ``ChunkedGraph``: the sampler, the chunk queue and a seeded PRNG.

The generated ``<prefix>.c`` keeps weights in ``static const float`` arrays, uses no heap and no mutable
globals, and has the API of the MLP and GRU exports (so the same caller, e.g. the Betaflight glue, flies it)::

    <prefix>_state s;                       /* caller-owned: window, plan, noise, scratch (no heap) */
    <prefix>_reset(&s);                     /* empty queue, PRNG seed <PREFIX>_SEED, chunk counter 0 */
    <prefix>_step(&s, obs, action);         /* pops one action; plans a chunk every N_ACTION_STEPS calls */

and two functions for parity checks and custom loops: ``<prefix>_noise(seed, chunk, noise)`` draws chunk
number ``chunk``'s initial sample (counter-based: a function of (seed, chunk) alone, so a flight can be
replayed), and ``<prefix>_plan(&s, window, noise, chunk)`` maps a raw window (N_OBS_STEPS, OBS_DIM) and an
initial sample (HORIZON, ACTION_DIM) to the raw chunk (HORIZON, ACTION_DIM), as ``predict_chunk`` does.

Numerics follow torch float32 operation by operation (``chunked_graph`` says where constants come from):
Mish ``x tanh(log1p(exp x))``, SiLU ``x / (1 + exp(-x))`` and its derivative ``s (1 + x (1 - s))``,
LayerNorm with the biased variance, DDIM's ``x0 = (x - sqrt(1 - a) eps) / sqrt(a)`` and
``x <- sqrt(a_prev) x0 + sqrt(1 - a_prev) eps``, the straight-through clamp ``t + (clamp(t) - t)``.
"""

from __future__ import annotations

import numpy as np

from .c_codegen import HELPERS, CSources, _check_prefix, c_array, c_float
from .cgraph import Dense
from .chunked_graph import ChunkedGraph, DiffusionSampler, EnergySampler, LayerNorm, NoiseActor

CHUNK_HELPERS = {
    "layer_norm": """\
/* torch.nn.LayerNorm over n features (biased variance); y may alias x. */
static void layer_norm(const float *w, const float *b, float eps, int n, const float *x, float *y)
{
    int i;
    float mean = 0.0f, var = 0.0f, rstd;
    for (i = 0; i < n; ++i) {
        mean += x[i];
    }
    mean /= (float)n;
    for (i = 0; i < n; ++i) {
        float d = x[i] - mean;
        var += d * d;
    }
    var /= (float)n;
    rstd = 1.0f / sqrtf(var + eps);
    for (i = 0; i < n; ++i) {
        y[i] = (x[i] - mean) * rstd * w[i] + b[i];
    }
}
""",
    "mish": """\
static void mish_inplace(float *x, int n)
{
    int i;
    for (i = 0; i < n; ++i) {
        x[i] = x[i] * tanhf(log1pf(expf(x[i])));
    }
}
""",
    "silu": """\
static float sigmoidf_(float x)
{
    return 1.0f / (1.0f + expf(-x));
}
""",
    "dense_t": """\
/* y (cols,) = W[:, offset:offset + cols]^T g, W (rows, stride) row-major: a Linear layer's input gradient. */
static void dense_t(const float *w, int rows, int stride, int offset, int cols, const float *g, float *y)
{
    int r, c;
    for (c = 0; c < cols; ++c) {
        float acc = 0.0f;
        for (r = 0; r < rows; ++r) {
            acc += w[r * stride + offset + c] * g[r];
        }
        y[c] = acc;
    }
}
""",
    "prng": """\
/* Counter-based PRNG: value i of chunk k is a hash of (seed, k, i) (lowbias32, Wellons). */
static uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

static float uniform_open(uint32_t seed, uint32_t chunk, uint32_t i) /* in (0, 1] */
{
    return (float)((hash32(seed ^ hash32(chunk * 2654435761U + hash32(i))) >> 8) + 1U) * (1.0f / 16777216.0f);
}
""",
}


def _dense_arrays(name: str, d: Dense, comment: str) -> list[str]:
    rows, cols = d.weight.shape
    return [c_array(f"{name}_w", d.weight, f"{comment}; ({rows}, {cols}) row-major"), c_array(f"{name}_b", d.bias)]


def _dense_call(name: str, d: Dense, x: str, y: str) -> list[str]:
    rows, cols = d.weight.shape
    out = [f"    dense({name}_w, {name}_b, {rows}, {cols}, {x}, {y});"]
    if d.activation == "relu":
        out.append(f"    relu({y}, {rows});")
    elif d.activation == "tanh":
        out.append(f"    tanh_inplace({y}, {rows});")
    elif d.activation not in ("identity", "silu"):
        raise ValueError(f"activation {d.activation!r} has no C version here")
    return out


def _ln_arrays(name: str, ln: LayerNorm) -> list[str]:
    return [c_array(f"{name}_g", ln.weight), c_array(f"{name}_b", ln.bias)]


def _ln_call(name: str, ln: LayerNorm, n: int, x: str, y: str) -> str:
    return f"    layer_norm({name}_g, {name}_b, {c_float(ln.eps)}, {n}, {x}, {y});"


def _diffusion(g: ChunkedGraph, s: DiffusionSampler):
    """-> (arrays, work fields, sampler body, helpers): x (CHUNK,) in w->x, window_n in w->cond."""
    n, hid = g.chunk_size, s.hidden
    emb_dim = s.step_embedding.shape[1]
    steps = s.step_embedding.shape[0]
    arrays = [c_array("step_embedding", s.step_embedding, f"step encoder output at the {steps} DDIM timesteps"),
              *_dense_arrays("inp", s.inp, "input layer over [x, step embedding, cond]"),
              c_array("sqrt_alpha", s.sqrt_alpha, "DDIM: alpha_prod_t ** 0.5 per step"),
              c_array("sqrt_beta", s.sqrt_beta), c_array("sqrt_alpha_prev", s.sqrt_alpha_prev),
              c_array("direction", s.direction)]
    body = []
    for i, b in enumerate(s.blocks):
        arrays += _ln_arrays(f"blk{i}_ln", b.norm) + _dense_arrays(f"blk{i}_in", b.inner, f"residual block {i}") \
            + _dense_arrays(f"blk{i}_out", b.outer, f"residual block {i}")
    arrays += _ln_arrays("out_ln", s.out_norm) + _dense_arrays("out", s.out, "output layer")
    fields = [f"float in[{n + emb_dim + g.window_size}];", f"float h[{hid}];", f"float u[{2 * hid}];",
              f"float v[{hid}];", f"float eps[{n}];"]
    body.append("    for (k = k_from; k < k_to; ++k) {")
    body.append(f"        memcpy(w->in, w->x, sizeof(float) * {n});")
    body.append(f"        memcpy(w->in + {n}, step_embedding + k * {emb_dim}, sizeof(float) * {emb_dim});")
    body.append(f"        memcpy(w->in + {n + emb_dim}, w->cond, sizeof(float) * {g.window_size});")
    body += ["    " + line for line in _dense_call("inp", s.inp, "w->in", "w->h")]
    for i, b in enumerate(s.blocks):
        body.append("    " + _ln_call(f"blk{i}_ln", b.norm, hid, "w->h", "w->v"))
        body += ["    " + line for line in _dense_call(f"blk{i}_in", b.inner, "w->v", "w->u")]
        body.append(f"        mish_inplace(w->u, {2 * hid});")
        body += ["    " + line for line in _dense_call(f"blk{i}_out", b.outer, "w->u", "w->v")]
        body.append(f"        for (i = 0; i < {hid}; ++i) w->h[i] = w->h[i] + w->v[i];")
    body.append("    " + _ln_call("out_ln", s.out_norm, hid, "w->h", "w->v"))
    body.append(f"        mish_inplace(w->v, {hid});")
    body += ["    " + line for line in _dense_call("out", s.out, "w->v", "w->eps")]
    clip = s.clip_sample
    x0 = "(w->x[i] - sqrt_beta[k] * w->eps[i]) / sqrt_alpha[k]" if s.prediction_type == "epsilon" else "w->eps[i]"
    body.append(f"        for (i = 0; i < {n}; ++i) {{")
    body.append(f"            float x0 = {x0};")
    if s.prediction_type == "sample":  # the model predicts x0; the direction uses the implied noise
        body.append("            float e = (w->x[i] - sqrt_alpha[k] * x0) / sqrt_beta[k];")
    else:
        body.append("            float e = w->eps[i];")
    if clip is not None:
        body.append(f"            x0 = fminf(fmaxf(x0, {c_float(-clip)}), {c_float(clip)});")
    body.append("            w->x[i] = sqrt_alpha_prev[k] * x0 + direction[k] * e;")
    body.append("        }")
    body.append("    }")
    return arrays, fields, body, {"dense", "layer_norm", "mish"}


def _energy(g: ChunkedGraph, s: EnergySampler):
    """Descent from w->x (candidate 0; the others from the PRNG) -> the lowest-energy candidate in w->x."""
    n, obs_in = g.chunk_size, g.window_size
    widths, nl = s.widths, len(s.layers)
    top = sum(widths)
    offsets = np.cumsum([0, *widths]).tolist()
    arrays = []
    for i, d in enumerate(s.layers):
        arrays += _dense_arrays(f"e{i}", d, f"energy layer {i}" + (" (SiLU)" if i < nl - 1 else " (output)"))
    fields = [f"float in[{obs_in + n}];", f"float z[{top}];", f"float a[{top}];", f"float g[{max(widths)}];",
              f"float gz[{max(widths)}];", f"float grad[{n}];", f"float cand[{s.n_candidates * n}];",
              f"float energy[{s.n_candidates}];"]
    fwd = [f"    memcpy(w->in, w->cond, sizeof(float) * {obs_in});",
           f"    memcpy(w->in + {obs_in}, chunk, sizeof(float) * {n});"]
    prev = "w->in"
    for i, d in enumerate(s.layers[:-1]):
        rows, cols = d.weight.shape
        z, a = f"w->z + {offsets[i]}", f"w->a + {offsets[i]}"
        fwd.append(f"    dense(e{i}_w, e{i}_b, {rows}, {cols}, {prev}, {z});")
        fwd.append(f"    for (i = 0; i < {rows}; ++i) w->a[{offsets[i]} + i] = w->z[{offsets[i]} + i] / "
                   f"(1.0f + expf(-w->z[{offsets[i]} + i]));")
        prev = a
    last = s.layers[-1]
    fwd.append(f"    dense(e{nl - 1}_w, e{nl - 1}_b, 1, {last.weight.shape[1]}, {prev}, &e);")
    bwd = [f"    memcpy(w->g, e{nl - 1}_w, sizeof(float) * {widths[-1]});"]
    for i in range(nl - 2, -1, -1):
        rows, cols = s.layers[i].weight.shape
        bwd.append(f"    for (i = 0; i < {rows}; ++i) {{")
        bwd.append(f"        float x = w->z[{offsets[i]} + i], sg = sigmoidf_(x);")
        bwd.append("        w->gz[i] = w->g[i] * sg * (1.0f + x * (1.0f - sg));")
        bwd.append("    }")
        if i > 0:
            bwd.append(f"    dense_t(e{i}_w, {rows}, {cols}, 0, {cols}, w->gz, w->g);")
        else:
            bwd.append(f"    dense_t(e0_w, {rows}, {cols}, {obs_in}, {n}, w->gz, w->grad);")
    clip = []
    if s.grad_clip is not None:
        clip = ["    {", "        float norm = 0.0f, f;",
                f"        for (i = 0; i < {n}; ++i) norm += w->grad[i] * w->grad[i];",
                "        norm = fmaxf(sqrtf(norm), 1e-12f);",
                f"        f = fminf({c_float(s.grad_clip)} / norm, 1.0f);",
                f"        for (i = 0; i < {n}; ++i) w->grad[i] = w->grad[i] * f;", "    }"]
    functions = ("/* E(cond, chunk): keeps each hidden layer's input z and output a for the gradient. */\n"
                 f"static float energy_forward(WORK_T *w, const float *chunk)\n{{\n    int i;\n    float e;\n"
                 + "\n".join(fwd) + "\n    return e;\n}\n\n"
                 "/* dE/dchunk (w->grad) at the point of the last energy_forward. */\n"
                 "static void energy_grad(WORK_T *w)\n{\n    int i;\n" + "\n".join(bwd + clip) + "\n}\n")
    body = [f"    memcpy(w->cand, w->x, sizeof(float) * {n});"]
    if s.n_candidates > 1:
        body.append(f"    {{PREFIX}}_candidates(seed, chunk_index, w->cand + {n});")
    body += [f"    for (c = 0; c < {s.n_candidates}; ++c) {{", f"        float *a = w->cand + c * {n};",
             f"        for (i = 0; i < {n}; ++i) a[i] = fminf(fmaxf(a[i], -1.0f), 1.0f);",
             f"        for (k = 0; k < {s.n_steps}; ++k) {{",
             "            (void)energy_forward(w, a);", "            energy_grad(w);",
             f"            for (i = 0; i < {n}; ++i) {{",
             f"                float t = a[i] - {c_float(s.step_size)} * w->grad[i];",
             "                a[i] = t + (fminf(fmaxf(t, -1.0f), 1.0f) - t);", "            }", "        }",
             "    }"]
    if s.n_candidates > 1:
        body += ["    best = 0;", f"    for (c = 0; c < {s.n_candidates}; ++c) {{",
                 f"        w->energy[c] = energy_forward(w, w->cand + c * {n});",
                 "        if (w->energy[c] < w->energy[best]) best = c;", "    }"]
    body.append(f"    memcpy(w->x, w->cand + best * {n}, sizeof(float) * {n});")
    return arrays, fields, body, {"dense", "silu", "dense_t"}, functions


def _steer(g: ChunkedGraph, a: NoiseActor):
    """The actor: raw window (w->win) and eps (noise) -> the base's initial sample in w->x."""
    n = g.chunk_size
    arrays = [c_array("actor_mean", a.mean, "noise actor: input normalization"), c_array("actor_std", a.std)]
    widths = [d.weight.shape[0] for d in a.hidden]
    fields = [f"float act_in[{g.window_size}];", f"float act_h[2][{max(widths)}];"]
    body = [f"    for (i = 0; i < {g.window_size}; ++i) w->act_in[i] = (window[i] - actor_mean[i]) / actor_std[i];"]
    prev = "w->act_in"
    used = {"dense"}
    for i, d in enumerate(a.hidden):
        arrays += _dense_arrays(f"actor{i}", d, f"noise actor layer {i} ({d.activation})")
        body += _dense_call(f"actor{i}", d, prev, f"w->act_h[{i % 2}]")
        used |= {d.activation} - {"identity"}
        prev = f"w->act_h[{i % 2}]"
    arrays += _dense_arrays("actor_head", a.head, "noise actor mean head (before tanh)")
    body += _dense_call("actor_head", a.head, prev, "w->x")
    if a.log_std is not None:
        arrays += _dense_arrays("actor_log_std", a.log_std, "noise actor log-std head")
        fields.append(f"float log_std[{n}];")
        body += _dense_call("actor_log_std", a.log_std, prev, "w->log_std")
        body.append(f"    for (i = 0; i < {n}; ++i) w->x[i] = w->x[i] + expf(fminf(fmaxf(w->log_std[i], "
                    f"{c_float(a.log_std_min)}), {c_float(a.log_std_max)})) * noise[i];")
    body.append(f"    for (i = 0; i < {n}; ++i) w->x[i] = {c_float(a.noise_bound)} * tanhf(w->x[i]);")
    return arrays, fields, body, used


def spread_limit(g: ChunkedGraph) -> int:
    """The most control steps a diffusion plan can be spread over: the executed actions of a chunk begun ``S`` steps
    early (``t0 + S .. t0 + S + n_action_steps - 1``, ``t0 = n_obs_steps - 1``) must lie inside the horizon."""
    return min(g.n_action_steps, g.horizon - (g.n_obs_steps - 1) - g.n_action_steps)


def generate_chunked_c(g: ChunkedGraph, prefix: str = "robo_policy", seed: int = 0, spread: int = 0) -> CSources:
    """C99 header, source and a ``main.c`` example for a chunk policy (see the module docstring); ``spread`` > 0
    (diffusion): each chunk after the first is planned over ``spread`` control steps (``ceil(steps / spread)``
    denoising steps each), begun ``spread`` steps before the queue runs out from the observations then, and its
    actions executed from the one for the step it takes over (index ``n_obs_steps - 1 + spread``)."""
    prefix = _check_prefix(prefix)
    up, n, win = prefix.upper(), g.chunk_size, g.window_size
    s = g.sampler
    if spread:
        if not isinstance(s, DiffusionSampler):
            raise ValueError(f"spread={spread}: only a diffusion plan is spread over steps (an energy plan is one "
                             "descent per candidate)")
        if not 1 <= spread <= spread_limit(g):
            raise ValueError(f"spread={spread}: must be 1 .. {spread_limit(g)} for horizon {g.horizon}, "
                             f"{g.n_obs_steps} observation steps and {g.n_action_steps} executed actions (the "
                             "spread chunk's actions must lie inside the horizon)")
    functions = ""
    if isinstance(s, DiffusionSampler):
        arrays, fields, loop, used = _diffusion(g, s)
        functions = ("/* DDIM steps k_from .. k_to - 1 on w->x, conditioned on w->cond. */\n"
                     "static void denoise(WORK_T *w, int k_from, int k_to)\n{\n    int i, k;\n"
                     + "\n".join(loop) + "\n}\n")
        sampler = [f"    denoise(w, 0, {s.sqrt_alpha.size});"]
    else:
        arrays, fields, sampler, used, functions = _energy(g, s)
    steer_arrays, steer_fields, steer_body, steer_used = _steer(g, g.steer) if g.steer is not None else ([], [], [],
                                                                                                        set())
    used |= steer_used
    needs_base_draw = isinstance(s, EnergySampler) and s.n_candidates > 1
    fields = [f"float cond[{win}];", f"float x[{n}];", *fields, *steer_fields]
    work_t = f"{prefix}_work"
    what = {"diffusion": f"DDIM, {getattr(s, 'sqrt_alpha', np.zeros(0)).size} steps, residual-MLP denoiser",
            "energy": (f"{getattr(s, 'n_steps', 0)} gradient steps on an MLP energy, "
                       f"{getattr(s, 'n_candidates', 1)} candidate(s)")}[g.kind]
    banner = (f"/* Generated by robo (hardware.export.chunked_codegen) from a '{g.policy_kind}' policy. Do not edit.\n"
              f" * obs ({g.obs_dim},) float32 -> action ({g.action_dim},) float32; every {g.n_action_steps} steps a "
              f"chunk of {g.horizon} actions is planned\n * from the last {g.n_obs_steps} observations ({what}"
              f"{'; the initial sample from a DSRL noise actor' if g.steer is not None else ''}).\n"
              f" * {g.num_floats} stored floats.\n */\n")
    initial = "normal" if g.steer is not None and g.steer.log_std is not None else (
        "zeros" if g.steer is not None else g.initial)
    if initial != "zeros" or needs_base_draw:
        used.add("prng")
    candidates_decl = "" if not needs_base_draw else (
        f"\n#define {up}_N_CANDIDATES {s.n_candidates} /* chunks descended per plan; the lowest energy wins */\n"
        f"/* Chunk number `chunk`'s extra candidates ({s.n_candidates - 1}, {g.horizon}, {g.action_dim}), normalized "
        f"({g.initial}): a function of (seed, chunk). */\n"
        f"void {prefix}_candidates(uint32_t seed, uint32_t chunk, float out[{(s.n_candidates - 1) * n}]);\n")
    spread_fields = "" if not spread else (
        f"\n    float next_noise[{n}]; /* the initial sample of the chunk being planned */"
        f"\n    uint32_t denoised; /* DDIM steps done on the chunk being planned (all: none pending) */")
    header = f"""{banner}#ifndef {up}_H
#define {up}_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

#define {up}_OBS_DIM {g.obs_dim}
#define {up}_ACTION_DIM {g.action_dim}
#define {up}_N_OBS_STEPS {g.n_obs_steps}
#define {up}_HORIZON {g.horizon}
#define {up}_N_ACTION_STEPS {g.n_action_steps}
#define {up}_NUM_FLOATS {g.num_floats}
#define {up}_SEED {int(seed)}U /* default PRNG seed of {prefix}_reset */
#define {up}_INITIAL "{initial}" /* what {prefix}_noise draws: normal | uniform | zeros */
#define {up}_SPREAD {int(spread)} /* control steps a plan is spread over (0: planned whole when the queue is empty) */

/* Scratch of one planning call (part of the state, so nothing lives outside the caller's struct). */
typedef struct {work_t} {{
{chr(10).join("    " + f for f in fields)}
}} {work_t};

typedef struct {prefix}_state {{
    float window[{win}]; /* the last {g.n_obs_steps} raw observations, oldest first */
    float plan[{g.n_action_steps * g.action_dim}]; /* the executed part of the last chunk, raw */
    float noise[{n}]; /* the last chunk's initial sample (or the steering actor's standard-normal draw) */
    float chunk[{n}]; /* the last chunk, raw */
    {work_t} work;
    uint32_t used; /* index of the next planned action; {g.n_action_steps}: plan again */{spread_fields}
    uint32_t seed; /* PRNG seed */
    uint32_t chunks; /* chunks planned since reset */
    uint32_t steps; /* steps since reset */
}} {prefix}_state;

/* Start an episode: empty queue, seed {up}_SEED, chunk counter 0. */
void {prefix}_reset({prefix}_state *state);
/* The same with another PRNG seed. */
void {prefix}_reset_seeded({prefix}_state *state, uint32_t seed);
/* One control step: obs ({g.obs_dim},) -> action ({g.action_dim},); plans when the queue is empty. No heap. */
void {prefix}_step({prefix}_state *state, const float obs[{up}_OBS_DIM], float action[{up}_ACTION_DIM]);
/* Chunk number `chunk`'s initial sample ({g.horizon}, {g.action_dim}) from `seed` ({up}_INITIAL). */
void {prefix}_noise(uint32_t seed, uint32_t chunk, float noise[{n}]);
/* window ({g.n_obs_steps}, {g.obs_dim}) raw, noise ({g.horizon}, {g.action_dim}) -> chunk ({g.horizon}, \
{g.action_dim}) raw; uses state->work and state's seed and chunk counter for extra candidates. */
void {prefix}_plan({prefix}_state *state, const float window[{win}], const float noise[{n}], float chunk[{n}]);
{candidates_decl}
#ifdef __cplusplus
}}
#endif

#endif /* {up}_H */
"""
    helpers = "\n".join(HELPERS[h] if h in HELPERS else CHUNK_HELPERS[h]
                        for h in ("dense", "relu", "tanh", "layer_norm", "mish", "silu", "dense_t", "prng")
                        if h in used)
    draw = {"normal": f"""    for (i = 0; i + 1 < {n}; i += 2) {{
        float r = sqrtf(-2.0f * logf(uniform_open(seed, chunk, (uint32_t)i)));
        float t = 6.28318531f * uniform_open(seed, chunk, (uint32_t)i + 1U);
        out[i] = r * cosf(t);
        out[i + 1] = r * sinf(t);
    }}
    if (i < {n}) out[i] = sqrtf(-2.0f * logf(uniform_open(seed, chunk, (uint32_t)i))) * \
cosf(6.28318531f * uniform_open(seed, chunk, (uint32_t)i + 1U));""",
            "uniform": f"    for (i = 0; i < {n}; ++i) out[i] = 2.0f * uniform_open(seed, chunk, (uint32_t)i) - 1.0f;",
            "zeros": f"    (void)seed; (void)chunk;\n    for (i = 0; i < {n}; ++i) out[i] = 0.0f;"}
    # extra energy candidates: the base policy's random guesses, U(-1, 1) with default_init uniform, else N(0, 1)
    candidates_initial = "uniform" if g.initial == "uniform" else "normal"
    n_extra = (s.n_candidates - 1) * n if needs_base_draw else 0
    base_draw = (f"static void draw_initial(uint32_t seed, uint32_t chunk, float *out)\n{{\n    int i;\n"
                 f"{draw[candidates_initial]}\n}}\n\n"
                 f"void {prefix}_candidates(uint32_t seed, uint32_t chunk, float out[{n_extra}])\n{{\n"
                 f"    uint32_t c;\n    for (c = 1; c < {up}_N_CANDIDATES; ++c) draw_initial(seed, "
                 f"chunk * {up}_N_CANDIDATES + c + 0x80000000U, out + (c - 1) * {n});\n}}\n\n"
                 ) if needs_base_draw else ""
    sampler = [line.replace("{PREFIX}", prefix) for line in sampler]
    a, t0 = g.action_dim, g.n_obs_steps - 1
    whole = (f"        {prefix}_noise(state->seed, state->chunks, state->noise);\n"
             f"        {prefix}_plan(state, state->window, state->noise, state->chunk);\n"
             f"        memcpy(state->plan, state->chunk + {t0 * a}, sizeof(float) * {g.n_action_steps * a});\n")
    take_over, advance, reset_spread = whole, "", ""
    if spread:
        steps, k = int(s.sqrt_alpha.size), g.n_action_steps
        per = -(-steps // spread)
        take_over = (f"        if (state->chunks == 0) {{ /* the first chunk: planned whole */\n"
                     + "\n".join("    " + line for line in whole.splitlines()) + "\n"
                     f"        }} else {{ /* the chunk planned over the last {spread} steps, from the action for now */\n"
                     f"            memcpy(state->noise, state->next_noise, sizeof(float) * {n});\n"
                     f"            memcpy(state->plan, state->chunk + {(t0 + spread) * a}, sizeof(float) * "
                     f"{k * a});\n        }}\n")
        advance = (f"    if (state->used == {k - spread}U) {{ /* plan the next chunk from the window now */\n"
                   f"        {prefix}_noise(state->seed, state->chunks, state->next_noise);\n"
                   f"        plan_begin(state, state->window, state->next_noise);\n"
                   f"        state->denoised = 0;\n    }}\n"
                   f"    if (state->denoised < {steps}U) {{ /* at most {per} of the {steps} DDIM steps a control step */\n"
                   f"        uint32_t to = state->denoised + {per}U < {steps}U ? state->denoised + {per}U : {steps}U;\n"
                   f"        denoise(&state->work, (int)state->denoised, (int)to);\n"
                   f"        state->denoised = to;\n"
                   f"        if (to == {steps}U) plan_finish(state, state->chunk);\n    }}\n")
        reset_spread = f"\n    state->denoised = {steps}U; /* none pending */"
    source = f"""{banner}#include "{prefix}.h"

#include <math.h>
#include <string.h>

#define WORK_T {work_t}

{c_array("obs_offset", g.obs_offset, "observation normalizer: (x - offset) / scale")}
{c_array("obs_scale", g.obs_scale)}
{c_array("action_offset", g.action_offset, "action normalizer: y * scale + offset")}
{c_array("action_scale", g.action_scale)}
{chr(10).join(arrays + steer_arrays)}
{helpers}
{base_draw}{functions}
void {prefix}_noise(uint32_t seed, uint32_t chunk, float noise[{n}])
{{
    float *out = noise;
    int i;
{draw[initial]}
}}

/* The sampler's start: the normalized window in w->cond, the initial sample in w->x. */
static void plan_begin({prefix}_state *state, const float window[{win}], const float noise[{n}])
{{
    WORK_T *w = &state->work;
    int i;
    (void)noise;
    for (i = 0; i < {win}; ++i) w->cond[i] = (window[i] - obs_offset[i % {g.obs_dim}]) / obs_scale[i % {g.obs_dim}];
{chr(10).join(steer_body) if steer_body else f"    memcpy(w->x, noise, sizeof(float) * {n});"}
}}

/* The sampler's end: w->x to the raw chunk. */
static void plan_finish({prefix}_state *state, float chunk[{n}])
{{
    WORK_T *w = &state->work;
    int i;
    for (i = 0; i < {n}; ++i) chunk[i] = w->x[i] * action_scale[i % {a}] + action_offset[i % {a}];
}}

void {prefix}_plan({prefix}_state *state, const float window[{win}], const float noise[{n}], float chunk[{n}])
{{
    WORK_T *w = &state->work;
    int i, k, c, best = 0;
    uint32_t seed = state->seed, chunk_index = state->chunks;
    (void)w; (void)i; (void)k; (void)c; (void)best; (void)seed; (void)chunk_index;
    plan_begin(state, window, noise);
{chr(10).join(sampler)}
    plan_finish(state, chunk);
}}

void {prefix}_reset_seeded({prefix}_state *state, uint32_t seed)
{{
    memset(state, 0, sizeof(*state));
    state->used = {g.n_action_steps};
    state->seed = seed;{reset_spread}
}}

void {prefix}_reset({prefix}_state *state)
{{
    {prefix}_reset_seeded(state, {up}_SEED);
}}

void {prefix}_step({prefix}_state *state, const float obs[{up}_OBS_DIM], float action[{up}_ACTION_DIM])
{{
    int t;
    if (state->steps == 0) {{ /* the first observation fills the window */
        for (t = 0; t < {g.n_obs_steps}; ++t) memcpy(state->window + t * {g.obs_dim}, obs, sizeof(float) * \
{g.obs_dim});
    }} else {{
        memmove(state->window, state->window + {g.obs_dim}, sizeof(float) * {win - g.obs_dim});
        memcpy(state->window + {win - g.obs_dim}, obs, sizeof(float) * {g.obs_dim});
    }}
    if (state->used >= {g.n_action_steps}) {{
{take_over}        state->used = 0;
        state->chunks++;
    }}
{advance}    memcpy(action, state->plan + state->used * {a}, sizeof(float) * {a});
    state->used++;
    state->steps++;
}}
"""
    main = _example_main(prefix, g)
    return CSources(prefix, header, source, main)


def _example_main(prefix: str, g: ChunkedGraph) -> str:
    up = prefix.upper()
    return f"""/* Example use of the generated {prefix}.c ('{g.policy_kind}' policy). Build and run on a PC:
 *     gcc -std=c99 -O2 -o {prefix}_example main.c {prefix}.c -lm && ./{prefix}_example
 * On a flight controller call {prefix}_reset() when the controller takes over and {prefix}_step() at the
 * policy's control rate; a chunk is planned every {up}_N_ACTION_STEPS steps. */
#include <stdio.h>

#include "{prefix}.h"

int main(void)
{{
    static {prefix}_state state; /* the caller owns the state: a static or stack variable, no heap */
    float obs[{up}_OBS_DIM] = {{0}}, action[{up}_ACTION_DIM];
    int t, i;
    {prefix}_reset(&state);
    for (t = 0; t < 2 * {up}_N_ACTION_STEPS; ++t) {{
        {prefix}_step(&state, obs, action);
    }}
    printf("chunks %u, action:", (unsigned)state.chunks);
    for (i = 0; i < {up}_ACTION_DIM; ++i) {{
        printf(" %.6f", action[i]);
    }}
    printf("\\n");
    return 0;
}}
"""
