"""Flights of an exported policy inside Betaflight's SITL firmware (the onboard build, lockstep), and the same
flight in robo's simulator alone, for ``robo deploy target=betaflight_sitl``.

Both start the named robot at rest on the ground at the origin, motors stopped; the firmware is provisioned and
armed over MSP, then the policy inside it flies for ``seconds`` of sim time toward the reference (``hover``: the
target; ``figure_eight``: robo's lemniscate around it, from the arming on). The sim-alone flight steps the same
physics (``params.dt``) with the policy every ``loop_hz / control_rate_hz``-th step, the manifest's previous-action
convention and the same reference, so the two differ only by what the firmware does: its attitude estimate and
gyro instead of the true state, float32 C instead of torch, and (chunk policies) the C PRNG's noise instead of
torch's.

    exported = export_for_deployment(policy, "export/", path)                  # C + manifest.json
    binary = build_onboard_sitl("export/", onboard_settings(params, manifest, "hover"))
    firmware = fly_onboard(binary, params, "run/", 6.0)                       # trajectory, step timing, rates
    alone = fly_sim_alone(policy, params, manifest, "hover", 6.0)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hardware.drivers.base import RobotError
from hardware.drivers.betaflight import BetaflightRobot
from hardware.drivers.betaflight_setup import (SetupConfig, calibrate_accelerometer, disable_runaway_takeoff,
                                               provision, wait_ready)
from hardware.export import export_c
from hardware.export.betaflight_build import OnboardSettings, onboard_log
from hardware.export.manifest import DeploymentManifest, write_manifest
from robo.deployment import deployment_manifest
from sims.envs.observation import observe
from sims.quadrotor import BatchedQuadrotorSim, ParamsBatch, QuadrotorParams, hover_state
from sims.vehicles import betaflight_firmware as bf

TARGET = (0.0, 0.0, 1.0)
SETTLE_SECONDS = 1.5  # the take-off: errors are scored after it
LOST_M = 2.0  # farther than this from the reference after the take-off: lost (the tasks' termination radius)
FIGURE_EIGHT = {"amplitude": 1.0, "period": 6.0}  # robo's figure_eight task defaults (configs/task/hover.yaml)


def firmware_error_bound_m(sim_alone_median_m: float) -> float:
    """The firmware flight's target: a median error within 1.5x of the sim alone's, or + 1 cm, whichever is larger."""
    return max(1.5 * sim_alone_median_m, sim_alone_median_m + 0.01)


def export_for_deployment(policy, directory: str | Path, path: str | Path | None = None, seed: int = 0,
                          spread: int = 0):
    """``robo export format=c`` without the parity report: the C sources and ``manifest.json`` in ``directory``
    -> (sources, manifest); ``spread``: a diffusion plan spread over that many control steps."""
    sources = export_c(policy, directory, seed=seed, spread=spread)
    manifest = deployment_manifest(policy, "c", list(sources.files), path, spread)
    write_manifest(directory, manifest)
    return sources, manifest


def initial_previous_action(params: QuadrotorParams, manifest: DeploymentManifest, start: str = "ground") -> float:
    """floats 18:22 at arming as robo's tasks set them for the flown robot: its hover command (``clipped_hover``)
    or the motors' state (``raw_motor_state``): stopped on the ground, -1; at the hover command when hand-launched."""
    if manifest.previous_action == "raw_motor_state" and start == "ground":
        return -1.0
    return 2.0 * float(params.hover_command) - 1.0


def onboard_settings(params: QuadrotorParams, manifest: DeploymentManifest, reference: str = "hover",
                     target=TARGET, start: str = "ground") -> OnboardSettings:
    """The glue's settings for flying ``params`` (its ``dt`` is the state-packet period) in lockstep."""
    return OnboardSettings(target=tuple(target), origin=bf.ORIGIN, earth_radius=bf.EARTH_RADIUS, lockstep=True,
                           loop_hz=1.0 / params.dt, reference=reference,
                           figure_eight_amplitude=FIGURE_EIGHT["amplitude"],
                           figure_eight_period=FIGURE_EIGHT["period"],
                           initial_previous_action=initial_previous_action(params, manifest, start))


def reference_at(t: np.ndarray, reference: str, target=TARGET) -> tuple[np.ndarray, np.ndarray]:
    """Reference position and velocity (T, 3) at sim times ``t`` (T,) s since arming."""
    t = np.asarray(t, dtype=np.float64)
    pos, vel = np.tile(np.asarray(target, np.float64), (len(t), 1)), np.zeros((len(t), 3))
    if reference == "figure_eight":
        a, w = FIGURE_EIGHT["amplitude"], 2 * math.pi / FIGURE_EIGHT["period"]
        pos[:, 0] += a * np.sin(w * t)
        pos[:, 1] += 0.5 * a * np.sin(2 * w * t)
        vel[:, 0], vel[:, 1] = a * w * np.cos(w * t), a * w * np.cos(2 * w * t)
    return pos, vel


@dataclass
class Flight:
    """One flight: ``trajectory`` (T, 4): sim s since arming, position world FLU m, and what it scored;
    ``states`` (T, 17): robo's full state at the same samples (what a video renders)."""

    trajectory: np.ndarray
    reference: str
    policy_dt: float
    firmware: dict | None = None  # the onboard log (policy steps, µs per step) and the physics loop's rates
    states: np.ndarray | None = None
    target: tuple = TARGET  # world FLU m: the hover point, the figure-eight's centre

    @classmethod
    def logged(cls, state_log, t0: float, seconds: float, reference: str, policy_dt: float,
               firmware: dict | None = None, target=TARGET) -> "Flight":
        """The flight of a firmware runner's ``state_log`` ((sim s, state (17,)) per physics step) over the
        ``seconds`` after sim time ``t0``."""
        flown = [(t - t0, s) for t, s in state_log if 1e-9 < t - t0 <= seconds + 1e-9]
        return cls(np.array([(t, *s[0:3]) for t, s in flown]), reference, policy_dt, firmware,
                   np.array([s for _, s in flown]), tuple(target))

    def errors(self) -> np.ndarray:
        """Distance (T,) m from the reference at each sample's time."""
        ref, _ = reference_at(self.trajectory[:, 0], self.reference, self.target)
        return np.linalg.norm(self.trajectory[:, 1:4] - ref, axis=1)

    def metrics(self) -> dict:
        late = self.trajectory[:, 0] >= SETTLE_SECONDS
        e = self.errors()[late]
        lost = bool(len(e) == 0 or e.max() > LOST_M or not np.isfinite(e).all())
        out = {"median_error_m": float(np.median(e)) if len(e) else float("nan"),
               "rmse_m": float(np.sqrt(np.mean(e ** 2))) if len(e) else float("nan"),
               "final_error_m": float(e[-1]) if len(e) else float("nan"), "lost": lost,
               "seconds": float(self.trajectory[-1, 0]) if len(self.trajectory) else 0.0}
        if self.firmware:
            out.update({k: self.firmware[k] for k in ("steps", "step_us_mean", "step_us_max", "late", "answered")
                        if k in self.firmware})
        return out


def connect_provisioned(fw, setup: SetupConfig, acc_1g: int = 256, attempts: int = 2) -> BetaflightRobot:
    """A ``BetaflightRobot`` on ``fw``'s MSP port, provisioned and with a levelled accelerometer. A SITL process
    that sends no telemetry or whose calibration never ends (a start that stalls on a loaded machine) is replaced
    once by a fresh one."""
    for attempt in range(attempts):
        robot = BetaflightRobot(fw.msp_address, position_source=fw.mocap, acc_1g=acc_1g, clock=fw.sim_time)
        try:
            robot.connect(timeout=5.0)
            provision(robot, setup)
            calibrate_accelerometer(robot)
            return robot
        except RobotError:
            robot.close()
            if attempt == attempts - 1:
                raise
            fw.restart(timeout=0.0)
    raise AssertionError("unreachable")


STARTS = ("ground", "hand")


def fly_onboard(binary: Path, params: QuadrotorParams, run_dir: str | Path, seconds: float, reference: str,
                policy_dt: float, start: str = "ground", target=TARGET) -> Flight:
    """Start the onboard firmware ``binary`` (robo's physics of ``params``, lockstep), provision and arm it over
    MSP, log every physics step for ``seconds`` of sim time, disarm. ``start``: ``ground``, at rest at the origin,
    motors stopped; ``hand``, held still at the target with the motors at the hover command and let go at the first
    motor command (robo's tasks' start, without the take-off)."""
    if start not in STARTS:
        raise ValueError(f"start={start!r}; choose one of {list(STARTS)}")
    run_dir = Path(run_dir)
    fw = bf.BetaflightFirmware(params, run_dir=run_dir, binary=binary, lockstep=True).start()
    try:
        robot = connect_provisioned(fw, SetupConfig(failsafe_delay=0.5, failsafe_procedure="DROP"))
        try:
            wait_ready(robot, timeout=60.0)
            disable_runaway_takeoff(robot)
            if start == "hand":
                fw.reset(tuple(target), held=True, hover_motors=True)
                wait_ready(robot, timeout=60.0)  # the attitude estimate of the vehicle at rest again
            fw.log_states = fw.log_motors = True
            robot.arm(timeout=3.0)
            t_arm = None
            while t_arm is None or fw.snapshot()["time"] - t_arm < seconds + params.dt:
                if t_arm is None:  # the step before the first that flew a policy action
                    t_arm = next((t - params.dt for _, t, m in list(fw.motor_log) if m.any()), None)
                time.sleep(0.02)
            fw.log_states = fw.log_motors = False
            rates = fw.rates()
            robot.disarm()
        finally:
            robot.close()
    finally:
        fw.close()
    firmware = {**onboard_log((run_dir / "sitl.log").read_text()), **rates}
    return Flight.logged(fw.state_log, t_arm, seconds, reference, policy_dt, firmware, target)


def fly_sim_alone(policy, params: QuadrotorParams, manifest: DeploymentManifest, reference: str,
                  seconds: float, seed: int = 0, start: str = "ground", target=TARGET) -> Flight:
    """The same flight in robo's simulator alone: same robot, start, ground, reference, policy rate and
    previous-action convention as the onboard glue (``hardware/export/betaflight/robo_onboard.c``). ``seed``: a
    chunk policy's noise, drawn by torch (the firmware's C draws from its own PRNG, seeded at export)."""
    if manifest.plan_spread:  # the export's schedule: each chunk planned spread steps early
        from hardware.export.chunked_build import SpreadPlanner

        policy = SpreadPlanner(policy, manifest.plan_spread)
    return _fly_sim_alone(policy, params, manifest, reference, seconds, seed, start, target)


def _fly_sim_alone(policy, params: QuadrotorParams, manifest: DeploymentManifest, reference: str,
                   seconds: float, seed: int = 0, start: str = "ground", target=TARGET) -> Flight:
    """``fly_sim_alone`` on the policy as given."""
    batch = ParamsBatch.from_params(params, dtype=torch.float64)
    sim = BatchedQuadrotorSim(batch)
    if start == "hand":  # at the target, motors at the hover command (hover_state's)
        s = hover_state(batch, torch.tensor([tuple(target)], dtype=torch.float64))
    else:
        s = hover_state(batch, torch.zeros(1, 3, dtype=torch.float64))
        s[0, 13:17] = 0.0
    sim.reset(s)
    policy.reset()
    torch.manual_seed(seed)
    every = int(round(1.0 / (params.dt * manifest.control_rate_hz)))
    raw = manifest.previous_action == "raw_motor_state"
    previous = torch.full((1, 4), initial_previous_action(params, manifest, start), dtype=torch.float64)
    action = torch.full((1, 4), -1.0, dtype=torch.float64)
    out, states, policy_steps = [], [], 0
    for k in range(int(round(seconds / params.dt))):
        if k % every == 0:
            ref, vref = reference_at(np.array([policy_steps * params.dt * every]), reference, target)
            obs = observe(sim.state, torch.as_tensor(ref), torch.as_tensor(vref), previous).float()
            out_raw = torch.as_tensor(np.asarray(policy.act(obs)), dtype=torch.float64)
            action = out_raw.clamp(-1, 1)
            previous = out_raw if raw else action
            policy_steps += 1
        st = sim.step(action, validate=False)
        if st[0, 2] < 0:  # the firmware runner's flat ground (level, at rest)
            st[0, 2], st[0, 7:13], st[0, 3:7] = 0.0, 0.0, torch.tensor([1.0, 0, 0, 0], dtype=torch.float64)
            sim.state = st
        out.append(((k + 1) * params.dt, *st[0, 0:3].tolist()))
        states.append(st[0].numpy().copy())
    policy.reset()
    return Flight(np.array(out), reference, params.dt * every, states=np.array(states), target=tuple(target))
