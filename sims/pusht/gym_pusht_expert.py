"""robo's scripted push-T expert (``sims.pusht.expert``) adapted to gym-pusht (``sims.pusht.gym_pusht``).

The planner is robo's; three things differ in gym-pusht and are modelled here:

- **Walls**: gym-pusht's workspace is not centred on the goal (``gym_pusht.WALLS``). The expert plans in a frame
  shifted to the walls' centre, where robo's planner sees a square of half size ``WALL_HALF_SIZE``.
- **Block dynamics**: gym-pusht zeroes the block's velocity every 10 ms step (space damping 0) and its contacts
  are frictionless, so a push of impulse J along the inward normal n at body point r moves the block by
  ``(n, (r - cog) x n * m / I) J / m``: the lever is taken about the centre of gravity ``COG_BODY_PX`` with
  ``c^2 = I / m`` (3000 px^2), instead of robo's area centroid and friction radius.
- **Servo lag**: gym-pusht's PD servo (kp 100 /s^2, kv 20 /s, 10 ms Euler steps) moves the pusher only ~30 % of
  the way to its target in one 0.1 s control period. Being kinematic, the pusher follows the servo exactly
  (contacts do not move it), so the expert predicts its velocity and commands the target that lands it where
  robo's planner wants it at the end of the period (``ServoLead``).

    expert = GymPushTExpert(seed=0)
    obs, info = env.reset(seed=0); expert.reset()
    action = expert.act(obs)          # obs: (5,) robo state (m, rad), action: (2,) pusher target, m
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .config import PushTConfig
from .expert import ExpertConfig, PushTExpert
from .gym_pusht import CENTROID_BODY_PX, COG_BODY_PX, PX, WALLS, WINDOW

WALL_CENTER = (WALLS[0] + WALLS[1]) / 2          # (2,) m, the walls' centre in robo's frame
WALL_HALF_SIZE = float((WALLS[1] - WALLS[0])[0] / 2)  # m (the walls are square: 497 px)
COG_BODY = -(COG_BODY_PX - CENTROID_BODY_PX) * PX   # (2,) m, centre of gravity in robo's body frame
GYRATION_SQ = 3000.0 * PX**2                       # m^2, I / m of gym-pusht's block (moment 3000, mass 1, px)

# robo's ExpertConfig with the settings measured best in gym-pusht (benchmarks/gym_pusht.py).
GYM_PUSHT_EXPERT = replace(ExpertConfig(), push_bias=0.0)


@dataclass(frozen=True)
class ServoLead:
    """gym-pusht's pusher servo over one control period, exactly: per axis
    ``[x, v]' = phi @ [x, v] + gamma * a`` (x in m, v in m/s, a the commanded target, m)."""

    kp: float = 100.0     # 1/s^2
    kv: float = 20.0      # 1/s
    dt: float = 0.01      # s, gym-pusht's physics step
    substeps: int = 10    # physics steps per control step

    def matrices(self) -> tuple[np.ndarray, np.ndarray]:
        """(phi (2, 2), gamma (2,)): semi-implicit Euler, velocity first, as pymunk integrates a kinematic body."""
        kp, kv, dt = self.kp, self.kv, self.dt
        a = np.array([[1 - kp * dt * dt, dt * (1 - kv * dt)], [-kp * dt, 1 - kv * dt]])
        b = np.array([kp * dt * dt, kp * dt])
        phi, gamma = np.eye(2), np.zeros(2)
        for _ in range(self.substeps):
            phi, gamma = a @ phi, a @ gamma + b
        return phi, gamma


class GymPushTExpert(PushTExpert):
    """robo's expert for ``GymPushTEnv`` state observations (5,) -> actions (2,) (pusher target, m, robo frame)."""

    def __init__(self, config: ExpertConfig | None = None, seed: int | None = None, servo: ServoLead | None = None):
        super().__init__(config or GYM_PUSHT_EXPERT, PushTConfig(half_size=WALL_HALF_SIZE), seed)
        self.offset = WALL_CENTER.copy()  # (2,) m: robo frame - offset = the planner's wall-centred frame
        self.goal = self.goal - np.array([*self.offset, 0.0])
        r = self.points - COG_BODY
        self.lever = (r[:, 0] * self.normals[:, 1] - r[:, 1] * self.normals[:, 0]) / GYRATION_SQ
        self.phi, self.gamma = (servo or ServoLead()).matrices()

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.velocity = np.zeros(2)  # m/s, the pusher's predicted velocity (gym-pusht starts it at rest)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """obs: (5,) robo state [agent x, y, block x, y, yaw] -> action (2,) float32 pusher target (m)."""
        obs = np.asarray(obs, dtype=float)
        if obs.shape != (5,):
            raise ValueError(f"obs has shape {obs.shape}, expected (5,) [agent x, y, block x, y, yaw]")
        shift = np.array([*self.offset, *self.offset, 0.0])
        target = super().act(obs - shift).astype(float) + self.offset
        x = obs[:2]
        (p11, p12), (p21, p22) = self.phi
        command = (target - p11 * x - p12 * self.velocity) / self.gamma[0]
        command = np.clip(command, WINDOW[0], WINDOW[1])
        self.velocity = p21 * x + p22 * self.velocity + self.gamma[1] * command
        return command.astype(np.float32)
