"""Throughput of the batched quadrotor simulator on one core, beside Learning to Fly's (L2F) simulator.

Prints one markdown table of env-steps per second (``B * steps / wall time``) of
``BatchedQuadrotorSim.step`` (float32, 10 ms RK4 with motor lag, every environment with its own
domain-randomized parameters, no observation or reward) for each step backend (``torch``: the
torch RK4, ``c``: the same model compiled with gcc), and with ``--compile`` the ``compiled``
backend (``torch.compile`` of ``rk4_step``, compiled for each batch size before its cell is
timed; the compile times are printed under the table). All cells run on one thread
(``torch.set_num_threads(1)``; the C step is single-threaded) and are timed interleaved, best of
``--repeats`` short rounds, so that their ratios stay fair on a loaded machine.

L2F's column: if the ``l2f`` Python package (RLtools' simulator, ``pip install l2f``, about 15 min
of C++ compile) is importable, it is timed in the same run; else the reference numbers of L2F's C++
``vector1024`` benchmark on this machine are printed, marked as such.

    python benchmarks/sim_throughput.py
    python benchmarks/sim_throughput.py --batch-sizes 1 1024 16384 --seconds 0.5 --compile
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import torch

from sims.quadrotor import BatchedQuadrotorSim
from sims.quadrotor.randomization import RandomizationConfig, sample_params

# L2F's C++ benchmark (rl-tools/l2f, `vector1024`, -O3 -march=native, one core), measured on this machine
# beside robo's torch step, on a quiet machine; at B = 16384 it was 1.97x robo-torch
L2F_REFERENCE = {1: 578e3, 1024: 4.50e6}
L2F_REFERENCE_RATIO_TO_TORCH = {16384: 1.97}
L2F_SOURCE = "L2F C++ vector1024 measured on this machine, quiet, not timed in this run"


def _sim(backend: str, batch_size: int) -> tuple[BatchedQuadrotorSim, torch.Tensor]:
    p = sample_params(RandomizationConfig(), batch_size, seed=0, dtype=torch.float32)
    sim = BatchedQuadrotorSim(p, step_backend=backend)
    action = (2 * p.hover_command() - 1)[:, None].expand(-1, 4).contiguous()
    return sim, action


def sim_stepper(backend: str, batch_size: int):
    """A no-argument function that steps a hovering ``BatchedQuadrotorSim`` once (no validation)."""
    sim, action = _sim(backend, batch_size)
    if sim.step_backend != backend:
        raise RuntimeError(f"step_backend={backend!r} fell back to {sim.step_backend!r} (see the warning)")
    return lambda: sim.step(action, validate=False)


def compiled_stepper(batch_size: int) -> tuple:
    """(stepper, seconds to build it) of ``step_backend="compiled"``: the simulator compiles when it is made."""
    torch.compiler.reset()  # the earlier batch sizes' graphs: past TorchDynamo's recompile_limit (8) one runs eagerly
    t0 = time.perf_counter()
    step = sim_stepper("compiled", batch_size)
    seconds = time.perf_counter() - t0
    print(f"step_backend='compiled' at B={batch_size}: {seconds:.1f} s to compile", file=sys.stderr)
    return step, seconds


def l2f_stepper(batch_size: int):
    """L2F's Python bindings (``l2f.vector_selector[n]``, RLtools' batched C++ step) stepping ``batch_size``
    environments as ``batch_size / n`` vectors of its largest size ``n`` that divides it; None if ``l2f``
    is not installed or has no such size. Its actions are zero (the cost of a step does not depend on them)."""
    try:
        import l2f  # a benchmark extra, not a dependency
    except ImportError:
        return None
    import numpy as np

    n = max((k for k in getattr(l2f, "vector_selector", {}) if k <= batch_size and batch_size % k == 0), default=None)
    if n is None:
        return None
    vec, device = l2f.vector_selector[n], l2f.Device()
    chunks = []
    for k in range(batch_size // n):
        rng, env, prm = vec.VectorRng(), vec.VectorEnvironment(), vec.VectorParameters()
        vec.initialize_rng(device, rng, k)
        vec.initialize_environment(device, env)
        vec.sample_initial_parameters(device, env, prm, rng)
        states = [vec.VectorState(), vec.VectorState()]
        vec.sample_initial_state(device, env, prm, states[0], rng)
        chunks.append((env, prm, states, rng))
    action = np.zeros((n, 4), dtype=np.float32)
    flip = [0]

    def step():
        i = flip[0]
        for env, prm, states, rng in chunks:
            vec.step(device, env, prm, states[i], action, states[1 - i], rng)
        flip[0] = 1 - i
    return step


def round_length(step, seconds: float) -> int:
    """Calls of ``step`` that take about ``seconds`` (after 3 warm-up calls)."""
    for _ in range(3):
        step()
    t0, n = time.perf_counter(), 0
    while n < 3 or time.perf_counter() - t0 < 0.2 * seconds:
        step()
        n += 1
    return max(3, round(n / (time.perf_counter() - t0) * seconds))


def time_rounds(steppers: dict, batch_size: int, seconds: float, repeats: int) -> dict[str, float]:
    """Best env-steps/s of each stepper over ``repeats`` interleaved rounds of about ``seconds`` each."""
    rounds = {k: round_length(s, seconds) for k, s in steppers.items()}
    best = dict.fromkeys(steppers, 0.0)
    for _ in range(repeats):
        for k, step in steppers.items():
            t0 = time.perf_counter()
            for _ in range(rounds[k]):
                step()
            best[k] = max(best[k], batch_size * rounds[k] / (time.perf_counter() - t0))
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 1024, 16384])
    ap.add_argument("--seconds", type=float, default=0.3, help="seconds per timed round of one cell")
    ap.add_argument("--repeats", type=int, default=7, help="interleaved rounds per cell; the best counts")
    ap.add_argument("--compile", action="store_true",
                    help="add step_backend='compiled' (torch.compile of rk4_step) columns (slow to compile)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the C step always uses one)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    rows, l2f_timed, compile_seconds = [], False, {}
    for B in args.batch_sizes:
        steppers = {"torch": sim_stepper("torch", B), "c": sim_stepper("c", B)}
        if args.compile:
            steppers["compiled"], compile_seconds[B] = compiled_stepper(B)
        l2f = l2f_stepper(B)
        if l2f is not None:
            steppers["l2f"] = l2f
            l2f_timed = True
        r = time_rounds(steppers, B, args.seconds, args.repeats)
        if "l2f" in r:
            l2f_rate, l2f_cell = r["l2f"], f"{r['l2f']:,.0f}"
        elif B in L2F_REFERENCE:
            l2f_rate = L2F_REFERENCE[B]
            l2f_cell = f"{l2f_rate:,.0f} (ref.)"
        elif B in L2F_REFERENCE_RATIO_TO_TORCH:
            l2f_rate = L2F_REFERENCE_RATIO_TO_TORCH[B] * r["torch"]
            l2f_cell = f"{L2F_REFERENCE_RATIO_TO_TORCH[B]:.2f} x torch (ref.)"
        else:
            l2f_rate, l2f_cell = None, "n/a"
        ratio = f"{r['c'] / l2f_rate:.2f}" if l2f_rate else "n/a"
        rows.append([B, f"{r['torch']:,.0f}", f"{r['c']:,.0f}", f"{r['c'] / r['torch']:.1f}",
                     *([f"{r['compiled']:,.0f}", f"{r['compiled'] / r['torch']:.1f}"] if args.compile else []),
                     l2f_cell, ratio])

    print(f"Quadrotor RK4 step (dt 10 ms, motor lag), float32, randomized params, {args.threads} torch thread(s); "
          f"torch {torch.__version__}, {platform.processor() or platform.machine()}; best of {args.repeats} "
          f"interleaved rounds of {args.seconds} s\n")
    head = ["B", "torch steps/s", "c steps/s", "c / torch",
            *(["compiled steps/s", "compiled / torch"] if args.compile else []), "L2F steps/s", "c / L2F"]
    if l2f_timed:
        print("L2F timed here through its Python bindings (l2f.vector_selector), one call per vector of envs\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    if compile_seconds:
        print("\ncompiled: " + ", ".join(f"{s:.1f} s to compile at B={b}" for b, s in compile_seconds.items())
              + " (not in the rates; the first includes importing TorchInductor, and a graph already in its on-disk"
              " cache loads in seconds)")
    if not l2f_timed:
        print(f"\n(ref.): {L2F_SOURCE}; install `l2f` to time it here.")


if __name__ == "__main__":
    main()
