"""robo's policies flown inside Betaflight's firmware (the onboard SITL build, lockstep, 1 kHz loop) beside the same
flight in robo's simulator alone: same robot, start on the ground with stopped motors, reference, policy rate and
previous-action convention (``robo.onboard``, what ``robo deploy target=betaflight_sitl`` runs).

Prints one table: per policy, robot and flight the median distance to the reference after the take-off (1.5 s) in
the sim alone and inside the firmware, whether the firmware flight meets the target (within 1.5x of the sim alone,
or + 1 cm, whichever is larger, and not lost: > 2 m from the reference; a chunk policy flies several seeds, as
its take-off from the ground is a draw), and the policy's µs per step inside the
SITL process (this machine's CPU, not an MCU: ``benchmarks/mcu.py`` has those) and the physics steps whose reply
came late (in lockstep each step waits for its reply, up to a 2 s guard).

    python benchmarks/deploy_firmware.py                          # RAPTOR and robo_foundation, 3 airframes
    python benchmarks/deploy_firmware.py --flight sac_actor=runs/main/<time>/train/checkpoints/best/policy:crazyflie:hover \\
        --flight energy=<checkpoint>:crazyflie:figure_eight
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import numpy as np

from hardware.export.chunked_graph import CHUNKED_KINDS
from hardware.export.betaflight_build import build_onboard_sitl
from robo.factory import policy_by_name
from robo.onboard import (export_for_deployment, firmware_error_bound_m, fly_onboard, fly_sim_alone,
                          onboard_settings)
from robo.validation import SHIPPED_POLICIES
from sims.quadrotor import preset

try:
    from benchmarks.table import print_table
except ModuleNotFoundError:  # run as a script
    from table import print_table

LOOP_HZ = 1000.0
SHIPPED = [(name, name, robot, flight) for name in SHIPPED_POLICIES
           for robot in ("crazyflie", "betaflight_quadx", "x500") for flight in ("hover", "figure_eight")]


def parse_flight(text: str) -> tuple[str, str, str, str]:
    """``NAME=POLICY:ROBOT:FLIGHT`` (POLICY: raptor, robo_foundation or a checkpoint folder)."""
    name, _, rest = text.partition("=")
    parts = rest.split(":")
    if not name or len(parts) != 3:
        raise SystemExit(f"--flight {text!r}: give NAME=POLICY:ROBOT:FLIGHT, e.g. sac=runs/x/policy:crazyflie:hover")
    return name, *parts


def fly(name: str, source: str, robot: str, flight: str, seconds: float, seeds: int, work: Path) -> dict:
    """One row: a deterministic policy flies once; a chunk policy (its noise or candidates drawn from a PRNG) flies
    ``seeds`` times, export seed k in the firmware beside torch seed k alone, and the row gives the medians."""
    policy = policy_by_name(source)
    path = None if source in SHIPPED_POLICIES else source
    params = dataclasses.replace(preset(robot), dt=1.0 / LOOP_HZ)
    fws, alones = [], []
    for seed in range(seeds if policy.kind in CHUNKED_KINDS else 1):
        folder = work / f"{name}_{robot}_{flight}_{seed}"
        _, manifest = export_for_deployment(policy, folder / "export", path, seed=seed)
        binary = build_onboard_sitl(folder / "export", onboard_settings(params, manifest, flight))
        fws.append(fly_onboard(binary, params, folder, seconds, flight, 1.0 / manifest.control_rate_hz).metrics())
        alones.append(fly_sim_alone(policy, params, manifest, flight, seconds, seed).metrics())
    fw_m = float(np.median([m["median_error_m"] for m in fws]))
    alone_m = float(np.median([m["median_error_m"] for m in alones]))
    fw_lost, alone_lost = sum(m["lost"] for m in fws), sum(m["lost"] for m in alones)
    return {"policy": name, "kind": policy.kind, "robot": robot, "mass_kg": float(params.mass), "flight": flight,
            "seeds": len(fws), "sim_alone_cm": 100 * alone_m, "firmware_cm": 100 * fw_m,
            "worst (alone/fw)": f"{100 * max(m['median_error_m'] for m in alones):.1f}/"
                                f"{100 * max(m['median_error_m'] for m in fws):.1f}",
            "ratio": fw_m / max(alone_m, 1e-9), "lost (alone/fw)": f"{alone_lost}/{fw_lost}",
            "target_met": "yes" if fw_lost == 0 and fw_m <= firmware_error_bound_m(alone_m) else "no",
            "us_per_step": float(np.mean([m["step_us_mean"] for m in fws])),
            "us_max": max(m["step_us_max"] for m in fws), "late": max(m["late"] for m in fws)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flight", action="append", default=[], metavar="NAME=POLICY:ROBOT:FLIGHT",
                    help="a flight to add (repeat); with --only, the only ones")
    ap.add_argument("--only", action="store_true", help="fly only the --flight ones, not the shipped GRUs")
    ap.add_argument("--seconds", type=float, default=8.0, help="sim s after arming")
    ap.add_argument("--seeds", type=int, default=5, help="flights per row of a chunk policy (diffusion, energy)")
    args = ap.parse_args()
    flights = ([] if args.only else SHIPPED) + [parse_flight(f) for f in args.flight]
    rows = []
    with tempfile.TemporaryDirectory(prefix="robo-deploy-") as tmp:
        for name, source, robot, flight in flights:
            rows.append(fly(name, source, robot, flight, args.seconds, args.seeds, Path(tmp)))
            print(f"{name} {robot} {flight}: firmware {rows[-1]['firmware_cm']:.1f} cm, "
                  f"sim alone {rows[-1]['sim_alone_cm']:.1f} cm", flush=True)
    print(f"\nPolicies inside Betaflight 4.6 SITL (onboard build, lockstep, {LOOP_HZ:g} Hz loop) vs robo's sim alone, "
          f"{args.seconds:g} s from the ground, median error after 1.5 s (chunk policies: median over seeds)")
    print()
    print_table(rows, ["policy", "kind", "robot", "mass_kg", "flight", "seeds", "sim_alone_cm", "firmware_cm",
                       "worst (alone/fw)", "ratio",
                       "lost (alone/fw)", "target_met", "us_per_step", "us_max", "late"])


if __name__ == "__main__":
    main()
