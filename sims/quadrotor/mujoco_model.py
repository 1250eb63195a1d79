"""MuJoCo model of a multirotor, built from ``QuadrotorParams``, and a single-quad simulator.

``build_mjcf`` writes the MJCF (XML) in code: a free-joint body ``quadrotor`` whose frame
origin is the centre of mass (explicit ``inertial``), visual geoms sized from the arm length,
one site ``rotor_i`` per rotor, and two actuators per rotor:

* ``motor_i``: a first-order filter (``dyntype="filter"``) whose activation is the motor state
  ``m`` in [0, 1]; its control is the motor command ``u``; it produces no force.
* ``thrust_i``: a force actuator at site ``rotor_i`` with gear ``[thrust_dir; kq * torque_dir]``
  (body FLU), so control ``T`` (N) applies thrust ``T`` along the rotor's axis at the rotor and
  the yaw reaction torque ``kq * T``.

``MujocoQuadrotorSim`` steps it with the conventions of ``sims.quadrotor.dynamics``: state
(17,) = [pos world, quat wxyz body->world, vel world, omega body, motor states], actions in
[-1, 1] mapped to ``u = (a + 1) / 2``, thrust ``c0 + c1 m + c2 m^2`` on the lagged motor
state. The motor state is part of the RK4 state, as in ``dynamics.rk4_step``: each step runs
the four RK4 stages of MuJoCo's own ``mj_RungeKutta`` (same tableau, positions advanced with
``mj_integratePos``), and before each stage's ``mj_forward`` the thrust controls are set from
that stage's motor activations. MuJoCo computes everything else (mass matrix, gyroscopic
terms, actuator transmission, contacts with the floor and obstacles).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Any

import mujoco
import numpy as np

from .params import QuadrotorParams

STATE_DIM = 17
ACTION_DIM = 4
OBSTACLE_SIZES = {"box": 3, "sphere": 1, "cylinder": 2, "capsule": 2}  # MuJoCo geom size entries

def _fmt(values) -> str:
    return " ".join(repr(float(v)) for v in np.ravel(values))


def _sub(parent: ET.Element, tag: str, **attrs: Any) -> ET.Element:
    return ET.SubElement(parent, tag, {k: (v if isinstance(v, str) else _fmt(v)) for k, v in attrs.items()})


def _obstacle_geom(worldbody: ET.Element, i: int, spec: dict) -> None:
    """Add one static obstacle ``{type, pos, size, rgba?, quat?, name?}`` to the world."""
    if not isinstance(spec, dict):
        raise ValueError(f"obstacle {i} is {type(spec).__name__}, expected a dict like "
                         "{'type': 'box', 'pos': (x, y, z), 'size': (hx, hy, hz)}")
    unknown = set(spec) - {"type", "pos", "size", "rgba", "quat", "name"}
    if unknown:
        raise ValueError(f"obstacle {i} has unknown key(s) {sorted(unknown)}; "
                         "known: type, pos, size, rgba, quat, name")
    kind = spec.get("type")
    if kind not in OBSTACLE_SIZES:
        raise ValueError(f"obstacle {i} has type {kind!r}; choose one of {sorted(OBSTACLE_SIZES)}")
    size = np.atleast_1d(np.asarray(spec.get("size", ()), dtype=np.float64))
    if size.shape != (OBSTACLE_SIZES[kind],) or not np.all(size > 0):
        raise ValueError(f"obstacle {i} ({kind}) needs {OBSTACLE_SIZES[kind]} positive size value(s) "
                         "(box: half-extents; sphere: radius; cylinder/capsule: radius, half-height), "
                         f"got {size.tolist()}")
    pos = np.asarray(spec.get("pos", ()), dtype=np.float64)
    if pos.shape != (3,) or not np.all(np.isfinite(pos)):
        raise ValueError(f"obstacle {i} needs a finite 3-vector pos (world, m), got {pos.tolist()}")
    attrs = dict(name=str(spec.get("name", f"obstacle_{i}")), type=kind, pos=pos, size=size,
                 rgba=np.asarray(spec.get("rgba", (0.55, 0.55, 0.6, 1.0)), dtype=np.float64))
    if "quat" in spec:
        attrs["quat"] = np.asarray(spec["quat"], dtype=np.float64)
    _sub(worldbody, "geom", **attrs)


def build_mjcf(params: QuadrotorParams, *, obstacles: list[dict] | None = None, floor: bool = True,
               target_marker: bool = False) -> str:
    """MJCF (XML string) of the multirotor described by ``params``.

    Args:
        params: physical parameters; mass, inertia, rotor geometry, gravity and ``dt`` are used.
        obstacles: static world geoms, each ``{"type": "box"|"sphere"|"cylinder"|"capsule",
            "pos": (3,) world m, "size": MuJoCo sizes (box half-extents, sphere radius,
            cylinder/capsule radius and half-height), "rgba": (4,) optional, "quat": (4,) wxyz
            optional, "name": optional}``. They collide with the quadrotor's collision box.
        floor: add a ground plane at z = 0.
        target_marker: add a mocap body ``target`` (translucent sphere, no collision) to show a
            goal position; move it with ``data.mocap_pos[0]``.

    The body frame origin is the centre of mass; the camera ``chase`` follows the quadrotor at a
    fixed world-frame offset, behind (-x) and above it.
    """
    arm = params.arm_length
    rotors = np.asarray(params.rotor_positions)
    tdir = np.asarray(params.rotor_thrust_directions)
    qdir = np.asarray(params.rotor_torque_directions)
    kq = np.asarray(params.torque_constant)
    J = np.asarray(params.inertia)
    prop_r = 0.55 * arm
    extent = max(2.0, 20.0 * arm)  # sets the renderer's clipping planes (znear, zfar scale with it)

    root = ET.Element("mujoco", model=f"quadrotor_{params.name}")
    _sub(root, "compiler", angle="radian", autolimits="true")
    _sub(root, "option", timestep=params.dt, integrator="RK4", gravity=params.gravity, density=0.0, viscosity=0.0,
         wind=(0.0, 0.0, 0.0))
    _sub(root, "statistic", extent=extent, center=(0.0, 0.0, 1.0))
    visual = _sub(root, "visual")
    _sub(visual, "global", offwidth="1920", offheight="1080")
    _sub(visual, "map", znear=0.002, zfar=50.0)
    _sub(visual, "headlight", ambient=(0.35, 0.35, 0.35), diffuse=(0.5, 0.5, 0.5), specular=(0.1, 0.1, 0.1))

    asset = _sub(root, "asset")
    _sub(asset, "texture", name="sky", type="skybox", builtin="gradient", rgb1=(0.55, 0.7, 0.9),
         rgb2=(0.95, 0.97, 1.0), width="256", height="256")
    _sub(asset, "texture", name="checker", type="2d", builtin="checker", rgb1=(0.78, 0.8, 0.82),
         rgb2=(0.55, 0.58, 0.6), width="256", height="256")
    cell = 4.0 * arm  # checker square edge, m: a visible motion cue at any scale
    _sub(asset, "material", name="floor", texture="checker", texuniform="true", texrepeat=(0.5 / cell, 0.5 / cell),
         reflectance=0.05)

    world = _sub(root, "worldbody")
    _sub(world, "light", name="sun", directional="true", pos=(0.0, 0.0, 10.0), dir=(0.3, 0.2, -1.0),
         diffuse=(0.6, 0.6, 0.6), castshadow="false")
    if floor:
        _sub(world, "geom", name="floor", type="plane", size=(50.0, 50.0, 0.1), material="floor")
    for i, spec in enumerate(obstacles or []):
        _obstacle_geom(world, i, spec)
    if target_marker:
        tgt = _sub(world, "body", name="target", mocap="true", pos=(0.0, 0.0, 1.0))
        _sub(tgt, "geom", name="target", type="sphere", size=(0.3 * arm,), rgba=(0.1, 0.85, 0.2, 0.6),
             contype="0", conaffinity="0", group="1")

    quad = _sub(world, "body", name="quadrotor", pos=(0.0, 0.0, 1.0))
    _sub(quad, "freejoint", name="root")
    _sub(quad, "inertial", pos=(0.0, 0.0, 0.0), mass=params.mass,
         fullinertia=(J[0, 0], J[1, 1], J[2, 2], J[0, 1], J[0, 2], J[1, 2]))
    d, h = 7.0 * arm, 3.0 * arm  # chase camera: behind and above, looking at the body origin
    n = math.hypot(d, h)
    _sub(quad, "camera", name="chase", mode="track", pos=(-d, 0.0, h), fovy="50",
         xyaxes=(0.0, -1.0, 0.0, h / n, 0.0, d / n))
    vis = dict(contype="0", conaffinity="0", group="2")
    _sub(quad, "geom", name="hub", type="box", size=(0.3 * arm, 0.2 * arm, 0.08 * arm),
         rgba=(0.15, 0.15, 0.18, 1.0), **vis)
    _sub(quad, "geom", name="nose", type="sphere", size=(0.08 * arm,), pos=(0.32 * arm, 0.0, 0.0),
         rgba=(0.95, 0.8, 0.1, 1.0), **vis)
    reach = np.max(np.linalg.norm(rotors[:, :2], axis=1)) + prop_r
    _sub(quad, "geom", name="collision", type="box", size=(reach, reach, 0.15 * arm), group="3",
         rgba=(0.5, 0.5, 0.5, 0.2))
    for i, (r, t) in enumerate(zip(rotors, tdir)):
        front = r[0] > 0
        _sub(quad, "geom", name=f"arm_{i}", type="capsule", fromto=np.concatenate([np.zeros(3), r]),
             size=(0.05 * arm,), rgba=(0.25, 0.25, 0.28, 1.0), **vis)
        _sub(quad, "geom", name=f"motor_{i}", type="cylinder", pos=r, zaxis=t, size=(0.1 * arm, 0.08 * arm),
             rgba=(0.1, 0.1, 0.1, 1.0), **vis)
        _sub(quad, "geom", name=f"prop_{i}", type="cylinder", pos=r + 0.1 * arm * t, zaxis=t,
             size=(prop_r, 0.01 * arm), rgba=(0.9, 0.25, 0.2, 0.55) if front else (0.2, 0.45, 0.9, 0.55), **vis)
        _sub(quad, "site", name=f"rotor_{i}", pos=r, size=(0.04 * arm,), rgba=(1.0, 1.0, 1.0, 0.0))

    act = _sub(root, "actuator")
    for i in range(4):
        _sub(act, "general", name=f"motor_{i}", site=f"rotor_{i}", dyntype="filter",
             dynprm=(params.motor_time_constant_rising[i],), gaintype="fixed", gainprm=(0.0,), ctrlrange=(0.0, 1.0))
    for i in range(4):
        _sub(act, "general", name=f"thrust_{i}", site=f"rotor_{i}", gear=np.concatenate([tdir[i], kq[i] * qdir[i]]),
             gaintype="fixed", gainprm=(1.0,))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


def _check_vector(x, n: int, name: str, what: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.shape != (n,):
        raise ValueError(f"{name} has shape {arr.shape}, expected ({n},) ({what})")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf: {arr.tolist()}")
    return arr


class MujocoQuadrotorSim:
    """One multirotor in MuJoCo, stepped like ``BatchedQuadrotorSim`` (robo's state layout).

    Args:
        params: physical parameters (``dt`` is the step).
        obstacles, floor: passed to ``build_mjcf``.
        state: (17,) initial state; default: level hover 1 m above the origin, motors at hover.

    Attributes:
        model, data: the ``mujoco.MjModel`` / ``mujoco.MjData``.
        external_force: (3,) world-frame force on the centre of mass, N, or None.
    """

    def __init__(self, params: QuadrotorParams, *, obstacles: list[dict] | None = None, floor: bool = True,
                 state: np.ndarray | None = None):
        self.params = params
        self.model = mujoco.MjModel.from_xml_string(build_mjcf(params, obstacles=obstacles, floor=floor))
        self.data = mujoco.MjData(self.model)
        self.external_force: np.ndarray | None = None
        self._body = self.model.body("quadrotor").id
        self._tau_rise = np.asarray(params.motor_time_constant_rising)
        self._tau_fall = np.asarray(params.motor_time_constant_falling)
        self._curve = np.asarray(params.thrust_curve)  # (4, 3)
        if state is None:
            state = np.zeros(STATE_DIM)
            state[2], state[3], state[13:] = 1.0, 1.0, params.hover_command
        self.reset(state)

    @property
    def dt(self) -> float:
        return self.params.dt

    @property
    def time(self) -> float:
        """Seconds since the last reset."""
        return float(self.data.time)

    @property
    def state(self) -> np.ndarray:
        """(17,) float64 copy: [pos world, quat wxyz, vel world, omega body, motor states]."""
        d = self.data
        # free joint: qpos = [pos, quat wxyz]; qvel = [linear world, angular body]
        return np.concatenate([d.qpos[:7], d.qvel[:6], d.act[:4]])

    def reset(self, state: np.ndarray) -> np.ndarray:
        """Set the (17,) state (quaternion is normalized); returns it."""
        s = _check_vector(state, STATE_DIM, "state", "pos 3, quat wxyz 4, vel 3, omega 3, motors 4")
        qn = np.linalg.norm(s[3:7])
        if qn < 1e-9:
            raise ValueError(f"state quaternion {s[3:7].tolist()} has zero norm")
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        d.qpos[:3], d.qpos[3:7] = s[:3], s[3:7] / qn
        d.qvel[:3], d.qvel[3:6] = s[7:10], s[10:13]
        d.act[:4] = s[13:17]
        d.ctrl[:4] = d.act[:4]
        self._forward()
        return self.state

    def thrusts(self, motor: np.ndarray | None = None) -> np.ndarray:
        """(4,) rotor thrusts in N for motor states (default: the current ones)."""
        mot = self.data.act[:4] if motor is None else np.asarray(motor)
        c = self._curve
        return c[:, 0] + mot * (c[:, 1] + mot * c[:, 2])

    def _forward(self) -> None:
        """mj_forward with the thrust controls set from the current motor activations."""
        d = self.data
        d.ctrl[4:8] = self.thrusts()
        d.xfrc_applied[self._body, :3] = 0.0 if self.external_force is None else self.external_force
        mujoco.mj_forward(self.model, d)

    def _derivative(self, y: np.ndarray) -> np.ndarray:
        """Time derivative of the (17,) state ``y``; MuJoCo supplies the accelerations."""
        d = self.data
        d.qpos[:7], d.qvel[:6], d.act[:4] = y[:7], y[7:13], y[13:17]
        # rising or falling motor lag, chosen per stage like dynamics.state_derivative
        self.model.actuator_dynprm[:4, 0] = np.where(d.ctrl[:4] >= y[13:17], self._tau_rise, self._tau_fall)
        self._forward()
        (qw, qx, qy, qz), (wx, wy, wz) = y[3:7], y[10:13]
        qdot = 0.5 * np.array([-qx * wx - qy * wy - qz * wz, qw * wx + qy * wz - qz * wy,
                               qw * wy - qx * wz + qz * wx, qw * wz + qx * wy - qy * wx])
        return np.concatenate([y[7:10], qdot, d.qacc[:6], d.act_dot[:4]])

    def step(self, action: np.ndarray) -> np.ndarray:
        """Advance by ``dt`` under action (4,) in [-1, 1] (clipped; motor order FR, BR, BL, FL).

        Returns the new (17,) state.
        """
        a = _check_vector(action, ACTION_DIM, "action", "one normalized command in [-1, 1] per motor")
        if self.external_force is not None:
            self.external_force = _check_vector(self.external_force, 3, "external_force", "world frame, N")
        m, d = self.model, self.data
        d.ctrl[:4] = (np.clip(a, -1.0, 1.0) + 1.0) * 0.5
        h, t0 = m.opt.timestep, d.time
        y = self.state
        k1 = self._derivative(y)
        d.time = t0 + 0.5 * h
        k2 = self._derivative(y + (0.5 * h) * k1)
        k3 = self._derivative(y + (0.5 * h) * k2)
        d.time = t0 + h
        k4 = self._derivative(y + h * k3)
        y = y + (h / 6.0) * (k1 + 2.0 * (k2 + k3) + k4)
        d.qpos[:3], d.qpos[3:7] = y[:3], y[3:7] / np.linalg.norm(y[3:7])
        d.qvel[:6], d.act[:4] = y[7:13], np.clip(y[13:17], 0.0, 1.0)
        self._forward()  # derived quantities (xpos, contacts, sensors) consistent with the new state
        return self.state
