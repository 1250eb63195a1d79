"""``robo deploy``: a policy into Betaflight's firmware, built and (``target=betaflight_sitl``) flown in lockstep in
robo's physics beside the same flight in robo's simulator alone (``robo.onboard``)."""

from __future__ import annotations

import csv
import dataclasses
import logging
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hardware.export.betaflight_board import BOARDS
from hardware.export.betaflight_build import build_onboard_sitl
from robo.commands.export import rewrite_overrides  # noqa: F401  (policy=<folder> shorthand)
from robo.factory import make_policy
from robo.onboard import (STARTS, Flight, export_for_deployment, fly_onboard, fly_sim_alone, onboard_settings,
                          reference_at)
from robo.run_dir import seed_run, write_json, write_resolved_config
from sims.envs.quadrotor_env import make_robot

log = logging.getLogger(__name__)
TARGETS = ("betaflight_sitl", "build")
MODES = ("onboard", "companion")
FLIGHTS = ("hover", "figure_eight")


def run(cfg: DictConfig, run_dir: Path) -> dict:
    if cfg.target not in TARGETS:
        raise ValueError(f"unknown deploy target {cfg.target!r}; choose one of {list(TARGETS)}")
    if cfg.start not in STARTS:
        raise ValueError(f"start={cfg.start!r}; choose one of {list(STARTS)}")
    if cfg.flight not in FLIGHTS:
        raise ValueError(f"flight={cfg.flight!r}; choose one of {list(FLIGHTS)}")
    if cfg.mode not in MODES:
        raise ValueError(f"mode={cfg.mode!r}; choose one of {list(MODES)}")
    companion = cfg.mode == "companion"
    if companion and cfg.policy.get("kind") != "position_hold":
        raise ValueError("mode=companion flies robo's attitude-level controller: give it policy=position_hold "
                         f"(the {cfg.policy.get('kind')} policy acts on the motors: it flies onboard)")
    if not companion and cfg.policy.get("kind") == "position_hold":
        raise ValueError("policy=position_hold sends attitude and thrust: give it mode=companion")
    if companion and cfg.target != "betaflight_sitl":
        raise ValueError("mode=companion flies the firmware (target=betaflight_sitl); there is nothing to build")
    if cfg.board is not None and cfg.target != "build":
        raise ValueError(f"board={cfg.board} is built, not flown: give target=build with it")
    if cfg.board is not None and cfg.board not in BOARDS:
        raise ValueError(f"board={cfg.board!r}: robo builds Betaflight for {list(BOARDS)}")
    if companion:
        return run_companion(cfg, Path(run_dir))
    if OmegaConf.is_missing(cfg.policy, "path"):
        raise ValueError("no policy to deploy: give policy=<checkpoint folder>, policy=raptor or policy=robo_foundation")
    if not float(cfg.seconds) > 0:
        raise ValueError(f"seconds={cfg.seconds} must be positive")
    seed_run(int(cfg.seed))
    c = OmegaConf.to_container(cfg, resolve=True)
    policy = make_policy(c["policy"])
    params = make_robot(c["robot"])
    write_resolved_config(run_dir, cfg)
    export_dir = Path(run_dir) / "export"
    _, manifest = export_for_deployment(policy, export_dir, c["policy"].get("path"), int(cfg.seed), int(cfg.spread))
    loop_hz = float(cfg.loop_hz) if cfg.loop_hz else manifest.control_rate_hz
    params = dataclasses.replace(params, dt=1.0 / loop_hz)
    settings = onboard_settings(params, manifest, str(cfg.flight), tuple(c["target_position"]), str(cfg.start))
    settings = dataclasses.replace(settings, log_steps=bool(cfg.shadow))  # the twin reads every step from the log
    if cfg.board is not None:
        return build_board(policy.kind, export_dir, str(cfg.board), settings, Path(run_dir))
    log.info("building Betaflight SITL with the %s policy (%g Hz, %s) for a %g Hz loop", policy.kind,
             manifest.control_rate_hz, manifest.previous_action, loop_hz)
    binary = build_onboard_sitl(export_dir, settings)
    result = {"target": cfg.target, "policy_kind": policy.kind, "robot": c["robot"]["preset"],
              "mass_kg": float(params.mass), "loop_hz": loop_hz, "policy_hz": manifest.control_rate_hz,
              "firmware": str(binary)}
    if cfg.target == "build":
        write_json(Path(run_dir) / "metrics.json", result)
        return result
    log.info("flying it inside the firmware: %s, %g s", cfg.flight, cfg.seconds)
    target = tuple(c["target_position"])
    firmware = fly_onboard(binary, params, run_dir, float(cfg.seconds), str(cfg.flight), 1.0 / manifest.control_rate_hz,
                           str(cfg.start), target)
    flights = {"firmware": firmware}
    if cfg.compare:
        flights["sim_alone"] = fly_sim_alone(policy, params, manifest, str(cfg.flight), float(cfg.seconds),
                                           int(cfg.seed), str(cfg.start), target)
    metrics = {name: f.metrics() for name, f in flights.items()}
    write_json(Path(run_dir) / "metrics.json", {**result, **metrics})
    write_trajectories(Path(run_dir) / "trajectory.csv", flights)
    title = f"{policy.kind} on {c['robot']['preset']}: {cfg.flight}"
    plot(Path(run_dir) / "trajectory.png", flights, title)
    if c["video"]["enabled"]:
        result["video"] = str(video(Path(run_dir) / "videos" / "flight.mp4", firmware, params, c["video"],
                                    f"{title}, inside Betaflight"))
    fw = metrics["firmware"]
    result.update({"firmware_median_error_m": fw["median_error_m"], "firmware_lost": fw["lost"],
                   "firmware_step_us_mean": fw.get("step_us_mean"), "firmware_steps": fw.get("steps"),
                   "late_replies": fw.get("late")})
    if cfg.shadow:
        metrics["twin"] = shadow(Path(run_dir) / "sitl.log", c["robot"]["preset"], params, manifest.control_rate_hz,
                                 tuple(c["target_position"]))
        write_json(Path(run_dir) / "metrics.json", {**result, **metrics})
        result.update({"twin_mass_kg": metrics["twin"]["mass_kg"], "twin_mass_error": metrics["twin"]["mass_error"]})
    if "sim_alone" in metrics:
        result.update({"sim_alone_median_error_m": metrics["sim_alone"]["median_error_m"],
                       "sim_alone_lost": metrics["sim_alone"]["lost"]})
    log.info("run folder: %s", run_dir)
    return result


def shadow(log_path: Path, preset: str, flown, policy_hz: float, target) -> dict:
    """The twin (``preset``'s nominal model, ticking at the policy's rate) fed the firmware flight's logged steps
    (``robo.real.firmware.identify_from_log``): its identified mass, thrust scale and thrust per mass against the
    flown robot's, and its last one-step position prediction error (m)."""
    import numpy as np

    from hardware.export.betaflight_build import onboard_steps
    from robo.real.firmware import FirmwareEpisode, identify_from_log

    steps = onboard_steps(log_path.read_text())
    ep = FirmwareEpisode(np.array([o for _, o, _ in steps]), np.array([a for _, _, a in steps]), np.zeros(3))
    twin = identify_from_log(ep, {"preset": preset, "dt": 1.0 / policy_hz}, target)
    mass, scale = float(twin.calibrated_params().mass), float(twin.estimate["thrust_scale"])
    nominal = make_robot(preset)
    # thrust per mass against the flown robot's: what a flight without rotational excitation identifies (mass and
    # thrust scale apart need the differential motor commands of a dithered flight, robo.twin.pretrain.identify)
    per_mass = (scale / mass) / (float(np.mean(flown.thrust_curve, axis=0)[2] / np.mean(nominal.thrust_curve, axis=0)[2])
                                 / float(flown.mass))
    return {"mass_kg": mass, "flown_mass_kg": float(flown.mass), "mass_error": abs(mass / float(flown.mass) - 1),
            "thrust_scale": scale, "thrust_per_mass_error": abs(per_mass - 1),
            "prediction_error_m": float(twin.prediction_error["position"]), "steps": len(steps)}


def write_trajectories(path: Path, flights: dict[str, Flight]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["flight", "t_s", "x_m", "y_m", "z_m", "error_m"])
        for name, flight in flights.items():
            for row, e in zip(flight.trajectory, flight.errors()):
                w.writerow([name, *(f"{v:.5f}" for v in row), f"{e:.5f}"])


def run_companion(cfg: DictConfig, run_dir: Path) -> dict:
    """``mode=companion``: the stock lockstep firmware flown by ``PositionHold`` over MSP (``robo.companion``)."""
    from robo.companion import fly_companion, position_hold

    seed_run(int(cfg.seed))
    c = OmegaConf.to_container(cfg, resolve=True)
    params = make_robot(c["robot"])
    params = dataclasses.replace(params, dt=1.0 / float(cfg.loop_hz)) if cfg.loop_hz else params
    write_resolved_config(run_dir, cfg)
    target = tuple(c["target_position"])
    log.info("flying the stock firmware as a companion computer (attitude over MSP, 50 Hz): %s, %g s",
             cfg.flight, cfg.seconds)
    flight = fly_companion(position_hold(params, c["policy"]), params, run_dir, float(cfg.seconds), str(cfg.flight),
                           str(cfg.start), target)
    metrics = {"companion": {**flight.metrics(), "ticks": flight.firmware["ticks"],
                             "stopped": flight.firmware["stopped"]}}
    result = {"target": cfg.target, "mode": "companion", "policy_kind": "position_hold", "robot": c["robot"]["preset"],
              "mass_kg": float(params.mass), "loop_hz": 1.0 / params.dt}
    write_json(run_dir / "metrics.json", {**result, **metrics})
    flights = {"companion": flight}
    write_trajectories(run_dir / "trajectory.csv", flights)
    title = f"position_hold on {c['robot']['preset']}: {cfg.flight}, companion"
    plot(run_dir / "trajectory.png", flights, title)
    if c["video"]["enabled"]:
        result["video"] = str(video(run_dir / "videos" / "flight.mp4", flight, params, c["video"],
                                    f"{title}, through Betaflight"))
    m = metrics["companion"]
    result.update({"companion_median_error_m": m["median_error_m"], "companion_lost": m["lost"],
                   "stopped": m["stopped"]})
    log.info("run folder: %s", run_dir)
    return result


def build_board(kind: str, export_dir: Path, board: str, settings, run_dir: Path) -> dict:
    """``target=build board=<MCU>``: Betaflight's firmware for the board with the policy as its motor controller,
    beside the board's stock build; metrics.json gets the linker's memory report of both."""
    from hardware.export.betaflight_board import build_board_firmware

    log.info("building Betaflight %s with the %s policy (and, once, the stock %s build)", board, kind, board)
    firmware = build_board_firmware(export_dir, board, settings)
    for name in ("elf", "hex"):
        path = getattr(firmware, name)
        if path is not None:
            shutil.copy2(path, run_dir / f"betaflight_{board}.{name}")
    result = {"target": "build", "policy_kind": kind, **firmware.summary(),
              "elf": str(run_dir / f"betaflight_{board}.elf"),
              "hex": str(run_dir / f"betaflight_{board}.hex") if firmware.hex else None}
    write_json(run_dir / "metrics.json", result)
    for region, added in result["added_bytes"].items():
        used, size = firmware.memory[region]
        if used:
            log.info("%s: %d of %d B used (%+d B for the policy)", region, used, size, added)
    return result


def video(path: Path, flight: Flight, params, video_cfg: dict, caption: str) -> Path:
    """The flight rendered from MuJoCo's chase camera, ``video_cfg["fps"]`` frames a second (every physics step's
    state logged), the reference as the green marker."""
    from sims.quadrotor.render import render_flight_mp4

    fps = float(video_cfg.get("fps", 50))
    stride = max(1, int(round(1.0 / (params.dt * fps))))
    states = flight.states[::stride]
    ref, _ = reference_at(flight.trajectory[::stride, 0], flight.reference, flight.target)
    return render_flight_mp4(params, states, path, fps=1.0 / (params.dt * stride),
                             width=int(video_cfg.get("width", 480)), height=int(video_cfg.get("height", 360)),
                             target=ref, caption=caption)


def plot(path: Path, flights: dict[str, Flight], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_xy, ax_e) = plt.subplots(1, 2, figsize=(10, 4))
    for name, flight in flights.items():
        ax_xy.plot(flight.trajectory[:, 1], flight.trajectory[:, 2], label=name)
        ax_e.plot(flight.trajectory[:, 0], flight.errors(), label=name)
    ax_xy.set(xlabel="x (m)", ylabel="y (m)", title="path, top view", aspect="equal")
    ax_e.set(xlabel="time since arming (s)", ylabel="distance to the reference (m)", title=title)
    ax_e.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
