"""Build and check generated C on this machine: compile with gcc, roll it out against torch,
time its step function, and measure the compiled object's size.

``export_c(policy, directory)`` is the one-call export; ``verify_c`` compiles a rollout harness
around the generated source and compares its actions with torch's over a long rollout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from .c_codegen import CSources, generate_c
from .cgraph import c_graph
from .chunked_graph import CHUNKED_KINDS
from .parity import ParityReport, observation_sequence, reference_rollout
from .spec import module_spec

C_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic")
EXAMPLE_STEPS = 10

# reads T observations (float32, row-major) from argv[1], writes T actions to argv[2]
ROLLOUT_HARNESS = """#include <stdio.h>
#include <stdlib.h>
#include "{prefix}.h"
int main(int argc, char **argv)
{{
    {prefix}_state state;
    float obs[{up}_OBS_DIM], action[{up}_ACTION_DIM];
    long t, steps;
    FILE *in, *out;
    if (argc != 4) return 2;
    steps = atol(argv[3]);
    in = fopen(argv[1], "rb");
    out = fopen(argv[2], "wb");
    if (!in || !out) return 3;
    {prefix}_reset(&state);
    for (t = 0; t < steps; ++t) {{
        if (fread(obs, sizeof(float), {up}_OBS_DIM, in) != {up}_OBS_DIM) return 4;
        {prefix}_step(&state, obs, action);
        if (fwrite(action, sizeof(float), {up}_ACTION_DIM, out) != {up}_ACTION_DIM) return 5;
    }}
    fclose(in);
    return fclose(out) == 0 ? 0 : 6;
}}
"""

# best of argv[2] timed loops of argv[1] steps over a buffer of observations; prints nanoseconds per step
TIMING_HARNESS = """#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "{prefix}.h"
#define N_OBS 64
int main(int argc, char **argv)
{{
    static float obs[N_OBS][{up}_OBS_DIM];
    {prefix}_state state;
    float action[{up}_ACTION_DIM];
    volatile float sink = 0.0f;
    struct timespec t0, t1;
    long i, steps = argc > 1 ? atol(argv[1]) : 100000, repeats = argc > 2 ? atol(argv[2]) : 1, r;
    double ns, best = 1e30;
    int j;
    unsigned int seed = 1u;
    for (i = 0; i < N_OBS; ++i)
        for (j = 0; j < {up}_OBS_DIM; ++j) {{
            seed = seed * 1103515245u + 12345u;
            obs[i][j] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
        }}
    {prefix}_reset(&state);
    for (i = 0; i < 1000; ++i) {prefix}_step(&state, obs[i % N_OBS], action);
    for (r = 0; r < repeats; ++r) {{
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (i = 0; i < steps; ++i) {{
            {prefix}_step(&state, obs[i % N_OBS], action);
            sink += action[0];
        }}
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)steps;
        best = ns < best ? ns : best;
    }}
    printf("%.3f\\n", best);
    return sink == sink ? 0 : 1;
}}
"""


def find_cc() -> str:
    """The C compiler: ``$CC`` or ``gcc`` on the PATH."""
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if cc is None:
        raise RuntimeError(f"no C compiler found ({os.environ.get('CC', 'gcc')!r} is not on the PATH): "
                           "install gcc or set CC")
    return cc


def compile_c(sources: list[Path], output: Path, opt: str = "-O2", compile_only: bool = False,
              flags: tuple[str, ...] = ()) -> Path:
    """Compile (and link with libm unless ``compile_only``) with warnings as errors; ``flags``: more gcc flags
    (``-shared -fPIC``, ``-I<dir>``)."""
    cmd = [find_cc(), *C_FLAGS, opt, *flags, *(["-c"] if compile_only else []), *map(str, sources), "-o", str(output)]
    if not compile_only:
        cmd.append("-lm")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"compiling {[Path(s).name for s in sources]} failed ({' '.join(cmd)}):\n{r.stderr}")
    return output


def export_c(policy, directory: str | Path, prefix: str = "robo_policy", example_steps: int = EXAMPLE_STEPS,
             seed: int = 0, spread: int = 0) -> CSources:
    """Write ``{prefix}.h``, ``{prefix}.c`` and ``main.c`` for a policy into ``directory``.

    MLP and GRU policies: ``main.c`` embeds ``example_steps`` observations of ``observation_sequence(seed)``
    and torch's actions for them, and exits 0 only if the C actions match within 1e-5. Action-chunk
    policies (diffusion, energy, steered) go to ``chunked_build.export_chunked_c``, ``seed`` seeding their
    C PRNG and ``spread`` spreading a diffusion plan over that many control steps."""
    if getattr(policy, "kind", None) in CHUNKED_KINDS:
        from .chunked_build import export_chunked_c

        return export_chunked_c(policy, directory, prefix, seed, spread)
    if spread:
        raise ValueError(f"spread={spread}: only a diffusion policy's plan is spread over steps, not {policy.kind!r}'s")
    graph = c_graph(policy)
    obs = observation_sequence(example_steps, graph.obs_dim, seed)
    sources = generate_c(graph, prefix, obs, reference_rollout(module_spec(policy), obs))
    sources.write(directory)
    return sources


def _harness(sources: CSources, template: str, directory: Path, opt: str) -> Path:
    sources.write(directory)
    (directory / "harness.c").write_text(template.format(prefix=sources.prefix, up=sources.prefix.upper()))
    units = [directory / n for n in sources.files if n.endswith(".c") and n != "main.c"]  # the policy and its parts
    return compile_c([directory / "harness.c", *units], directory / "harness", opt)


def c_rollout(sources: CSources, observations: np.ndarray, opt: str = "-O2") -> np.ndarray:
    """Compile ``sources`` with a harness and step it from a reset state: obs (T, obs_dim) -> actions (T, A)."""
    obs = np.ascontiguousarray(observations, dtype="<f4")
    with tempfile.TemporaryDirectory(prefix="robo-c-") as tmp:
        tmp = Path(tmp)
        exe = _harness(sources, ROLLOUT_HARNESS, tmp, opt)
        obs.tofile(tmp / "obs.bin")
        r = subprocess.run([str(exe), str(tmp / "obs.bin"), str(tmp / "act.bin"), str(obs.shape[0])],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"C rollout harness exited with {r.returncode}: {r.stderr}")
        return np.fromfile(tmp / "act.bin", dtype="<f4").reshape(obs.shape[0], -1)


def verify_c(policy, sources: CSources, steps: int = 500, atol: float = 1e-5, seed: int = 0,
             observations: np.ndarray | None = None) -> ParityReport:
    """Max |C - torch| over a rollout (batch 1) from a reset state on ``observations`` (T, obs_dim)
    (default: ``steps`` steps of ``observation_sequence(seed)``); action-chunk policies are checked by
    ``chunked_build.verify_chunked_c`` (planned chunks for the same noise, then the rollout)."""
    if getattr(policy, "kind", None) in CHUNKED_KINDS:
        from .chunked_build import verify_chunked_c

        return verify_chunked_c(policy, sources, steps, atol, seed, observations)
    spec = module_spec(policy)
    obs = observation_sequence(steps, policy.obs_dim, seed) if observations is None else np.asarray(observations)
    if obs.ndim != 2 or obs.shape[1] != policy.obs_dim:
        raise ValueError(f"observations have shape {obs.shape}, expected (T, {policy.obs_dim})")
    report = ParityReport(atol, checks=[f"C rollout, {obs.shape[0]} steps, gcc -O2"])
    report.add("action", reference_rollout(spec, obs), c_rollout(sources, obs))
    return report


def time_c_step(sources: CSources, steps: int = 20_000, repeats: int = 20, opt: str = "-O2") -> float:
    """Seconds per ``{prefix}_step`` call, timed inside C: the best of ``repeats`` loops of ``steps``
    calls (after 1000 warm-up steps); short loops, best of many, to see past other processes."""
    with tempfile.TemporaryDirectory(prefix="robo-c-") as tmp:
        exe = _harness(sources, TIMING_HARNESS, Path(tmp), opt)
        r = subprocess.run([str(exe), str(steps), str(repeats)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"C timing harness exited with {r.returncode}: {r.stderr}")
        return float(r.stdout.strip()) * 1e-9


def object_size(sources: CSources, opt: str = "-Os") -> dict[str, int]:
    """Sections of the compiled policy object (``gcc -c``, then binutils ``size``): text, data, bss bytes.

    ``static const`` weights land in ``.rodata``, which ``size`` counts in ``text`` (flash)."""
    size = shutil.which("size")
    if size is None:
        raise RuntimeError("binutils 'size' is not on the PATH: install binutils")
    with tempfile.TemporaryDirectory(prefix="robo-c-") as tmp:
        tmp = Path(tmp)
        sources.write(tmp)
        obj = compile_c([tmp / f"{sources.prefix}.c"], tmp / f"{sources.prefix}.o", opt, compile_only=True)
        r = subprocess.run([size, str(obj)], capture_output=True, text=True, check=True)
    text, data, bss = (int(v) for v in r.stdout.splitlines()[1].split()[:3])
    return {"text": text, "data": data, "bss": bss}
