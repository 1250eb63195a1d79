"""Throughput of the batched quadrotor simulator on this machine.

Prints one markdown table of env-steps per second (``B * steps / wall time``) for the
batched torch RK4 integrator, float32, every environment with its own domain-randomized
parameters, eager and (optionally) ``torch.compile``-d.

    python benchmarks/sim_throughput.py
    python benchmarks/sim_throughput.py --batch-sizes 1 1024 16384 --seconds 2 --no-compile
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

from sims.quadrotor.dynamics import hover_state, rk4_step
from sims.quadrotor.randomization import RandomizationConfig, sample_params


def measure(step_fn, batch_size: int, steps: int | None, seconds: float, warmup: int = 5) -> tuple[float, int]:
    """Env-steps per second of ``step_fn(state, action, params)`` at hover; returns (rate, steps run)."""
    p = sample_params(RandomizationConfig(), batch_size, seed=0, dtype=torch.float32)
    s = hover_state(p)
    a = (2 * p.hover_command() - 1)[:, None].expand(-1, 4).contiguous()
    for _ in range(warmup):
        s = step_fn(s, a, p)
    if steps is None:  # calibrate: enough steps to fill ``seconds``
        t0 = time.perf_counter()
        n = 0
        while n < 3 or time.perf_counter() - t0 < 0.1 * seconds:
            s = step_fn(s, a, p)
            n += 1
        steps = max(3, round(n / (time.perf_counter() - t0) * seconds))
    t0 = time.perf_counter()
    for _ in range(steps):
        s = step_fn(s, a, p)
    wall = time.perf_counter() - t0
    if not bool(torch.isfinite(s).all()):
        raise RuntimeError(f"state became non-finite at B={batch_size}")
    return batch_size * steps / wall, steps


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 1024, 16384])
    ap.add_argument("--steps", type=int, default=None, help="timed steps per batch size (default: fill --seconds)")
    ap.add_argument("--seconds", type=float, default=2.0, help="target timed seconds per cell when --steps is unset")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch intra-op threads")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    compiled = None
    if not args.no_compile:
        try:
            compiled = torch.compile(rk4_step, dynamic=False)
        except Exception as e:  # noqa: BLE001 (optional column)
            print(f"torch.compile unavailable: {e}", file=sys.stderr)

    rows = []
    for B in args.batch_sizes:
        eager, n = measure(rk4_step, B, args.steps, args.seconds)
        comp_cell, ctime = "n/a", ""
        if compiled is not None:
            try:
                t0 = time.perf_counter()
                p = sample_params(RandomizationConfig(), B, 0)
                compiled(hover_state(p), torch.zeros(B, 4), p)  # compile outside the timed loop
                ctime = f"{time.perf_counter() - t0:.1f}"
                rate, _ = measure(compiled, B, args.steps, args.seconds)
                comp_cell = f"{rate:,.0f}"
            except Exception as e:  # noqa: BLE001
                print(f"torch.compile failed at B={B}: {type(e).__name__}: {e}", file=sys.stderr)
                compiled = None
        rows.append((B, n, f"{eager:,.0f}", comp_cell, ctime))

    print(f"Batched quadrotor RK4, float32, randomized params; torch {torch.__version__}, "
          f"{args.threads} thread(s), {platform.processor() or platform.machine()}\n")
    print("| B | timed steps | eager steps/s | compiled steps/s | compile s |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")


if __name__ == "__main__":
    main()
