"""Fine-tuning through Betaflight's firmware (``robo finetune real_robot=betaflight_sitl``).

The robot is Betaflight's SITL firmware with the policy built in (``hardware.export.betaflight_build``, lockstep,
the firmware's attitude estimate and gyro in the observation), flying robo's physics of a quadrotor whose mass
the learner does not know. The firmware cannot take motor commands from outside while armed, so the actor flies
*inside* it, as it would on a flight controller: every round the learner's current actor (the twin gate's last
admitted one) is exported to C with the base policy (``hardware.export.residual_c``: ``clip(base + scale * u)``,
the SAC actor's own Gaussian drawn by the C PRNG, a fresh stream at every arming), built into the firmware, and
flown for ``round_steps`` steps. The firmware logs every policy step (``[robo_step]``: the observation it made and
the action it took); the transitions the learner gets are read from that log:

    obs_k, u_k = clip((a_k - base(obs_k)) / scale, -1, 1), reward(obs_{k+1}, a_k, a_{k-1}), obs_{k+1}

(the base recomputed in torch on the logged observations: the exported C matches it within 1e-6). Each flight
starts hand-placed: the runner holds the vehicle still in the air, motors at the hover command, until the first
motor command, as the stand-in puts its vehicle back; the episode is ``episode_steps`` long. A safety monitor reads the log as
it grows and disarms on a geofence, tilt or body-rate violation (``SafetyConfig``'s limits, on what the firmware
reports): a safety fault, which ends the episode. The identification flight is the identify policy built in the
same way (a zero residual with Gaussian dither), its log replayed through the digital twin.

What the learner, the twin pre-training, the gate and the final twin ranking do is ``robo.real.finetune``'s, the
same code as the stand-in loop.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hardware.drivers.base import RobotError
from hardware.drivers.betaflight_setup import SetupConfig, disable_runaway_takeoff, wait_ready
from hardware.export.betaflight_build import build_onboard_sitl, onboard_steps
from hardware.export.manifest import weights_sha256, write_manifest
from hardware.export.residual_c import export_residual_c
from hardware.safety import SafetyConfig
from robo.deployment import deployment_manifest
from robo.onboard import connect_provisioned, onboard_settings
from robo.real.finetune import _gate_check, _Learner, _sync
from robo.real.learner import LearnerConfig, build_sac
from sims.envs.config import RewardConfig
from sims.envs.quadrotor_env import make_robot
from sims.envs.task import quadrotor_reward
from sims.quadrotor import QuadrotorParams
from sims.twin import DigitalTwin, TwinConfig, measurement
from sims.vehicles import betaflight_firmware as bf

log = logging.getLogger(__name__)
IDENTIFY_DITHER = 0.05  # std of the identification flight's action noise, as robo.twin.pretrain.identify's
STALL_S = 20.0  # wall s without a new policy step in the log: the firmware stopped flying the policy


@dataclass
class FirmwareEpisode:
    """One flight inside the firmware: ``obs`` (T, 22) and ``actions`` (T, 4) of its policy steps (the log), the
    ``start`` (3,) m, the safety ``fault`` that ended it (None: none) and the wall ``seconds`` it took."""

    obs: np.ndarray
    actions: np.ndarray
    start: np.ndarray
    fault: str | None = None
    seconds: float = 0.0

    def errors(self) -> np.ndarray:
        """Distance (T,) m from the reference at each step (obs 0:3: the simulator's position packet minus the
        target, double precision in the firmware)."""
        return np.linalg.norm(self.obs[:, 0:3], axis=1)

    def metrics(self) -> dict:
        """``robo.real.finetune.fly_episode``'s: mean and final (last 10 %) error."""
        e = self.errors()
        if len(e) == 0:
            return {"mean_error": float("nan"), "final_error": float("nan"), "steps": 0, "faults": int(bool(self.fault))}
        return {"mean_error": float(e.mean()), "final_error": float(e[-max(1, len(e) // 10):].mean()),
                "steps": len(e) - 1, "faults": int(bool(self.fault))}


def violation(obs: np.ndarray, target, safety: SafetyConfig) -> str | None:
    """The first limit of ``safety`` that observation ``obs`` (22,) breaks (geofence, tilt, body rate, a non-finite
    value), as one phrase; None when it breaks none."""
    if not np.isfinite(obs).all():
        return "non-finite observation"
    p = obs[0:3] + np.asarray(target, dtype=np.float64)
    if (p < np.asarray(safety.geofence_min)).any() or (p > np.asarray(safety.geofence_max)).any():
        return f"geofence: position {np.round(p, 2).tolist()} m"
    tilt = float(np.degrees(np.arccos(np.clip(obs[11], -1.0, 1.0))))
    if tilt > safety.max_tilt_deg:
        return f"tilt {tilt:.0f} deg > {safety.max_tilt_deg:g}"
    rate = float(np.linalg.norm(obs[15:18]))
    if rate > safety.max_body_rate:
        return f"body rate {rate:.1f} rad/s > {safety.max_body_rate:g}"
    return None


def quaternion_from_rotation(r: np.ndarray) -> np.ndarray:
    """Row-major rotation matrix (9,) -> unit quaternion (4,) w, x, y, z (w >= 0)."""
    m = np.asarray(r, dtype=np.float64).reshape(3, 3)
    t = np.trace(m)
    if t > 0:
        s = 2.0 * np.sqrt(1.0 + t)
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(max(1.0 + m[i, i] - m[j, j] - m[k, k], 1e-12))
        q = [0.0, 0.0, 0.0, 0.0]
        q[0] = (m[k, j] - m[j, k]) / s
        q[1 + i], q[1 + j], q[1 + k] = 0.25 * s, (m[j, i] + m[i, j]) / s, (m[k, i] + m[i, k]) / s
    q = np.asarray(q)
    q = q / np.linalg.norm(q)
    return -q if q[0] < 0 else q


class OnboardFlights:
    """One SITL process of an onboard build flying ``params`` (its ``dt`` the physics step) in lockstep: flights
    from hand-placed starts, each after putting the vehicle back (``fly``). Use as a context manager."""

    def __init__(self, binary: Path, params: QuadrotorParams, run_dir: Path, target, safety: SafetyConfig):
        self.binary, self.params, self.run_dir = Path(binary), params, Path(run_dir)
        self.target, self.safety = tuple(float(v) for v in target), safety
        self.fw = self.robot = None

    def __enter__(self) -> "OnboardFlights":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.fw = bf.BetaflightFirmware(self.params, run_dir=self.run_dir, binary=self.binary, lockstep=True).start()
        try:
            self.robot = connect_provisioned(self.fw, SetupConfig(failsafe_delay=0.5, failsafe_procedure="DROP"))
            wait_ready(self.robot, timeout=60.0)
            disable_runaway_takeoff(self.robot)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.robot is not None:
            self.robot.close()
        if self.fw is not None:
            self.fw.close()
        self.fw = self.robot = None

    def _settle(self, timeout: float = 20.0) -> None:
        """Wait until the firmware's attitude estimate is level (after the vehicle was put back) and 0.3 s of sim
        time have passed."""
        t0, deadline = self.fw.snapshot()["time"], time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.robot.read_state()
            q = None if s is None else np.asarray(s.quaternion)
            if self.fw.snapshot()["time"] - t0 > 0.3 and q is not None and 1 - 2 * (q[1] ** 2 + q[2] ** 2) > 0.9986:
                return  # within 3 deg of level
            time.sleep(0.02)
        raise RobotError(f"the firmware's attitude did not settle level within {timeout:g} s after the reset")

    def _until_stopped(self, timeout: float = 10.0) -> None:
        """Wait until the firmware has stopped the motors (the disarm took effect), so the next hold holds."""
        deadline = time.monotonic() + timeout
        while self.fw.snapshot()["motors"].any():
            if time.monotonic() > deadline:
                raise RobotError(f"the firmware still spins its motors {timeout:g} s after the disarm")
            time.sleep(0.01)

    def fly(self, start, steps: int) -> FirmwareEpisode:
        """Hold the vehicle still at ``start`` (world FLU m, in the air: a hand-placed start, the motors' state at
        the hover command as robo's tasks and the stand-in start), arm, let go at the first motor command, and read
        ``steps`` policy steps from the firmware's log (fewer when the safety monitor disarms on a violation);
        disarm."""
        t_wall = time.monotonic()
        self.fw.reset(tuple(start), held=True, hover_motors=True)
        self._settle()
        log_path = self.run_dir / "sitl.log"
        offset, pending = log_path.stat().st_size, ""
        obs, actions, fault = [], [], None
        self.robot.arm(timeout=3.0)
        last = time.monotonic()
        try:
            while len(obs) < steps and fault is None:
                time.sleep(0.02)
                with open(log_path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read().decode("ascii", "replace")
                offset += len(chunk.encode("ascii", "replace"))
                pending += chunk
                complete, pending = pending[:pending.rfind("\n") + 1], pending[pending.rfind("\n") + 1:]
                for k, o, a in onboard_steps(complete):
                    if k != len(obs):
                        raise RobotError(f"the firmware logged policy step {k} where {len(obs)} was next: a missing "
                                         f"line in {log_path}")
                    obs.append(o)
                    actions.append(a)
                    fault = violation(np.asarray(o), self.target, self.safety)
                    if fault is not None or len(obs) >= steps:
                        break
                if complete:
                    last = time.monotonic()
                elif time.monotonic() - last > STALL_S:
                    state = self.robot.read_state()
                    if state is not None and not state.armed:
                        fault = "disarmed by the firmware"
                        break
                    raise RobotError(f"the firmware logged no policy step in {STALL_S:g} s; see {log_path}")
        finally:
            self.robot.disarm()
            self._until_stopped()
        return FirmwareEpisode(np.asarray(obs, dtype=np.float64).reshape(-1, 22),
                               np.asarray(actions, dtype=np.float64).reshape(-1, 4), np.asarray(start, dtype=float),
                               fault, time.monotonic() - t_wall)


def zero_actor(config: LearnerConfig, log_std: float | None = None):
    """A SAC actor whose mean residual is 0 (the base alone); ``log_std`` sets its Gaussian (a dither)."""
    actor = build_sac(dataclasses.replace(config, device="cpu", twin_gate=None)).actor
    if log_std is not None:
        with torch.no_grad():
            actor.log_std.bias.fill_(float(log_std))
    return actor.cpu()


def build_in_firmware(base, actor, scale: float, directory: Path, params: QuadrotorParams, nominal: QuadrotorParams,
                      target, *, explore: bool, seed: int, base_path: str | None) -> Path:
    """Export ``clip(base + scale * u)`` (``actor``'s u) with its manifest into ``directory`` and build the onboard
    SITL with it, logging every step; returns the binary. The first previous action is the ``nominal`` robot's
    hover command (what the learner knows of the robot; the flights start hand-held with the motors at hover, for
    ``raw_motor_state`` too), the loop the physics step of ``params``."""
    sources = export_residual_c(base, actor, scale, directory, explore=explore, seed=seed)
    manifest = deployment_manifest(base, "c", sorted(sources.files), base_path)
    weights = weights_sha256(torch.nn.ModuleDict({"actor": actor, "base": getattr(base, "model")}))
    manifest = dataclasses.replace(manifest, policy_kind=f"residual({manifest.policy_kind})", weights_sha256=weights)
    write_manifest(directory, manifest)
    settings = dataclasses.replace(onboard_settings(nominal, manifest, "hover", tuple(target), start="hand"),
                                   loop_hz=1.0 / params.dt, log_steps=True)
    return build_onboard_sitl(directory, settings)


@torch.no_grad()
def base_actions(base, obs: np.ndarray) -> np.ndarray:
    """The base policy's actions (T, 4) on a flight's observations (T, 22), its state carried from a reset."""
    base.reset()
    out = [np.asarray(torch.as_tensor(base.act(torch.as_tensor(o[None], dtype=torch.float32))), np.float64)[0]
           for o in obs]
    base.reset()
    return np.asarray(out).reshape(-1, 4)


def episode_transitions(ep: FirmwareEpisode, base, scale: float, hover_action: float,
                        reward: RewardConfig) -> list[tuple]:
    """The learner's (obs, u, reward, next_obs, terminated) of the episode's steps (see the module's docstring);
    the last one terminated (with ``reward.termination_penalty``) on a safety fault."""
    obs, a = ep.obs, np.clip(ep.actions, -1.0, 1.0)
    if len(obs) < 2:
        return []
    u = np.clip((a - base_actions(base, obs)) / scale, -1.0, 1.0)
    t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64))[None]  # noqa: E731
    out = []
    for k in range(len(obs) - 1):
        nxt = obs[k + 1]
        terminated = ep.fault is not None and k + 1 == len(obs) - 1
        q_w = quaternion_from_rotation(nxt[3:12])[0]
        r = quadrotor_reward(t(nxt[0:3]), t(q_w), t(nxt[12:15]), t(nxt[15:18]), t(a[k]), t(hover_action), reward,
                             t(a[k - 1]) if k > 0 else None)
        out.append((obs[k].astype(np.float32), u[k].astype(np.float32),
                    -reward.termination_penalty if terminated else float(r[0]), nxt.astype(np.float32), terminated))
    return out


def identify_from_log(ep: FirmwareEpisode, nominal: str | dict, target, min_height: float = 0.3) -> DigitalTwin:
    """The twin (``nominal`` robot) fed a firmware flight's log offline, as ``robo.twin.ShadowRobot`` feeds it live:
    at each step above ``min_height`` m (the twin has no ground), ``predict`` with the command of the step before,
    ``correct`` with the measurement (position and velocity from the simulator's packet, the firmware's attitude
    estimate and gyro)."""
    twin = DigitalTwin(TwinConfig(robot=nominal))
    started, target = False, np.asarray(target, dtype=np.float64)
    for k, o in enumerate(ep.obs):
        p = o[0:3] + target
        if p[2] <= min_height:
            started = False
            continue
        z = measurement(p, quaternion_from_rotation(o[3:12]), o[12:15], o[15:18])
        if not started or k == 0:
            twin.reset(z)
            started = True
            continue
        twin.predict(np.clip(ep.actions[k - 1], -1.0, 1.0))
        twin.correct(z)
    if not started:
        raise RobotError("the identification flight never rose above "
                         f"{min_height:g} m: nothing for the twin to identify from")
    return twin


def truth_params(rr: dict) -> QuadrotorParams:
    """The firmware's physics: ``real_robot.robot`` (hidden from the learner) stepped at ``real_robot.loop_hz``."""
    return dataclasses.replace(make_robot(rr["robot"]), dt=1.0 / float(rr["loop_hz"]))


def write_episode(path: Path, ep: FirmwareEpisode) -> None:
    """One flight's log as JSON lines of (obs, action), plus its start and fault, for the run folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps({"start": ep.start.tolist(), "fault": ep.fault, "seconds": ep.seconds}) + "\n")
        for o, a in zip(ep.obs, ep.actions):
            f.write(json.dumps({"obs": np.round(o, 6).tolist(), "action": np.round(a, 6).tolist()}) + "\n")


@dataclass
class FirmwareLoop:
    """What the rounds need: the ``base`` policy (``base_path``: its checkpoint folder or a shipped name), the
    residual ``scale``, the firmware's physics ``truth`` (hidden from the learner), the ``nominal`` robot (the
    first previous action's hover command), the reward's ``hover_action``, the ``target`` (m), the ``safety``
    limits, and where the rounds go (``run_dir/rounds/<k>``)."""

    base: object
    base_path: str | None
    scale: float
    truth: QuadrotorParams
    nominal: QuadrotorParams
    hover_action: float
    target: tuple[float, float, float]
    safety: SafetyConfig
    run_dir: Path

    def build(self, actor, name: str, explore: bool, seed: int = 0, base=None, base_path=None,
              scale: float | None = None) -> Path:
        return build_in_firmware(base or self.base, actor, scale or self.scale, self.run_dir / name / "export",
                                 self.truth, self.nominal, self.target, explore=explore, seed=seed,
                                 base_path=base_path if base is not None else self.base_path)

    def flights(self, binary: Path, name: str) -> OnboardFlights:
        return OnboardFlights(binary, self.truth, self.run_dir / name, self.target, self.safety)

    def evaluate(self, actor, name: str, starts: np.ndarray, steps: int) -> list[dict]:
        """Deterministic flights (``actor`` None: the base alone) from ``starts`` (n, 3), each ``steps`` steps."""
        binary = self.build(actor if actor is not None else zero_actor(LearnerConfig()), name, explore=False)
        out = []
        with self.flights(binary, name) as flights:
            for i, start in enumerate(starts):
                ep = flights.fly(start, steps + 1)
                write_episode(self.run_dir / name / f"episode_{i:03d}.jsonl", ep)
                out.append(ep.metrics())
        return out

    def identify(self, pilot, pilot_path: str | None, nominal: str | dict, start, steps: int, seed: int) -> DigitalTwin:
        """Fly ``pilot`` (dithered, ``IDENTIFY_DITHER``) inside the firmware for ``steps`` steps from ``start``,
        then replay its log through the twin (``identify_from_log``)."""
        # u = tanh(0.5 eps) scaled by 2 x dither: about N(0, dither) for the small draws that dominate
        dither = zero_actor(LearnerConfig(), log_std=float(np.log(0.5)))
        binary = self.build(dither, "identification", explore=True, seed=seed, base=pilot, base_path=pilot_path,
                            scale=2 * IDENTIFY_DITHER)
        with self.flights(binary, "identification") as flights:
            ep = flights.fly(start, steps + 1)
        write_episode(self.run_dir / "identification" / "episode_000.jsonl", ep)
        if ep.fault:
            raise RobotError(f"the identification flight hit a safety fault ({ep.fault}); see "
                             f"{self.run_dir / 'identification'}")
        return identify_from_log(ep, nominal, self.target)


def run_rounds(loop: FirmwareLoop, folder: Path, config, starts, episode_steps: int, round_steps: int,
               wait_s: float = 900.0) -> dict:
    """``robo.real.finetune.finetune`` with the actor inside the firmware: rounds of ``round_steps`` real steps,
    each flying the learner's newest admitted actor (built with exploration) from ``starts(episode)`` for
    episodes of ``episode_steps``; the transitions go to the learner (its process, checkpoints, restarts and gate
    are ``finetune``'s), which trains on a round before the next is built. ``config``: a ``FinetuneConfig``."""
    lc = LearnerConfig(**{"seed": config.seed, **config.learner})
    learner = _Learner(Path(folder), lc)
    step = learner.start(wait=config.start_timeout)
    actor = zero_actor(lc)
    pending: dict[int, tuple] = {}
    summary = {"episodes": 0, "interventions": 0, "safety_faults": 0, "returns": [], "start_step": step, "gate": [],
               "rounds": 0, "build_s": 0.0, "flight_s": 0.0}
    try:
        while step < config.total_steps:
            _sync(learner, actor, pending, config, summary)
            name = f"rounds/{summary['rounds']:03d}"
            t0 = time.monotonic()
            binary = loop.build(actor, name, explore=True, seed=config.seed * 1000 + summary["rounds"])
            summary["build_s"] += time.monotonic() - t0
            end = min(step + round_steps, config.total_steps)
            with loop.flights(binary, name) as flights:
                while step < end:
                    ep = flights.fly(starts(summary["episodes"]), min(episode_steps, end - step) + 1)
                    summary["flight_s"] += ep.seconds
                    ret = 0.0
                    for o, u, r, nxt, terminated in episode_transitions(ep, loop.base, loop.scale,
                                                                        loop.hover_action, RewardConfig()):
                        msg = ("t", step, o, u, r, nxt, terminated, False)
                        pending[step] = msg
                        learner.transitions.put(msg)
                        step, ret = step + 1, ret + r
                    summary["episodes"] += 1
                    summary["safety_faults"] += int(ep.fault is not None)
                    summary["returns"].append(ret)
                    if ep.fault:
                        log.warning("episode %d: safety fault (%s)", summary["episodes"], ep.fault)
                    _sync(learner, actor, pending, config, summary)
            summary["rounds"] += 1
            log.info("round %d: %d real steps, %d safety faults so far", summary["rounds"], step,
                     summary["safety_faults"])
            _until_trained(learner, actor, pending, config, summary, step, lc.checkpoint_every, wait_s)
        summary.update(steps=step, held=learner.stop(config.start_timeout, lambda m: _gate_check(m, summary)),
                       learner_restarts=learner.restarts)
    except BaseException:
        learner.kill()
        raise
    return summary


def _until_trained(learner, actor, pending: dict, config, summary: dict, step: int, every: int, wait_s: float) -> None:
    """Wait until the learner has checkpointed every transition up to the last multiple of ``every`` below
    ``step`` (it trained on them), taking its messages as ``_sync`` does."""
    deadline = time.monotonic() + wait_s
    while any(k < step - step % every for k in pending):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the learner did not take in the round's transitions in {wait_s:g} s; see "
                               f"{learner.directory}")
        time.sleep(0.2)
        _sync(learner, actor, pending, config, summary)
