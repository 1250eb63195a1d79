"""A 2-D multimodal toy task for imitation: reach the goal around a round obstacle.

The point agent starts below a disk obstacle (radius 0.35 m at the origin) and must reach the
goal above it (0, 1) m. Passing left and right are equally good, so demonstrations are bimodal
and a policy that averages modes drives into the obstacle. Action: the target position (2,) m;
the agent moves toward it by at most ``max_step`` per step (position control). Observation:
agent position (2,) m. Reward: 1 - distance to goal / 2 (clipped at 0); success: within 0.1 m
of the goal; the episode terminates on success or on touching the obstacle. Starts are drawn
uniformly within ``start_spread`` (x, y) m of (0, -1) m: ±5 cm by default, as the demos'; a wider
box (e.g. ``(0.9, 0.3)``) asks a policy for starts its demos never covered. ``obstacle_center``
(x, y) m moves the obstacle (the origin by default, where the demos were recorded): at ``(0.3, 0)``
the right-hand path of the demos runs into it, a changed scene the demos do not show.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

GOAL = np.array([0.0, 1.0])
START = np.array([0.0, -1.0])
DEFAULT_OBSTACLE_CENTER = (0.0, 0.0)
DEFAULT_START_SPREAD = (0.05, 0.05)
OBSTACLE_RADIUS = 0.35
SUCCESS_RADIUS = 0.1


class ObstacleReachEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, max_steps: int = 60, max_step: float = 0.1, render_mode: str | None = None,
                 start_spread: tuple[float, float] = DEFAULT_START_SPREAD,
                 obstacle_center: tuple[float, float] = DEFAULT_OBSTACLE_CENTER):
        spread = np.asarray(start_spread, dtype=np.float64)
        if spread.shape != (2,) or not np.isfinite(spread).all() or (spread < 0).any():
            raise ValueError(f"start_spread must be two finite half-widths >= 0 (x, y) in m, got {start_spread}")
        center = np.asarray(obstacle_center, dtype=np.float64)
        if center.shape != (2,) or not np.isfinite(center).all():
            raise ValueError(f"obstacle_center must be a finite (x, y) in m, got {obstacle_center}")
        # the start box's corner nearest the obstacle must stay clear of it, and so must the goal
        nearest = np.clip(center, START - spread, START + spread)
        if np.linalg.norm(nearest - center) <= OBSTACLE_RADIUS:
            raise ValueError(f"start box {START.tolist()} ± {spread.tolist()} m reaches the obstacle at "
                             f"{center.tolist()} (radius {OBSTACLE_RADIUS} m)")
        if np.linalg.norm(GOAL - center) <= OBSTACLE_RADIUS + SUCCESS_RADIUS:
            raise ValueError(f"obstacle at {center.tolist()} covers the goal region around {GOAL.tolist()}")
        self.max_steps, self.max_step, self.render_mode = max_steps, max_step, render_mode
        self.start_spread, self.obstacle_center = spread, center
        self.observation_space = gym.spaces.Box(-1.5, 1.5, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.5, 1.5, (2,), np.float32)
        self.pos = START.copy()
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos = START + self.np_random.uniform(-self.start_spread, self.start_spread)
        self.t = 0
        return self.pos.astype(np.float32), {}

    def step(self, action):
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (2,) or not np.isfinite(a).all():
            raise ValueError(f"action must be a finite (2,) target position, got shape {a.shape}: {a}")
        delta = np.clip(a, -1.5, 1.5) - self.pos
        dist = np.linalg.norm(delta)
        self.pos = self.pos + (delta * min(1.0, self.max_step / dist) if dist > 0 else 0.0)
        self.t += 1
        goal_dist = float(np.linalg.norm(self.pos - GOAL))
        hit = bool(np.linalg.norm(self.pos - self.obstacle_center) < OBSTACLE_RADIUS)
        success = goal_dist < SUCCESS_RADIUS and not hit
        reward = 0.0 if hit else max(0.0, 1.0 - goal_dist / 2.0)
        info = {"is_success": success, "collision": hit}
        return self.pos.astype(np.float32), reward, success or hit, self.t >= self.max_steps, info

    def render(self) -> np.ndarray:
        """(128, 128, 3) uint8 top view: obstacle grey, goal green, agent blue."""
        n = 128
        ys, xs = np.mgrid[0:n, 0:n]
        x, y = (xs / (n - 1)) * 3 - 1.5, 1.5 - (ys / (n - 1)) * 3
        img = np.full((n, n, 3), 255, np.uint8)
        cx, cy = self.obstacle_center
        img[(x - cx) ** 2 + (y - cy) ** 2 < OBSTACLE_RADIUS ** 2] = (128, 128, 128)
        img[(x - GOAL[0]) ** 2 + (y - GOAL[1]) ** 2 < SUCCESS_RADIUS ** 2] = (0, 200, 0)
        img[(x - self.pos[0]) ** 2 + (y - self.pos[1]) ** 2 < 0.05 ** 2] = (0, 0, 255)
        return img


def expert_action(pos: np.ndarray, side: float, rng: np.random.Generator, noise: float = 0.01) -> np.ndarray:
    """The scripted expert: go to the waypoint beside the obstacle on ``side`` (+1 right, -1 left)
    until level with it, then to the goal; target one step ahead, plus Gaussian noise."""
    waypoint = np.array([side * 0.6, 0.0])
    target = waypoint if pos[1] < -0.05 else GOAL
    d = target - pos
    dist = np.linalg.norm(d)
    step = d * min(1.0, 0.1 / dist) if dist > 0 else d
    return (pos + step + rng.normal(0.0, noise, 2)).astype(np.float32)


def generate_demos(num_episodes: int, seed: int = 0, max_steps: int = 60) -> list[dict[str, np.ndarray]]:
    """Expert episodes, each side chosen at random: [{"obs": (T, 2), "action": (T, 2), "reward": (T,)}]."""
    rng = np.random.default_rng(seed)
    env = ObstacleReachEnv(max_steps=max_steps)
    episodes = []
    for i in range(num_episodes):
        obs, _ = env.reset(seed=seed * 100003 + i)
        side = rng.choice([-1.0, 1.0])
        rows = {"obs": [], "action": [], "reward": []}
        done = False
        while not done:
            a = expert_action(env.pos, side, rng)
            rows["obs"].append(obs)
            rows["action"].append(a)
            obs, r, term, trunc, _ = env.step(a)
            rows["reward"].append(r)
            done = term or trunc
        episodes.append({k: np.asarray(v, np.float32) for k, v in rows.items()})
    return episodes
