"""What fits on a flight controller: each policy class exported to C, built with ``arm-none-eabi-gcc -O2`` (hard
float) for an STM32F405 (Cortex-M4F, 168 MHz), STM32F722 (Cortex-M7, 216 MHz) and STM32H743 (Cortex-M7, 480 MHz),
and stepped on qemu's emulated core (``mps2-an386`` / ``mps2-an500``, ``-icount shift=0``).

Prints one table: per policy and MCU the flash and RAM it adds, instructions per control step (the mean, and the
worst step: a chunk policy plans in one step every ``n_action_steps``; not stepped where it does not fit the
MCU's flash and RAM), those in µs at the MCU's clock (one
instruction a cycle: ``hardware.export.mcu`` says what that leaves out) and which loop rates it holds: ``yes`` (the
worst step fits), ``spread`` (the mean fits: planning spread over the steps its chunk covers would fit) or ``no``.
It also checks the MCU's actions against the same C built with gcc on this machine (max |diff|, must be <= 1e-5).

The policies, by default with the architectures robo deploys and random weights (the counts do not depend on the
values), or a trained checkpoint each with ``--checkpoint NAME=FOLDER``:
``raptor`` and ``robo_foundation`` (the shipped GRUs), ``sac_actor`` (the main job's MLP 64-64 actor with its position
integral), ``energy`` (MLP 3x128 energy, 3 descent steps, horizon 8), ``diffusion`` (residual-MLP denoiser 2x128, DDIM
10 steps, horizon 16), ``steered`` (a DSRL noise actor 256-256 over that diffusion policy) and ``diffusion_512`` (the
denoiser at its default width, 3x512).

    python benchmarks/mcu.py
    python benchmarks/mcu.py --checkpoint energy=runs/energy/checkpoints/best/policy --steps 64
    python benchmarks/mcu.py --policies diffusion steered --spread 4     # plans spread over 4 control steps
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from hardware.export import export_c
from hardware.export.c_build import c_rollout
from hardware.export.chunked_build import c_chunked_rollout
from hardware.export.chunked_codegen import spread_limit
from hardware.export.chunked_graph import CHUNKED_KINDS, DiffusionSampler, chunked_graph
from hardware.export.mcu import MCUS, mcu_rollout, mcu_size
from hardware.export.parity import observation_sequence
from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.energy import EnergyConfig, EnergyPolicy
from policies.mlp import MLPConfig, MLPPolicy
from policies.registry import load_policy
from policies.steered import SteeredPolicy
from robo.factory import make_policy

try:
    from benchmarks.table import print_table
except ModuleNotFoundError:  # run as a script
    from table import print_table

RATES_HZ = (1000, 500, 100)
OBS, ACT = 22, 4
STATS = {"obs": {"min": -torch.ones(OBS), "max": torch.ones(OBS)},
         "action": {"min": -torch.ones(ACT), "max": torch.ones(ACT)}}


def _normalized(policy):
    policy.set_normalization(STATS)
    return policy


def _diffusion(width: int, blocks: int):
    return _normalized(DiffusionPolicy(DiffusionConfig(
        obs_dim=OBS, action_dim=ACT, n_obs_steps=2, horizon=16, n_action_steps=4, denoiser="mlp", mlp_hidden=width,
        mlp_blocks=blocks, diffusion_step_embed_dim=32, num_inference_steps=10)))


BUILDERS = {
    "raptor": lambda: make_policy({"kind": "raptor"}),
    "robo_foundation": lambda: make_policy({"kind": "robo_foundation"}),
    "sac_actor": lambda: MLPPolicy(MLPConfig(obs_dim=OBS, action_dim=ACT, hidden_dims=[64, 64], position_integral=0.1,
                                             integral_dt=0.01)),
    "energy": lambda: _normalized(EnergyPolicy(EnergyConfig(
        obs_dim=OBS, action_dim=ACT, n_obs_steps=2, horizon=8, n_action_steps=4, backbone="mlp",
        hidden_dims=[128, 128, 128], n_steps=3, default_init="noise"))),
    "diffusion": lambda: _diffusion(128, 2),
    "steered": None,  # over the diffusion policy (or its checkpoint)
    "diffusion_512": lambda: _diffusion(512, 3),
}


def build(name: str, checkpoints: dict[str, str]):
    if name in checkpoints:
        return load_policy(checkpoints[name])
    if name == "steered":
        return SteeredPolicy.for_base(build("diffusion", checkpoints), noise_bound=1.0, hidden_dims=(256, 256))
    return BUILDERS[name]()


def rate_fit(run, rate: float, after_first: bool = False) -> str:
    """``yes``: the worst step fits (``after_first``: the worst after step 0, the first chunk planned whole);
    ``spread``: the mean fits; ``no``."""
    if after_first:
        return "yes" if float(run.us_per_step[1:].max()) <= 1e6 / rate else "no"
    return "yes" if run.fits(rate) else "spread" if run.fits(rate, spread=True) else "no"


def measure(name: str, policy, steps: int, spread: int = 0) -> list[dict]:
    """Rows per MCU; ``spread`` > 0: a diffusion policy's plan spread over up to that many control steps (its limit,
    ``spread_limit``, where lower), the first chunk still planned whole at step 0 (``us_max_1+``: the worst after)."""
    obs = observation_sequence(steps, policy.obs_dim, 0)
    rows = []
    if spread and policy.kind in CHUNKED_KINDS:
        graph = chunked_graph(policy)
        spread = min(spread, spread_limit(graph)) if isinstance(graph.sampler, DiffusionSampler) else 0
    else:
        spread = 0
    if spread:
        name = f"{name} (spread {spread})"
    with tempfile.TemporaryDirectory(prefix="robo-mcu-") as tmp:
        sources = export_c(policy, Path(tmp), spread=spread)
        host = (c_chunked_rollout(sources, obs)[0] if policy.kind in CHUNKED_KINDS else c_rollout(sources, obs))
        floats = int(sources.header.split("_NUM_FLOATS ")[1].split()[0]) if "_NUM_FLOATS " in sources.header else None
        for key, mcu in MCUS.items():
            size = mcu_size(sources, mcu)
            row = {"policy": name, "kind": policy.kind, "floats": floats if floats is not None else "-", "mcu": key,
                   "flash_KB": size["flash"] / 1024, "ram_KB": size["ram"] / 1024,
                   "fits_memory": "yes" if size["flash"] <= mcu.flash_bytes and size["ram"] <= mcu.ram_bytes else "no"}
            if row["fits_memory"] == "no":  # not stepped: it cannot be flashed
                rows.append(row)
                continue
            run = mcu_rollout(sources, mcu, obs)
            ins = run.instructions
            rows.append({
                **row, "insn_mean": f"{ins.mean():,.0f}", "insn_max": f"{ins.max():,.0f}",
                "us_mean": float(run.us_per_step.mean()), "us_max": float(run.us_per_step.max()),
                "us_max_1+": float(run.us_per_step[1:].max()),
                **{f"{r} Hz": rate_fit(run, r, after_first=bool(spread)) for r in RATES_HZ},
                "vs_gcc": float(np.abs(run.actions - host).max()),
            })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=32, help="control steps stepped on the emulated core per policy")
    ap.add_argument("--policies", nargs="+", default=list(BUILDERS), choices=list(BUILDERS))
    ap.add_argument("--checkpoint", action="append", default=[], metavar="NAME=FOLDER",
                    help="a trained checkpoint folder instead of the random-weight architecture")
    ap.add_argument("--spread", type=int, default=0, metavar="S",
                    help="also export each diffusion policy with its plan spread over up to S control steps")
    args = ap.parse_args()
    checkpoints = dict(c.split("=", 1) for c in args.checkpoint)
    unknown = sorted(set(checkpoints) - set(BUILDERS))
    if unknown:
        raise SystemExit(f"unknown --checkpoint name(s) {unknown}; choose from {list(BUILDERS)}")
    torch.manual_seed(0)
    rows = []
    for name in args.policies:
        policy = build(name, checkpoints)
        rows += measure(name, policy, args.steps)
        if args.spread and policy.kind in CHUNKED_KINDS and name != "energy":
            rows += measure(name, policy, args.steps, args.spread)
    print(f"MCU benchmark: {args.steps} control steps per policy on qemu-system-arm (-icount shift=0), "
          f"arm-none-eabi-gcc -O2 hard float; µs = instructions / clock (1 per cycle)"
          + (f"; checkpoints: {checkpoints}" if checkpoints else "; random weights"))
    print()
    print_table(rows, ["policy", "kind", "floats", "mcu", "flash_KB", "ram_KB", "fits_memory", "insn_mean",
                       "insn_max", "us_mean", "us_max", "us_max_1+", *(f"{r} Hz" for r in RATES_HZ), "vs_gcc"])
    bad = [f"{r['policy']} on {r['mcu']}" for r in rows if "vs_gcc" in r and not r["vs_gcc"] <= 1e-5]
    if bad:
        raise SystemExit(f"the MCU build's actions differ from gcc's on this machine by > 1e-5: {bad}")


if __name__ == "__main__":
    main()
