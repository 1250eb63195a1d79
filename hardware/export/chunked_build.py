"""Export action-chunk policies (diffusion, energy, steered) to C and check them against torch.

``export_chunked_c(policy, directory)`` writes ``<prefix>.h``, ``<prefix>.c`` and ``main.c``;
``verify_chunked_c(policy, sources)`` compiles harnesses with gcc and compares, for the same noise:

- ``chunk``: ``<prefix>_plan`` against ``predict_chunk`` on random windows and initial samples;
- ``action``: a rollout of ``<prefix>_step`` (its own PRNG draws the noise) against ``policy.act`` fed the
  noise C drew for each chunk, over an observation sequence from a reset state.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from .c_build import _harness
from .c_codegen import CSources
from .chunked_codegen import generate_chunked_c
from .chunked_graph import chunked_graph
from .parity import ParityReport, observation_sequence

# argv: obs file, actions out, noise out, steps: per step the action and the current chunk's initial sample
ROLLOUT_HARNESS = """#include <stdio.h>
#include <stdlib.h>
#include "{prefix}.h"
int main(int argc, char **argv)
{{
    static {prefix}_state state;
    float obs[{up}_OBS_DIM], action[{up}_ACTION_DIM];
    long t, steps;
    FILE *in, *out, *noise;
    if (argc != 5) return 2;
    steps = atol(argv[4]);
    in = fopen(argv[1], "rb");
    out = fopen(argv[2], "wb");
    noise = fopen(argv[3], "wb");
    if (!in || !out || !noise) return 3;
    {prefix}_reset(&state);
    for (t = 0; t < steps; ++t) {{
        if (fread(obs, sizeof(float), {up}_OBS_DIM, in) != {up}_OBS_DIM) return 4;
        {prefix}_step(&state, obs, action);
        if (fwrite(action, sizeof(float), {up}_ACTION_DIM, out) != {up}_ACTION_DIM) return 5;
        if (fwrite(state.noise, sizeof(float), sizeof(state.noise) / sizeof(float), noise)
            != sizeof(state.noise) / sizeof(float)) return 5;
    }}
    fclose(in);
    fclose(noise);
    return fclose(out) == 0 ? 0 : 6;
}}
"""

# argv: windows file, noise file, chunks out, count
PLAN_HARNESS = """#include <stdio.h>
#include <stdlib.h>
#include "{prefix}.h"
#define WIN ({up}_N_OBS_STEPS * {up}_OBS_DIM)
#define CHUNK ({up}_HORIZON * {up}_ACTION_DIM)
int main(int argc, char **argv)
{{
    static {prefix}_state state;
    float window[WIN], noise[CHUNK], chunk[CHUNK];
    long b, count;
    FILE *wf, *nf, *out;
    if (argc != 5) return 2;
    count = atol(argv[4]);
    wf = fopen(argv[1], "rb");
    nf = fopen(argv[2], "rb");
    out = fopen(argv[3], "wb");
    if (!wf || !nf || !out) return 3;
    {prefix}_reset(&state);
    for (b = 0; b < count; ++b) {{
        if (fread(window, sizeof(float), WIN, wf) != WIN || fread(noise, sizeof(float), CHUNK, nf) != CHUNK) return 4;
        {prefix}_plan(&state, window, noise, chunk);
        if (fwrite(chunk, sizeof(float), CHUNK, out) != CHUNK) return 5;
    }}
    fclose(wf);
    fclose(nf);
    return fclose(out) == 0 ? 0 : 6;
}}
"""


# argv: candidates out, seed, count: the extra energy candidates of chunks 0 .. count - 1
CANDIDATES_HARNESS = """#include <stdio.h>
#include <stdlib.h>
#include "{prefix}.h"
#define EXTRA (({up}_N_CANDIDATES - 1) * {up}_HORIZON * {up}_ACTION_DIM)
int main(int argc, char **argv)
{{
    static float out[EXTRA];
    long k, count;
    FILE *f;
    if (argc != 4) return 2;
    count = atol(argv[3]);
    f = fopen(argv[1], "wb");
    if (!f) return 3;
    for (k = 0; k < count; ++k) {{
        {prefix}_candidates((uint32_t)strtoul(argv[2], NULL, 10), (uint32_t)k, out);
        if (fwrite(out, sizeof(float), EXTRA, f) != EXTRA) return 5;
    }}
    return fclose(f) == 0 ? 0 : 6;
}}
"""


def export_chunked_c(policy, directory: str | Path, prefix: str = "robo_policy", seed: int = 0,
                     spread: int = 0) -> CSources:
    """Write the C export of a chunk policy into ``directory``; ``seed`` is the PRNG seed ``_reset`` uses;
    ``spread``: a diffusion plan spread over that many control steps (``chunked_codegen.generate_chunked_c``)."""
    sources = generate_chunked_c(chunked_graph(policy), prefix, seed, spread)
    sources.write(directory)
    return sources


def _run(sources: CSources, template: str, files: dict[str, np.ndarray], outputs: list[str], count: int,
         opt: str) -> list[np.ndarray]:
    with tempfile.TemporaryDirectory(prefix="robo-c-") as tmp:
        tmp = Path(tmp)
        exe = _harness(sources, template, tmp, opt)
        for name, a in files.items():
            np.ascontiguousarray(a, dtype="<f4").tofile(tmp / name)
        r = subprocess.run([str(exe), *(str(tmp / n) for n in files), *(str(tmp / n) for n in outputs), str(count)],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"C harness exited with {r.returncode}: {r.stderr}")
        return [np.fromfile(tmp / n, dtype="<f4").reshape(count, -1) for n in outputs]


def c_plan(sources: CSources, windows: np.ndarray, noise: np.ndarray, opt: str = "-O2") -> np.ndarray:
    """``<prefix>_plan`` over windows (B, n_obs_steps, obs_dim) and noise (B, horizon, A) -> chunks (B, horizon, A)."""
    (chunks,) = _run(sources, PLAN_HARNESS, {"win.bin": windows, "noise.bin": noise}, ["chunk.bin"], len(windows),
                     opt)
    return chunks.reshape(noise.shape)


def c_chunked_rollout(sources: CSources, observations: np.ndarray, opt: str = "-O2") -> tuple[np.ndarray, np.ndarray]:
    """``<prefix>_step`` from a reset state over obs (T, obs_dim) -> (actions (T, A), noise (T, horizon * A): the
    initial sample of the chunk each step's action came from)."""
    actions, noise = _run(sources, ROLLOUT_HARNESS, {"obs.bin": observations}, ["act.bin", "noise.bin"],
                          len(observations), opt)
    return actions, noise


def export_seed(sources: CSources) -> int:
    """The PRNG seed ``<prefix>_reset`` uses (the header's ``<PREFIX>_SEED``)."""
    match = re.search(rf"#define {sources.prefix.upper()}_SEED (\d+)U", sources.header)
    if match is None:
        raise ValueError(f"{sources.prefix}.h defines no {sources.prefix.upper()}_SEED: not a chunked C export")
    return int(match.group(1))


def c_candidates(sources: CSources, chunks: int, seed: int | None = None, opt: str = "-O2") -> np.ndarray | None:
    """The extra energy candidates C draws for chunks 0 .. chunks - 1 -> (chunks, N - 1, horizon, A), normalized;
    None when the export descends one candidate."""
    match = re.search(rf"#define {sources.prefix.upper()}_N_CANDIDATES (\d+)", sources.header)
    if match is None:
        return None
    seed = export_seed(sources) if seed is None else seed
    with tempfile.TemporaryDirectory(prefix="robo-c-") as tmp:
        tmp = Path(tmp)
        exe = _harness(sources, CANDIDATES_HARNESS, tmp, opt)
        subprocess.run([str(exe), str(tmp / "cand.bin"), str(seed), str(chunks)], check=True, timeout=60)
        return np.fromfile(tmp / "cand.bin", dtype="<f4").reshape(chunks, int(match.group(1)) - 1, -1)


def export_spread(sources: CSources) -> int:
    """The control steps the export spreads a plan over (``<PREFIX>_SPREAD``; 0: planned whole)."""
    match = re.search(rf"#define {sources.prefix.upper()}_SPREAD (\d+)", sources.header)
    return int(match.group(1)) if match else 0


class SpreadPlanner:
    """A chunk policy flown (batch 1) on a spread export's schedule (``torch_spread_rollout``), drawing its noise
    from torch: what robo's simulator flies beside a firmware flight of a spread export."""

    def __init__(self, policy, spread: int):
        self.policy, self.spread = policy, int(spread)
        self.obs_dim, self.action_dim, self.kind = policy.obs_dim, policy.action_dim, policy.kind
        self.reset()

    def reset(self, mask=None) -> None:
        self.t, self.window, self.plan, self.pending = 0, None, None, None

    @torch.no_grad()
    def act(self, obs):
        p, o = self.policy, np.asarray(torch.as_tensor(obs), dtype=np.float32).reshape(1, -1)
        k, t0 = p.n_action_steps, p.n_obs_steps - 1
        self.window = np.repeat(o, p.n_obs_steps, 0) if self.window is None else np.concatenate([self.window[1:], o])
        if self.t == 0:
            self.plan = np.asarray(p.predict_chunk(self.window[None]))[0, t0:t0 + k]
        elif self.t % k == 0:
            self.plan = self.pending[t0 + self.spread:t0 + self.spread + k]
        if self.t % k == k - self.spread:  # the next chunk, from the window now
            self.pending = np.asarray(p.predict_chunk(self.window[None]))[0]
        action = self.plan[self.t % k][None].astype(np.float32)
        self.t += 1
        return torch.as_tensor(action) if isinstance(obs, torch.Tensor) else action


def torch_spread_rollout(policy, observations: np.ndarray, noise: np.ndarray, spread: int) -> np.ndarray:
    """What a spread export flies, in torch: chunk 0 planned whole at step 0; chunk j >= 1 planned from the window of
    step ``j k - spread`` (k = n_action_steps) with noise ``noise[j k]`` (the chunk executed from step j k) and
    executed from index ``n_obs_steps - 1 + spread`` -> actions (T, A)."""
    obs = observations.astype(np.float32)
    k, t0, shape = policy.n_action_steps, policy.n_obs_steps - 1, (1, *policy.noise_shape)
    windows, window = [], np.repeat(obs[:1], policy.n_obs_steps, 0)
    for t, o in enumerate(obs):
        if t > 0:
            window = np.concatenate([window[1:], o[None]])
        windows.append(window)
    out, plan = [], None
    for t in range(len(obs)):
        if t % k == 0:
            j = t // k
            start, first = (0, t0) if j == 0 else (t - spread, t0 + spread)
            chunk = np.asarray(policy.predict_chunk(windows[start][None], noise=torch.as_tensor(noise[t]).reshape(shape)))
            plan = chunk[0, first:first + k]
        out.append(plan[t % k])
    return np.stack(out)


def torch_chunked_rollout(policy, observations: np.ndarray, noise: np.ndarray,
                          candidates: np.ndarray | None = None) -> np.ndarray:
    """``policy.act`` from a full reset over obs (T, obs_dim), chunk noise (T, horizon * A) -> actions (T, A).

    ``candidates`` (chunks, N - 1, horizon * A): an energy policy's extra candidates per chunk (C's draws); then the
    chunks are planned by ``predict_chunk`` on the window ``act`` would hold (the first observation repeated, then
    the last ``n_obs_steps``), since ``act`` draws extra candidates from torch's generator."""
    if candidates is not None:
        return _rollout_with_candidates(policy, observations.astype(np.float32), noise, candidates)
    policy.reset()
    shape = (1, *policy.noise_shape)
    out = [np.asarray(policy.act(torch.as_tensor(o[None]), noise=torch.as_tensor(z).reshape(shape)))[0]
           for o, z in zip(observations.astype(np.float32), noise)]
    policy.reset()
    return np.stack(out)


def _rollout_with_candidates(policy, obs: np.ndarray, noise: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    k, t0, shape = policy.n_action_steps, policy.n_obs_steps - 1, (1, *policy.noise_shape)
    window, out, plan = np.repeat(obs[:1], policy.n_obs_steps, 0), [], None
    for t, o in enumerate(obs):
        if t > 0:
            window = np.concatenate([window[1:], o[None]])
        if t % k == 0:
            extra = candidates[t // k].reshape(1, -1, *policy.noise_shape)
            chunk = policy.predict_chunk(window[None], noise=noise[t].reshape(shape), candidates=extra)
            plan = np.asarray(chunk)[0, t0:t0 + k]
        out.append(plan[t % k])
    return np.stack(out)


def verify_chunked_c(policy, sources: CSources, steps: int = 200, atol: float = 1e-5, seed: int = 0,
                     observations: np.ndarray | None = None, windows: int = 64) -> ParityReport:
    """Max |C - torch| of ``windows`` planned chunks and of a ``steps``-step rollout (see the module docstring)."""
    rng = np.random.default_rng(seed)
    obs = observation_sequence(steps, policy.obs_dim, seed) if observations is None else np.asarray(observations,
                                                                                                      np.float32)
    if obs.ndim != 2 or obs.shape[1] != policy.obs_dim:
        raise ValueError(f"observations have shape {obs.shape}, expected (T, {policy.obs_dim})")
    win = observation_sequence(windows * policy.n_obs_steps, policy.obs_dim, seed + 1).reshape(
        windows, policy.n_obs_steps, policy.obs_dim)
    noise = rng.standard_normal((windows, *policy.noise_shape)).astype(np.float32)
    report = ParityReport(atol, checks=[f"C plan of {windows} windows", f"C rollout, {len(obs)} steps, gcc -O2"
                                        + (f", plans spread over {export_spread(sources)} steps"
                                           if export_spread(sources) else "")])
    n_chunks = -(-len(obs) // policy.n_action_steps)
    candidates = c_candidates(sources, n_chunks)
    options = {} if candidates is None else {  # every window is planned as chunk 0 of a reset state
        "candidates": torch.as_tensor(np.repeat(candidates[:1], windows, 0)).reshape(windows, -1,
                                                                                        *policy.noise_shape)}
    expected = np.asarray(policy.predict_chunk(torch.as_tensor(win), noise=torch.as_tensor(noise), **options))
    report.add("chunk", expected, c_plan(sources, win, noise), strict=True)
    actions, chunk_noise = c_chunked_rollout(sources, obs)
    spread = export_spread(sources)
    expected = torch_spread_rollout(policy, obs, chunk_noise, spread) if spread else \
        torch_chunked_rollout(policy, obs, chunk_noise, candidates)
    report.add("action", expected, actions)
    return report
