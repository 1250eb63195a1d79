"""The push-T MuJoCo model (MJCF built from a ``PushTConfig``).

Bodies: ``agent`` (a sphere of radius r on x/y slide joints with position actuators ``act_x``,
``act_y``) and ``block`` (the T: two boxes on x/y slide joints and a yaw hinge, all through its
area centroid; its mass is spread uniformly unless ``block_com`` / ``block_inertia`` set an ``<inertial>``).
Gravity is off; the table is modelled by the block joints' dry friction
(``frictionloss``) and viscous damping, whose yaw terms are scaled by the T's friction radius
(mean distance of its area from the centroid), as for a uniform pressure distribution.
"""

from __future__ import annotations

import mujoco
import numpy as np

from .config import PushTConfig
from .geometry import t_rectangles

GRAVITY = 9.81
HEIGHT = 0.02  # m, half height of the block and the pusher's centre height


def friction_radius(rects: np.ndarray, n: int = 60) -> float:
    """Mean distance (m) of the T's area from its centroid (origin), by a midpoint grid."""
    dists, weights = [], []
    for r in rects:
        (x0, y0), (x1, y1) = r.min(0), r.max(0)
        xs = x0 + (np.arange(n) + 0.5) * (x1 - x0) / n
        ys = y0 + (np.arange(n) + 0.5) * (y1 - y0) / n
        gx, gy = np.meshgrid(xs, ys)
        dists.append(np.hypot(gx, gy).mean())
        weights.append((x1 - x0) * (y1 - y0))
    return float(np.average(dists, weights=weights))


def uniform_inertia(rects: np.ndarray, mass: float) -> float:
    """Yaw moment of inertia (kg m^2) about the area centroid (origin) of the T ``rects`` (2, 4, 2) m of
    uniform density and total ``mass`` kg."""
    areas = np.array([np.ptp(r[:, 0]) * np.ptp(r[:, 1]) for r in rects])
    moments = [a * (np.ptp(r[:, 0]) ** 2 + np.ptp(r[:, 1]) ** 2) / 12 + a * float(np.sum(r.mean(0) ** 2))
               for a, r in zip(areas, rects)]
    return float(mass * np.sum(moments) / areas.sum())


def build_mjcf(cfg: PushTConfig) -> str:
    rects = t_rectangles()
    c = friction_radius(rects)
    fn = cfg.block_friction * cfg.block_mass * GRAVITY  # N, sliding friction force
    h, w = cfg.half_size, 0.01
    boxes = []
    for i, r in enumerate(rects):
        (x0, y0), (x1, y1) = r.min(0), r.max(0)
        mass = cfg.block_mass * (x1 - x0) * (y1 - y0) / sum(np.ptp(q[:, 0]) * np.ptp(q[:, 1]) for q in rects)
        boxes.append(f'<geom name="block_{i}" type="box" pos="{(x0 + x1) / 2} {(y0 + y1) / 2} 0" '
                     f'size="{(x1 - x0) / 2} {(y1 - y0) / 2} {HEIGHT}" mass="{mass}" rgba="0.47 0.53 0.6 1"/>')
    (x0, y0), (x1, y1) = cfg.wall_box
    cx, cy, hx, hy = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    walls = [(x1 + w, cy, w, hy + 2 * w), (x0 - w, cy, w, hy + 2 * w), (cx, y1 + w, hx + 2 * w, w),
             (cx, y0 - w, hx + 2 * w, w)]
    wall_xml = "\n    ".join(f'<geom name="wall_{i}" type="box" pos="{x} {y} {HEIGHT}" size="{sx} {sy} {HEIGHT}" '
                             f'rgba="0.5 0.5 0.5 1"/>' for i, (x, y, sx, sy) in enumerate(walls))
    condim = ' condim="1"' if cfg.contact_friction == 0 else ""  # MuJoCo's frictionless contact
    inertial = ""
    if cfg.block_com is not None or cfg.block_inertia is not None:
        com = cfg.block_com if cfg.block_com is not None else (0.0, 0.0)
        inertia = cfg.block_inertia if cfg.block_inertia is not None else uniform_inertia(rects, cfg.block_mass)
        inertial = (f'<inertial pos="{com[0]} {com[1]} 0" mass="{cfg.block_mass}" '
                    f'diaginertia="{inertia} {inertia} {inertia}"/>\n      ')  # only the yaw term acts
    force = f"{-cfg.agent_max_force} {cfg.agent_max_force}"
    actuators = "\n    ".join(f'<position name="act_{a}" joint="agent_{a}" kp="{cfg.agent_kp}" forcerange="{force}"/>'
                              for a in "xy")
    return f"""
<mujoco model="pusht">
  <option timestep="{cfg.timestep}" gravity="0 0 0" integrator="implicitfast"/>
  <visual><global offwidth="{cfg.render_size}" offheight="{cfg.render_size}"/></visual>
  <default><geom friction="{cfg.contact_friction} 0.005 0.0001" solref="0.004 1"{condim}/></default>
  <worldbody>
    <light pos="0 0 1" dir="0 0 -1" directional="true"/>
    <geom name="table" type="plane" size="{h} {h} 0.01" rgba="1 1 1 1" contype="0" conaffinity="0"/>
    <camera name="top" pos="0 0 {h / np.tan(np.pi / 8)}" xyaxes="1 0 0 0 1 0" fovy="45"/>
    {wall_xml}
    <body name="agent" pos="0 0 {HEIGHT}">
      <joint name="agent_x" type="slide" axis="1 0 0" damping="{cfg.agent_kv}"/>
      <joint name="agent_y" type="slide" axis="0 1 0" damping="{cfg.agent_kv}"/>
      <geom name="agent" type="sphere" size="{cfg.agent_radius}" mass="{cfg.agent_mass}" rgba="0.25 0.41 0.88 1"/>
    </body>
    <body name="block" pos="0 0 {HEIGHT}">
      <joint name="block_x" type="slide" axis="1 0 0" damping="{cfg.block_damping}" frictionloss="{fn}"/>
      <joint name="block_y" type="slide" axis="0 1 0" damping="{cfg.block_damping}" frictionloss="{fn}"/>
      <joint name="block_yaw" type="hinge" axis="0 0 1" damping="{cfg.block_damping * c * c}"
             frictionloss="{fn * c}"/>
      {inertial}{boxes[0]}
      {boxes[1]}
    </body>
  </worldbody>
  <actuator>
    {actuators}
  </actuator>
</mujoco>
"""


def build_model(cfg: PushTConfig) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(build_mjcf(cfg))
