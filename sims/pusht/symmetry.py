"""Push-T's mirror symmetry: the reflection about the goal T's axis maps the task onto itself.

The T is symmetric about its stem axis (body +y), so reflecting the whole scene about the line
through the goal's centroid along that axis leaves the goal where it is. The dynamics are
unchanged when the workspace square maps onto itself too (goal at the centre, axis at a multiple
of 45 degrees, as in the default goal yaw pi/4) and the table friction, applied per slide joint,
only swaps its x and y axes (a multiple of 90 degrees between them). A reflected demo is then a
demo of the same task: a free second copy of every episode, with its way around the block
mirrored.

For a line through c with unit direction d, points map as ``p' = c + (2 d d^T - I)(p - c)``; a
pose's yaw as ``yaw' = 2 * goal_yaw - yaw`` (the T's axis is reflected and the T equals its own
mirror image).
"""

from __future__ import annotations

import math

import numpy as np

from .config import PushTConfig
from .geometry import wrap_angle


class GoalMirror:
    """The reflection about the goal T's axis, for state observations and pusher targets.

    state: (..., 5) [agent x, y (m), block x, y (m), block yaw (rad)]; action: (..., 2) pusher
    target (x, y) in m. Both maps are their own inverse. ``config``: the env's (a ``PushTConfig`` or its
    dict, as ``PushTEnv`` takes), whose goal sets the mirror line.
    """

    def __init__(self, config: PushTConfig | dict | None = None):
        cfg = config if isinstance(config, PushTConfig) else PushTConfig.from_dict(config)
        eighths = cfg.goal_yaw / (math.pi / 4)
        if abs(cfg.goal_x) > 1e-9 or abs(cfg.goal_y) > 1e-9 or abs(eighths - round(eighths)) > 1e-6:
            raise ValueError("the workspace is mirror-symmetric about the goal's axis only for a goal at the centre "
                             f"with yaw a multiple of pi/4; got goal ({cfg.goal_x}, {cfg.goal_y}, {cfg.goal_yaw})")
        axis = np.array([-math.sin(cfg.goal_yaw), math.cos(cfg.goal_yaw)])  # the goal T's stem axis (body +y)
        self.matrix = 2.0 * np.outer(axis, axis) - np.eye(2)                # (2, 2), det -1
        self.goal_yaw = float(cfg.goal_yaw)

    def points(self, xy: np.ndarray) -> np.ndarray:
        """(..., 2) positions (m) -> their mirror images (m), same dtype."""
        xy = np.asarray(xy)
        if xy.shape[-1] != 2:
            raise ValueError(f"positions must have a last axis of 2 (x, y), got shape {xy.shape}")
        return (xy @ self.matrix.T).astype(xy.dtype, copy=False)

    def state(self, state: np.ndarray) -> np.ndarray:
        """(..., 5) push-T states -> mirrored states (yaw wrapped to [-pi, pi)), same dtype."""
        state = np.asarray(state)
        if state.shape[-1] != 5:
            raise ValueError(f"push-T states must have a last axis of 5 [agent x, y, block x, y, yaw], "
                             f"got {state.shape}")
        out = np.empty_like(state)
        out[..., 0:2] = self.points(state[..., 0:2])
        out[..., 2:4] = self.points(state[..., 2:4])
        out[..., 4] = wrap_angle(2.0 * self.goal_yaw - state[..., 4].astype(np.float64))
        return out

    def action(self, action: np.ndarray) -> np.ndarray:
        """(..., 2) pusher targets (m) -> mirrored targets."""
        return self.points(action)
