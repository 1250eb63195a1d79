"""Physical and task parameters of push-T (SI units)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

IMAGE_STYLES = ("robo", "gym_pusht")
STARTS = ("robo", "gym_pusht")


@dataclass
class PushTConfig:
    """Push-T after Diffusion Policy (1 px of its 512 px window = 1 mm here).

    The workspace is the square ``[-half_size, half_size]^2`` (m) with walls around it. The
    pusher is a disc of ``agent_radius`` driven by a PD position servo toward the commanded
    target (the action); the T block slides on the table with dry (Coulomb) and viscous
    friction. The task succeeds when the block covers ``success_threshold`` of the goal T.
    The fields after ``render_size`` make variants; their defaults leave robo's push-T as it is
    (``sims.pusht.matched.GYM_PUSHT_MATCHED`` sets gym-pusht's values).
    """

    half_size: float = 0.256            # m, the workspace is [-h, h]^2
    agent_radius: float = 0.015         # m
    agent_mass: float = 1.0             # kg
    agent_kp: float = 400.0             # N/m, position servo stiffness (natural frequency 20 rad/s)
    agent_kv: float = 40.0              # N s/m, servo damping (critically damped with kp, mass)
    agent_max_force: float = 30.0       # N
    block_mass: float = 0.2             # kg
    block_friction: float = 0.5         # table friction coefficient (dry friction of slide/yaw joints)
    block_damping: float = 4.0          # N s/m, viscous table drag (yaw drag scales with the T's size^2)
    contact_friction: float = 0.3       # pusher-block and block-wall friction coefficient
    goal_x: float = 0.0                 # m
    goal_y: float = 0.0                 # m
    goal_yaw: float = math.pi / 4       # rad
    success_threshold: float = 0.95     # coverage at which the episode succeeds and terminates
    control_hz: float = 10.0            # actions per second
    timestep: float = 0.002             # s, MuJoCo step
    max_episode_steps: int = 300        # control steps (30 s)
    init_agent_range: float = 0.2       # m, initial pusher x, y ~ U(-r, r)
    init_block_range: float = 0.15      # m, initial block x, y ~ U(-r, r); yaw ~ U(-pi, pi)
    image_size: int = 96                # px, observation image side
    render_size: int = 384              # px, render() image side
    # --- variants (the defaults are robo's push-T; configs/task/pusht_matched.yaml sets gym-pusht's) ---
    walls: tuple[float, float, float, float] | None = None   # m, inner wall faces (x_min, x_max, y_min, y_max);
    #                                                           None: the square [-half_size, half_size]^2
    window: tuple[float, float, float, float] | None = None  # m, (x_min, x_max, y_min, y_max): the action and
    #                                                           observation range and the image's view; None: walls
    image_flip_x: bool = False          # the image's columns run along -x (gym-pusht's view of robo's frame)
    image_style: str = "robo"           # "robo": anti-aliased shapes; "gym_pusht": gym-pusht's drawing (render.py)
    start: str = "robo"                 # "robo": sample_initial_state's draw; "gym_pusht": gym-pusht's reset draw
    block_com: tuple[float, float] | None = None  # m, centre of mass in the body frame; None: the area centroid
    block_inertia: float | None = None  # kg m^2, yaw inertia about the centre of mass; None: the uniform T's
    block_velocity_reset: float = 0.0   # s: the block's velocity is zeroed every this often (0: never)

    @property
    def substeps(self) -> int:
        return max(1, int(round(1.0 / (self.control_hz * self.timestep))))

    @property
    def wall_box(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """((x_min, y_min), (x_max, y_max)) m: the inner faces of the walls."""
        h = self.half_size
        x0, x1, y0, y1 = self.walls if self.walls is not None else (-h, h, -h, h)
        return (x0, y0), (x1, y1)

    @property
    def window_box(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """((x_min, y_min), (x_max, y_max)) m: the action and observation range, and the image's view."""
        if self.window is None:
            return self.wall_box
        x0, x1, y0, y1 = self.window
        return (x0, y0), (x1, y1)

    def __post_init__(self) -> None:
        for name in ("walls", "window"):
            box = getattr(self, name)
            if box is not None and (len(box) != 4 or not (box[0] < box[1] and box[2] < box[3])):
                raise ValueError(f"{name}={box}: give (x_min, x_max, y_min, y_max) in m with min < max")
        if self.image_style not in IMAGE_STYLES:
            raise ValueError(f"image_style={self.image_style!r} is not one of {IMAGE_STYLES}")
        if self.start not in STARTS:
            raise ValueError(f"start={self.start!r} is not one of {STARTS}")
        if self.block_com is not None and len(self.block_com) != 2:
            raise ValueError(f"block_com={self.block_com}: give (x, y) in m in the block's body frame")
        if self.block_inertia is not None and not self.block_inertia > 0:
            raise ValueError(f"block_inertia={self.block_inertia} must be > 0 (kg m^2)")
        if self.block_velocity_reset < 0:
            raise ValueError(f"block_velocity_reset={self.block_velocity_reset} must be >= 0 (s)")

    @classmethod
    def from_dict(cls, d: dict | None) -> "PushTConfig":
        d = dict(d or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown push-T config keys {unknown}; valid keys: {sorted(names)}")
        return cls(**d)
