"""C99 code for microcontrollers from a ``CGraph``: ``<prefix>.h``, ``<prefix>.c`` and an example ``main.c``.

The generated source keeps every weight in ``static const float`` arrays (flash on an MCU), uses
no heap and no mutable globals: the recurrent state lives in a ``<prefix>_state`` struct that
the caller owns (one per vehicle). API::

    <prefix>_state state;
    <prefix>_reset(&state);                  /* hidden state <- learned initial state, integrals <- 0 */
    <prefix>_step(&state, obs, action);      /* obs (OBS_DIM,) -> action (ACTION_DIM,) */

Numerics follow torch float32: ``(obs - mean) / std`` elementwise, ``W x + b`` with a float
accumulator, ``tanhf``, ``1 / (1 + expf(-x))`` for sigmoid, torch's ``GRUCell`` gate equations
and ``fminf/fmaxf`` clipping (also of a position integral: ``I + dt * x``, then the clip). The text
depends only on the graph (deterministic output).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cgraph import CGraph, Dense, GRU, Integrator, Normalize, out_dim

PER_LINE = 8


def c_float(v: float) -> str:
    """A float32 value as a C literal that parses back to the same float (9 significant digits)."""
    s = f"{float(np.float32(v)):.9g}"
    if not np.isfinite(float(s)):
        raise ValueError(f"cannot write {s} as a C float literal")
    if "." not in s and "e" not in s:
        s += ".0"
    return s + "f"


def c_array(name: str, values: np.ndarray, comment: str = "") -> str:
    """``static const float name[N] = {...};`` with ``PER_LINE`` values a line."""
    flat = np.asarray(values, dtype=np.float32).reshape(-1)
    lines = [", ".join(c_float(v) for v in flat[i:i + PER_LINE]) for i in range(0, flat.size, PER_LINE)]
    head = f"/* {comment} */\n" if comment else ""
    return head + f"static const float {name}[{flat.size}] = {{\n    " + ",\n    ".join(lines) + "\n};\n"


def _check_prefix(prefix: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", prefix):
        raise ValueError(f"C prefix {prefix!r} is not a C identifier (letters, digits, _; not starting with a digit)")
    return prefix


HELPERS = {
    "dense": """\
/* y (rows,) = W (rows, cols, row-major) x (cols,) + b; y must not alias x. */
static void dense(const float *w, const float *b, int rows, int cols, const float *x, float *y)
{
    int r, c;
    for (r = 0; r < rows; ++r) {
        const float *row = w + r * cols;
        float acc = 0.0f;
        for (c = 0; c < cols; ++c) {
            acc += row[c] * x[c];
        }
        y[r] = acc + b[r];
    }
}
""",
    "relu": """\
static void relu(float *x, int n)
{
    int i;
    for (i = 0; i < n; ++i) {
        x[i] = x[i] > 0.0f ? x[i] : 0.0f;
    }
}
""",
    "tanh": """\
static void tanh_inplace(float *x, int n)
{
    int i;
    for (i = 0; i < n; ++i) {
        x[i] = tanhf(x[i]);
    }
}
""",
    "normalize": """\
static void normalize(const float *mean, const float *std, int n, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; ++i) {
        y[i] = (x[i] - mean[i]) / std[i];
    }
}
""",
    "clip": """\
static void clip(float low, float high, int n, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; ++i) {
        y[i] = fminf(fmaxf(x[i], low), high);
    }
}
""",
    "gru": """\
static float sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* torch.nn.GRUCell, gates (r, z, n): h <- (1 - z) * n + z * h, in place.
   gi, gh: scratch of 3 * hidden floats each. */
static void gru(const float *w_ih, const float *w_hh, const float *b_ih, const float *b_hh, int hidden, int in,
                const float *x, float *h, float *gi, float *gh)
{
    int i;
    dense(w_ih, b_ih, 3 * hidden, in, x, gi);
    dense(w_hh, b_hh, 3 * hidden, hidden, h, gh);
    for (i = 0; i < hidden; ++i) {
        float r = sigmoid(gi[i] + gh[i]);
        float z = sigmoid(gi[hidden + i] + gh[hidden + i]);
        float n = tanhf(gi[2 * hidden + i] + r * gh[2 * hidden + i]);
        h[i] = (1.0f - z) * n + z * h[i];
    }
}
""",
    "integrate": """\
/* y (n + 3,) = [x (n,), integral (3,)]; then integral <- clip(integral + dt * x[0:3], -limit, limit), per axis
   (the position integral of a policy that integrates its position error x[0:3], m s). y must not alias x. */
static void integrate(float *integral, float limit, float dt, int n, const float *x, float *y)
{
    int i;
    for (i = 0; i < n; ++i) {
        y[i] = x[i];
    }
    for (i = 0; i < 3; ++i) {
        y[n + i] = integral[i];
        integral[i] = fminf(fmaxf(integral[i] + dt * x[i], -limit), limit);
    }
}
""",
}
HELPER_ORDER = ("dense", "relu", "tanh", "normalize", "clip", "gru", "integrate")


@dataclass(frozen=True)
class CSources:
    """Generated files: ``{prefix}.h``, ``{prefix}.c`` and ``main.c`` (the example)."""

    prefix: str
    header: str
    source: str
    main: str

    @property
    def files(self) -> dict[str, str]:
        return {f"{self.prefix}.h": self.header, f"{self.prefix}.c": self.source, "main.c": self.main}

    def write(self, directory: str | Path) -> list[Path]:
        """Write the files into ``directory`` (each atomically); returns their paths."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, text in self.files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, directory / name)
            paths.append(directory / name)
        return paths


def _describe(layer, in_dim: int) -> str:
    if isinstance(layer, Normalize):
        return f"Normalize {in_dim}: (x - mean) / std"
    if isinstance(layer, Dense):
        return f"Dense {in_dim} -> {layer.weight.shape[0]}, {layer.activation}"
    if isinstance(layer, GRU):
        return f"GRU {in_dim} -> {layer.hidden_dim} (torch GRUCell)"
    if isinstance(layer, Integrator):
        return (f"Integrator {in_dim} -> {in_dim + 3}: x, then the integral of x[0:3] "
                f"(dt {layer.dt:g} s, clip {layer.limit:g})")
    return f"Clip [{layer.low:g}, {layer.high:g}]"


def _emit_layers(graph: CGraph) -> tuple[list[str], list[str], list[str], set[str], list[str]]:
    """-> (weight arrays, state fields, step body, helpers used, reset body)."""
    arrays, fields, body, reset = [], [], [], []
    used: set[str] = set()
    x, d = "obs", graph.obs_dim
    n = len(graph.layers)
    for i, layer in enumerate(graph.layers):
        last = i == n - 1
        desc = _describe(layer, d)
        y = "action" if last else f"x{i}"
        if isinstance(layer, GRU):
            y = f"state->gru{i}"
        out = out_dim(layer, d)
        if not last and not isinstance(layer, GRU):
            body.append(f"    float {y}[{out}];")
        body.append(f"    /* layer {i}: {desc} */")
        if isinstance(layer, Normalize):
            used.add("normalize")
            arrays += [c_array(f"l{i}_mean", layer.mean, f"layer {i}: {desc}"), c_array(f"l{i}_std", layer.std)]
            body.append(f"    normalize(l{i}_mean, l{i}_std, {d}, {x}, {y});")
        elif isinstance(layer, Dense):
            used.add("dense")
            rows, cols = layer.weight.shape
            arrays += [c_array(f"l{i}_weight", layer.weight, f"layer {i}: {desc}; weight ({rows}, {cols}) row-major"),
                       c_array(f"l{i}_bias", layer.bias)]
            body.append(f"    dense(l{i}_weight, l{i}_bias, {rows}, {cols}, {x}, {y});")
            if layer.activation == "relu":
                used.add("relu")
                body.append(f"    relu({y}, {rows});")
            elif layer.activation == "tanh":
                used.add("tanh")
                body.append(f"    tanh_inplace({y}, {rows});")
        elif isinstance(layer, GRU):
            used |= {"dense", "gru"}
            h = layer.hidden_dim
            arrays += [c_array(f"l{i}_weight_ih", layer.weight_ih, f"layer {i}: {desc}; gates (r, z, n)"),
                       c_array(f"l{i}_weight_hh", layer.weight_hh), c_array(f"l{i}_bias_ih", layer.bias_ih),
                       c_array(f"l{i}_bias_hh", layer.bias_hh),
                       c_array(f"l{i}_initial_hidden", layer.initial_hidden)]
            fields.append(f"    float gru{i}[{h}]; /* hidden state of layer {i} ({desc}) */")
            reset.append(f"    memcpy(state->gru{i}, l{i}_initial_hidden, sizeof(state->gru{i}));")
            body.append(f"    float gru{i}_gi[{3 * h}], gru{i}_gh[{3 * h}];")
            body.append(f"    gru(l{i}_weight_ih, l{i}_weight_hh, l{i}_bias_ih, l{i}_bias_hh, {h}, {d}, {x}, {y}, "
                        f"gru{i}_gi, gru{i}_gh);")
            if last:
                body.append(f"    memcpy(action, {y}, sizeof(float) * {h});")
        elif isinstance(layer, Integrator):
            used.add("integrate")
            fields.append(f"    float integral{i}[3]; /* position integral of layer {i}, m s */")
            reset.append(f"    memset(state->integral{i}, 0, sizeof(state->integral{i}));")
            body.append(f"    integrate(state->integral{i}, {c_float(layer.limit)}, {c_float(layer.dt)}, {d}, {x}, "
                        f"{y});")
        else:
            used.add("clip")
            body.append(f"    clip({c_float(layer.low)}, {c_float(layer.high)}, {d}, {x}, {y});")
        x, d = y, out
    return arrays, fields, body, used, reset


def generate_c(graph: CGraph, prefix: str = "robo_policy", example_obs: np.ndarray | None = None,
               example_actions: np.ndarray | None = None) -> CSources:
    """C99 header, source and example ``main.c`` for ``graph``.

    ``example_obs`` (T, obs_dim) and ``example_actions`` (T, action_dim), torch's actions for that
    observation sequence from a reset state, are embedded in ``main.c``, which checks them."""
    prefix = _check_prefix(prefix)
    if not graph.layers:
        raise ValueError("the graph has no layers")
    up = prefix.upper()
    arrays, fields, body, used, reset = _emit_layers(graph)
    layers = "\n".join(f" *   {i}: {_describe(lr, d)}" for i, (lr, d) in enumerate(_layer_dims(graph)))
    banner = (f"/* Generated by robo (hardware.export.c_codegen) from a '{graph.kind}' policy. Do not edit.\n"
              f" * obs ({graph.obs_dim},) float32 -> action ({graph.action_dim},) float32, "
              f"{graph.num_floats} stored floats:\n{layers}\n */\n")
    header = f"""{banner}#ifndef {up}_H
#define {up}_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

#define {up}_OBS_DIM {graph.obs_dim}
#define {up}_ACTION_DIM {graph.action_dim}
#define {up}_NUM_FLOATS {graph.num_floats} /* weights, biases, normalization stats, initial states */

/* Everything that changes between steps; owned by the caller (one per vehicle). */
typedef struct {prefix}_state {{
{chr(10).join(fields + ["    uint32_t steps; /* steps since reset */"])}
}} {prefix}_state;

/* Put the state at the start of an episode (recurrent state <- learned initial state, integrals <- 0). */
void {prefix}_reset({prefix}_state *state);

/* One control step: obs ({graph.obs_dim},) -> action ({graph.action_dim},) in [-1, 1]. No heap, no globals. */
void {prefix}_step({prefix}_state *state, const float obs[{up}_OBS_DIM], float action[{up}_ACTION_DIM]);

#ifdef __cplusplus
}}
#endif

#endif /* {up}_H */
"""
    helpers = "\n".join(HELPERS[h] for h in HELPER_ORDER if h in used)
    source = f"""{banner}#include "{prefix}.h"

#include <math.h>
#include <string.h>

{chr(10).join(arrays)}
{helpers}
void {prefix}_reset({prefix}_state *state)
{{
{chr(10).join(reset + ["    state->steps = 0;"])}
}}

void {prefix}_step({prefix}_state *state, const float obs[{up}_OBS_DIM], float action[{up}_ACTION_DIM])
{{
{chr(10).join(body)}
    state->steps++;
}}
"""
    return CSources(prefix, header, source, _example_main(graph, prefix, example_obs, example_actions))


def _layer_dims(graph: CGraph):
    d = graph.obs_dim
    for layer in graph.layers:
        yield layer, d
        d = out_dim(layer, d)


def _example_main(graph: CGraph, prefix: str, obs: np.ndarray | None, actions: np.ndarray | None) -> str:
    up = prefix.upper()
    if obs is None:
        obs = np.zeros((1, graph.obs_dim), np.float32)
    obs = np.asarray(obs, np.float32)
    if obs.ndim != 2 or obs.shape[1] != graph.obs_dim:
        raise ValueError(f"example_obs has shape {obs.shape}, expected (T, {graph.obs_dim})")
    check = actions is not None
    if check:
        actions = np.asarray(actions, np.float32)
        if actions.shape != (obs.shape[0], graph.action_dim):
            raise ValueError(f"example_actions has shape {actions.shape}, expected ({obs.shape[0]}, "
                             f"{graph.action_dim})")
    steps = obs.shape[0]
    expected = c_array("expected_action", actions, "torch's actions for example_obs, from a reset state") if check \
        else ""
    compare = ("            float d = fabsf(action[i] - expected_action[t * ACTION_DIM + i]);\n"
               "            max_diff = d > max_diff ? d : max_diff;\n") if check else ""
    result = ('    printf("max |C - torch| over %d steps: %g\\n", STEPS, max_diff);\n'
              "    return max_diff <= 1e-5f ? 0 : 1;\n") if check else "    (void)max_diff;\n    return 0;\n"
    return f"""/* Example use of the generated {prefix}.c ('{graph.kind}' policy). Build and run on a PC:
 *     gcc -std=c99 -O2 -o {prefix}_example main.c {prefix}.c -lm && ./{prefix}_example
 * On a flight controller call {prefix}_reset() when the controller takes over and
 * {prefix}_step() at the policy's control rate, with the observation the policy was trained on. */
#include <math.h>
#include <stdio.h>

#include "{prefix}.h"

#define STEPS {steps}
#define OBS_DIM {up}_OBS_DIM
#define ACTION_DIM {up}_ACTION_DIM

{c_array("example_obs", obs, "an observation sequence, (STEPS, OBS_DIM) row-major")}
{expected}
int main(void)
{{
    {prefix}_state state; /* the caller owns the state: a static or stack variable, no heap */
    float action[ACTION_DIM];
    float max_diff = 0.0f;
    int t, i;
    {prefix}_reset(&state);
    for (t = 0; t < STEPS; ++t) {{
        {prefix}_step(&state, &example_obs[t * OBS_DIM], action);
        for (i = 0; i < ACTION_DIM; ++i) {{
{compare}        }}
    }}
    printf("step %d action:", STEPS);
    for (i = 0; i < ACTION_DIM; ++i) {{
        printf(" %.6f", action[i]);
    }}
    printf("\\n");
{result}}}
"""
