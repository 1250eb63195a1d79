"""robo's MuJoCo push-T matched to gym-pusht where it can be: ``PushTConfig(**GYM_PUSHT_MATCHED)``.

gym-pusht (``gym_pusht/envs/pusht.py``, pymunk) in robo's frame (``sims.pusht.gym_pusht``: its 512 px window
turned by 180 degrees, origin on the goal T's area centroid, 1 px = 1 mm), and what the matched variant sets:

- **walls**: segments at 5 and 506 px of radius 2, inner faces at 7 and 504 px: x in [-0.277, 0.220] m,
  y in [-0.219, 0.278] m (``WALLS``); actions and observations range over the window [0, 512] px (``WINDOW``).
- **image**: gym-pusht's drawing (``render.render_gym_pusht_view``) of its window, mirrored left to right
  against robo's view.
- **starts**: gym-pusht's reset draw (``gym_pusht_start``).
- **pusher**: a kinematic disc of radius 15 px driven by a PD servo with kp 100 /s^2, kv 20 /s and no force
  limit; contacts never slow it. MuJoCo's pusher is a body on slide joints, so it is made 100 x heavier than the
  block with the same per-mass gains: the block slows it by about 1 %.
- **block**: mass 1, moment 3000 px^2 about its centre of gravity, which gym-pusht puts at the mean of its two
  shapes' centroids, (0, 45) px from the bar's outer edge, 4.3 mm from the T's area centroid towards the stem
  (``COG_BODY_PX``). No floor friction; the space's damping 0 zeroes the block's velocity at every 10 ms step,
  so it moves only while it is pushed (``block_velocity_reset``).
- **contacts**: pymunk's shapes default to friction 0 and elasticity 0 (``body.friction = 1`` in gym-pusht sets
  an unused attribute of the body), so pusher-block and block-wall contacts are frictionless (MuJoCo condim 1).

What MuJoCo cannot match is documented in docs/guide/imitation.md (pymunk's sequential-impulse contact solver
with its slop and bias against MuJoCo's soft contacts; the kinematic pusher; the 10 ms Euler servo against
MuJoCo's 2 ms steps).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import gymnasium as gym
import numpy as np

from . import ENV_ID
from .config import PushTConfig
from .demos import Episode, kept_rollouts
from .gym_pusht import CENTROID_BODY_PX, COG_BODY_PX, PX, WALLS, WINDOW, _rot, to_robo_state
from .gym_pusht_expert import GYM_PUSHT_EXPERT, GymPushTExpert

BLOCK_MASS = 1.0          # kg (gym-pusht: 1)
AGENT_MASS = 100.0        # kg, heavy enough to be nearly kinematic against the block
GYM_KP, GYM_KV, GYM_DT = 100.0, 20.0, 0.01  # 1/s^2, 1/s, s: gym-pusht's PD servo per unit mass and its step
# MuJoCo's implicitfast step of h = GYM_DT, v' = (v + h kp' (a - x)) / (1 + h kv'), x' = x + h v', is gym-pusht's
# semi-implicit Euler step v' = v + h (kp (a - x) - kv v), x' = x + h v' exactly when 1 + h kv' = 1 / (1 - h kv)
# and kp' = kp / (1 - h kv): kp' = 125 /s^2, kv' = 25 /s.
SERVO_KP = GYM_KP / (1.0 - GYM_DT * GYM_KV)
SERVO_KV = (1.0 / (1.0 - GYM_DT * GYM_KV) - 1.0) / GYM_DT


def _box(low: np.ndarray, high: np.ndarray) -> list[float]:
    """(x_min, x_max, y_min, y_max) m, rounded to 1 um."""
    return [round(float(v), 6) for v in (low[0], high[0], low[1], high[1])]


GYM_PUSHT_MATCHED: dict = {
    "walls": _box(*WALLS),
    "window": _box(*WINDOW),
    "image_flip_x": True,
    "image_style": "gym_pusht",
    "start": "gym_pusht",
    "agent_radius": 0.015,
    "agent_mass": AGENT_MASS,
    "agent_kp": round(SERVO_KP * AGENT_MASS, 6),
    "agent_kv": round(SERVO_KV * AGENT_MASS, 6),
    "agent_max_force": 1.0e6,
    "block_mass": BLOCK_MASS,
    "block_com": [0.0, round(float(-(COG_BODY_PX - CENTROID_BODY_PX)[1] * PX), 7)],  # robo's body frame
    "block_inertia": 3000.0 * PX**2 * BLOCK_MASS,
    "block_friction": 0.0,
    "block_damping": 0.0,
    "contact_friction": 0.0,
    "block_velocity_reset": GYM_DT,
    "timestep": GYM_DT,
}


def gym_pusht_start(rng: np.random.Generator) -> np.ndarray:
    """gym-pusht's reset draw from ``rng`` (its ``np_random``: the same calls, so the same seed gives the same
    start) as robo's state (5,) [agent x, y, block x, y, yaw] (m, rad). gym-pusht places the unturned block's
    body origin at the drawn point and then turns it about its centre of gravity."""
    draw = np.array([rng.integers(50, 450), rng.integers(50, 450), rng.integers(100, 400), rng.integers(100, 400),
                     rng.uniform(-np.pi, np.pi)])
    angle = float(draw[4])
    cog = draw[2:4] + COG_BODY_PX
    origin = cog - _rot(angle) @ COG_BODY_PX
    return to_robo_state(draw[:2], origin, angle)


def matched_config(overrides: dict | None = None) -> PushTConfig:
    """``PushTConfig`` of the matched variant, with ``overrides`` (field -> value) on top."""
    return PushTConfig.from_dict({**GYM_PUSHT_MATCHED, **(overrides or {})})


def iter_demos(n: int, seed: int = 0, obs_type: str = "state", keep_failures: bool = False,
               max_attempts: int | None = None, expert: dict | None = None, env: dict | None = None
               ) -> Iterator[tuple[Episode, int]]:
    """Yield ``n`` (episode, attempt index) pairs of the gym-pusht adapted expert (``GymPushTExpert``, whose
    walls, centre of gravity and servo are the matched variant's) in robo's push-T matched to gym-pusht;
    failures are skipped unless ``keep_failures``. ``env``: the task's ``PushTConfig`` fields (default
    ``GYM_PUSHT_MATCHED``); ``expert``: ``ExpertConfig`` overrides of ``GYM_PUSHT_EXPERT``. Attempt i resets
    with seed ``seed + i`` (gym-pusht's start i) and seeds the expert from ``(seed, i)``, as
    ``sims.pusht.demos.iter_demos``. Raises RuntimeError after ``max_attempts`` (default 2n + 10)."""
    if n < 1:
        raise ValueError(f"need n >= 1 episodes, got {n}")
    if obs_type not in ("state", "image"):
        raise ValueError(f"obs_type={obs_type!r}; choose 'state' or 'image'")
    e = gym.make(ENV_ID, obs_type="state" if obs_type == "state" else "pixels_agent_pos", render_mode=None,
                 config=matched_config() if env is None else PushTConfig.from_dict(env))
    ex = GymPushTExpert(replace(GYM_PUSHT_EXPERT, **(expert or {})))
    yield from kept_rollouts(e, ex, n, seed, keep_failures, max_attempts, who="the gym-pusht expert")


def generate_demos(n: int, seed: int = 0, obs_type: str = "state", keep_failures: bool = False,
                   **kwargs) -> list[Episode]:
    """``n`` expert episodes in the matched variant (see ``iter_demos``): the ``demo_generator`` of
    ``configs/task/pusht_matched*.yaml``; ``obs_type``: ``"state"`` or ``"image"``."""
    return [ep for ep, _ in iter_demos(n, seed, obs_type, keep_failures, **kwargs)]
