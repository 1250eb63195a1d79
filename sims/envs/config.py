"""Configs of the quadrotor tasks (mirrored by ``configs/task/*.yaml``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .observation import OBS_DIM

TASKS = ("hover", "waypoint", "figure_eight")
# What the observation's previous action (floats 18:22) holds; see QuadrotorTaskConfig.
PREVIOUS_ACTIONS = ("auto", "clipped_hover", "raw_motor_state")


def check_previous_action(value: str) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``PREVIOUS_ACTIONS``."""
    if value not in PREVIOUS_ACTIONS:
        raise ValueError(f"unknown previous_action {value!r}; choose one of {list(PREVIOUS_ACTIONS)}")


def _range(name: str, r, positive_low: bool = False) -> tuple[float, float]:
    """``r`` as a float pair ``(low, high)`` with ``0 <= low <= high`` (``0 < low`` if ``positive_low``)."""
    if len(r) != 2 or not 0 <= r[0] <= r[1] or (positive_low and r[0] <= 0):
        raise ValueError(f"{name} must be [low, high] with 0 {'<' if positive_low else '<='} low <= high, "
                         f"got {list(r)}")
    return float(r[0]), float(r[1])


@dataclass
class RewardConfig:
    """Per-step reward ``constant - scale * cost``, cost a weighted sum of squares:

    cost = position * |p - p_ref|^2 + position_abs * |p - p_ref| + orientation * (1 - q_w^2)
           + velocity * |v - v_ref|^2 + angular_velocity * |w|^2 + action * |a - a_hover|^2
           + action_rate * |a - a_previous|^2

    ``action_rate`` penalizes step-to-step changes of the motor commands: without it TD3 learns to
    chatter (commands alternating by ~1.8 at 50 Hz, averaged by the lagging motors), whose
    equilibrium drifts with the chatter and is centimetres off the reference.

    The squared position term's pull vanishes near the reference; ``position_abs`` (per m)
    keeps a constant pull there, which is what makes a learned hover precise to centimetres.

    On the step that terminates an episode the reward is ``-termination_penalty`` instead.
    Defaults follow RLtools l2f's squared reward (Learning to Fly in Seconds), with the
    action weight converted from throttle units (u in [0, 1]) to action units (a in [-1, 1]).
    """

    scale: float = 0.1
    constant: float = 1.1
    position: float = 10.0
    position_abs: float = 0.0
    orientation: float = 2.5
    velocity: float = 1.0
    angular_velocity: float = 0.0
    action: float = 0.5
    action_rate: float = 0.0
    termination_penalty: float = 0.0


@dataclass
class InitConfig:
    """Initial-state distribution around the reference at t = 0.

    Position uniform in a ball of ``position_radius`` m; orientation a rotation by an
    angle uniform in [0, ``angle_deg``] about a random axis; velocities uniform in balls;
    motors at the hover command when ``motors_at_hover`` else uniform in [0, 1].
    A fraction ``guidance`` of the episodes instead starts exactly at the reference, level and
    at rest (Learning to Fly's "guidance": the critic sees the goal state from the start).
    """

    position_radius: float = 0.5
    angle_deg: float = 30.0
    velocity: float = 0.0
    angular_velocity: float = 0.0
    motors_at_hover: bool = True
    guidance: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.guidance <= 1.0:
            raise ValueError(f"init.guidance is a fraction of episodes, got {self.guidance}; use a value in [0, 1]")


@dataclass
class TerminationConfig:
    """An episode terminates (crash) when the quad hits the floor (world z < ``floor_z``
    if ``floor``), leaves the bounds around its reference, or tilts more than ``tilt_deg`` (the
    angle between body up and world up; 180: never, as a safety layer's tilt limit would)."""

    floor: bool = True
    floor_z: float = 0.0
    position_error: float = 2.0  # m
    velocity: float = 10.0  # m/s
    angular_velocity: float = 35.0  # rad/s
    tilt_deg: float = 180.0


@dataclass
class FigureEightRandomization:
    """Per-episode figure-eight shapes (``figure_eight`` task): each reset draws an amplitude
    uniformly in ``amplitude`` (m) and a period uniformly in ``period`` (s) where given (null: the
    task's fixed value), and with ``random_phase`` a start phase uniform in [0, 2 pi). A fraction
    ``hover_fraction`` of the episodes gets amplitude 0 instead: a still reference, so a policy tuned on
    figure-eights keeps practising hover. Episodes start around the reference's position at t = 0, so a
    random phase does not start them off the path."""

    amplitude: tuple[float, float] | None = None
    period: tuple[float, float] | None = None
    random_phase: bool = False
    hover_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.hover_fraction <= 1.0:
            raise ValueError(f"figure_eight_randomization.hover_fraction is a fraction of episodes, got "
                             f"{self.hover_fraction}; use a value in [0, 1]")
        for name in ("amplitude", "period"):
            r = getattr(self, name)
            if r is not None:
                setattr(self, name, _range(f"figure_eight_randomization.{name}", r, positive_low=name == "period"))

    @property
    def enabled(self) -> bool:
        return self.amplitude is not None or self.period is not None or self.random_phase or self.hover_fraction > 0


@dataclass
class PushConfig:
    """Random pushes while flying (disturbance training, like legged gym's ``push_robots``).

    With probability ``probability`` an episode gets one horizontal push: a velocity change drawn
    uniformly in ``velocity`` [low, high] m/s, in a direction uniform in the horizontal plane, applied
    as the constant world-frame force ``m dv / duration`` N for ``duration`` s, starting at a time drawn
    uniformly in ``time`` [low, high] s after the reset. Probability 0 (the default) never pushes.
    """

    probability: float = 0.0
    velocity: tuple[float, float] = (0.5, 1.5)
    time: tuple[float, float] = (0.5, 3.0)
    duration: float = 0.1

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"push.probability is a fraction of episodes, got {self.probability}; "
                             "use a value in [0, 1]")
        if not self.duration > 0:
            raise ValueError(f"push.duration must be positive (s), got {self.duration}")
        self.velocity = _range("push.velocity", self.velocity)
        self.time = _range("push.time", self.time)


@dataclass
class QuadrotorTaskConfig:
    """A quadrotor task: what the reference is, how episodes start and end, the reward.

    The reference position is ``hover_position`` (world FLU, m) for ``hover``; a waypoint
    drawn uniformly in a cube of half-width ``waypoint_range`` around it for ``waypoint``;
    for ``figure_eight`` the lemniscate ``x = A sin(wt), y = A/2 sin(2wt)`` around it with
    ``A = figure_eight_amplitude`` and ``w = 2 pi / figure_eight_period`` (or, per episode, drawn by
    ``figure_eight_randomization``).
    ``action_history`` appends that many older actions (4 floats each, newest first, before the
    previous action's step) to the 22-float observation: motors lag, so an actor needs them to
    know what its motors are doing (as in Learning to Fly in Seconds).
    ``position_integral`` > 0 appends the integral of the position error (3 floats, world frame, m s): at step t
    ``I_t = clip(I_{t-1} + dt * e_{t-1}, +-position_integral)`` per axis, ``I_0 = 0`` at reset, ``e_{t-1}`` the
    position error ``p - p_ref`` of the observation the step's action was chosen on (obs[0:3] of obs_{t-1}). Integral
    action, so an actor can learn to settle on the reference and not beside it; as ``I_t`` depends only on earlier
    observations, the deployed actor integrates it itself (``policies.mlp.MLPConfig.position_integral``) and reads
    the 22 floats. 0 (the default): not observed.

    ``previous_action`` says what the observation's previous action (floats 18:22, and the action history)
    holds, in [-1, 1] motor-command units:

    - ``clipped_hover`` (robo's own SAC policies): the command the step applied, clipped to [-1, 1]; after a
      reset the hover command, whatever the motors are doing.
    - ``raw_motor_state`` (RAPTOR's and Learning to Fly's; RLtools l2f at rl-tools 48488c58 of 2025-08-31, the
      commit the ``l2f`` package pins): the policy's output as given, before the step clips it; after a reset each
      motor's state mapped to [-1, 1] (``2 u_m - 1``, which equals the hover command only when the motors start at
      hover). rl-tools clamps the observed value to [-1, 1] only from 88424229 (2026-01) on.
    - ``auto`` (the default): ``clipped_hover``, unless the code that flies a known policy picks the policy's
      own (``robo.evaluate.rollout`` picks ``raw_motor_state`` for RAPTOR-compatible policies, robo's
      foundation GRUs and RAPTOR's released one). Training never resolves it, so robo's policies train on
      ``clipped_hover``.

    The applied command, the reward and the dynamics are the same under both; only what the policy is told it
    did differs.
    """

    name: str = "hover"
    episode_seconds: float = 5.0
    hover_position: tuple[float, float, float] = (0.0, 0.0, 1.0)
    waypoint_range: float = 0.5
    figure_eight_amplitude: float = 1.0
    figure_eight_period: float = 6.0
    figure_eight_randomization: FigureEightRandomization = field(default_factory=FigureEightRandomization)
    push: PushConfig = field(default_factory=PushConfig)
    action_history: int = 0
    position_integral: float = 0.0
    previous_action: str = "auto"
    init: InitConfig = field(default_factory=InitConfig)
    termination: TerminationConfig = field(default_factory=TerminationConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)

    def __post_init__(self) -> None:
        if self.name not in TASKS:
            raise ValueError(f"unknown task {self.name!r}; choose one of {list(TASKS)}")
        if self.episode_seconds <= 0:
            raise ValueError(f"episode_seconds must be positive, got {self.episode_seconds}")
        check_previous_action(self.previous_action)
        if self.action_history < 0:
            raise ValueError(f"action_history must be >= 0, got {self.action_history}")
        if not self.position_integral >= 0:
            raise ValueError(f"position_integral must be >= 0 (m s; 0: not observed), got {self.position_integral}")
        if self.figure_eight_period <= 0:
            raise ValueError(f"figure_eight_period must be positive, got {self.figure_eight_period}")
        self.hover_position = tuple(float(x) for x in self.hover_position)
        if len(self.hover_position) != 3:
            raise ValueError(f"hover_position must have 3 coordinates, got {self.hover_position}")

    @property
    def actor_obs_dim(self) -> int:
        """The deployable observation's length: 22, the action history's 4 per action, the integral's 3."""
        return OBS_DIM + 4 * self.action_history + (3 if self.position_integral > 0 else 0)

    @classmethod
    def from_dict(cls, d: dict) -> "QuadrotorTaskConfig":
        """Build from a plain dict (e.g. a Hydra node), rejecting unknown keys by name."""
        return _from_dict(cls, dict(d))


def _from_dict(cls, d: dict, path: str = ""):
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ValueError(f"unknown config key(s) {[path + k for k in unknown]} for {cls.__name__}; "
                         f"known: {sorted(known)}")
    kwargs = {}
    for k, v in d.items():
        sub = {"init": InitConfig, "termination": TerminationConfig, "reward": RewardConfig,
               "figure_eight_randomization": FigureEightRandomization, "push": PushConfig}.get(k)
        kwargs[k] = _from_dict(sub, dict(v), f"{path}{k}.") if sub and cls is QuadrotorTaskConfig else v
    return cls(**kwargs)
