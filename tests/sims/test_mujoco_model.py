"""The MuJoCo model against the batched torch simulator, and its input checks."""

import mujoco
import numpy as np
import pytest
import torch

from sims.quadrotor import BatchedQuadrotorSim, ParamsBatch, preset
from sims.quadrotor.mujoco_model import MujocoQuadrotorSim, build_mjcf

# Max abs difference per state block over 1 s (100 steps), float64. Measured (seed 0, mujoco 4.0):
#   crazyflie  pos 6.4e-10 m  quat 3.7e-15  vel 1.6e-09 m/s  omega 2.1e-14 rad/s  motor 0
#   racer5     pos 1.6e-10 m  quat 1.4e-15  vel 3.5e-10 m/s  omega 6.5e-15 rad/s  motor 0
#   x500       pos 1.3e-10 m  quat 1.1e-15  vel 1.9e-10 m/s  omega 3.4e-15 rad/s  motor 0
TOLERANCE = {"pos": 1e-8, "quat": 1e-13, "vel": 2e-8, "omega": 2e-13, "motor": 1e-14}
BLOCKS = {"pos": slice(0, 3), "quat": slice(3, 7), "vel": slice(7, 10), "omega": slice(10, 13), "motor": slice(13, 17)}


# Per-motor excitation (action units) that tilts each airframe visibly without flipping it in 1 s:
# the Crazyflie's tiny inertia makes it ~10x more sensitive to differential thrust than the x500.
EXCITATION = {"crazyflie": 0.005, "racer5": 0.01, "x500": 0.03}


def _flight(name: str, seed: int = 0):
    """Start state in the air (z = 1 m, tilted, moving, motors off hover) and 100 open-loop actions."""
    p = preset(name)
    rng = np.random.default_rng(seed)
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    s0 = np.zeros(17)
    s0[2] = 1.0
    s0[3:7] = [np.cos(0.1), *(np.sin(0.1) * axis)]  # 0.2 rad tilt
    s0[7:10] = rng.uniform(-0.3, 0.3, 3)
    s0[10:13] = rng.uniform(-0.5, 0.5, 3)
    s0[13:] = p.hover_command + rng.uniform(-2, 2, 4) * EXCITATION[name]  # some motors rise, some fall
    freq, phase = rng.uniform(1.0, 4.0, 4), rng.uniform(0, 2 * np.pi, 4)
    t = np.arange(100)[:, None] * p.dt
    actions = p.hover_action + EXCITATION[name] * np.sin(2 * np.pi * freq * t + phase)  # (100, 4)
    return p, s0, actions


@pytest.mark.parametrize("name", ["crazyflie", "racer5", "x500"])
def test_parity_with_batched_torch_sim(name):
    """Same open-loop commands through both simulators for 1 s: states agree within TOLERANCE
    (position 1e-8 m, quaternion 1e-13, velocity 2e-8 m/s, angular velocity 2e-13 rad/s,
    motor state 1e-14), i.e. the two implementations agree to round-off on everything but the
    translational channel. The residual position/velocity error comes from dynamics.py rotating the
    thrust with the (slightly unnormalized) RK4 stage quaternion, where MuJoCo normalizes it."""
    p, s0, actions = _flight(name)
    mj = MujocoQuadrotorSim(p, state=s0)  # with the floor: the flight must stay clear of it
    th = BatchedQuadrotorSim(ParamsBatch.from_params(p, 1, dtype=torch.float64))
    th.reset(torch.as_tensor(s0)[None])
    err = dict.fromkeys(BLOCKS, 0.0)
    for a in actions:
        x = mj.step(a)
        y = th.step(torch.as_tensor(a)[None])[0].numpy()
        assert mj.data.ncon == 0 and x[2] > 0.3, "the parity flight must not touch the floor"
        for k, sl in BLOCKS.items():
            err[k] = max(err[k], float(np.abs(x[sl] - y[sl]).max()))
    assert mj.time == pytest.approx(1.0)
    assert np.linalg.norm(x[10:13]) > 0.1 and abs(x[2] - 1.0) > 1e-3, "the flight should exercise the dynamics"
    for k, tol in TOLERANCE.items():
        assert err[k] < tol, f"{name}: {k} differs by {err[k]:.3g} (tolerance {tol:g}); all errors {err}"


def test_hover_holds_still():
    p = preset("x500")
    sim = MujocoQuadrotorSim(p)
    for _ in range(100):
        s = sim.step(np.full(4, p.hover_action))
    np.testing.assert_allclose(s[:3], [0.0, 0.0, 1.0], atol=1e-9)
    np.testing.assert_allclose(s[7:13], 0.0, atol=1e-9)


@pytest.mark.parametrize("action, message", [
    (np.zeros(3), r"action has shape \(3,\), expected \(4,\)"),
    (np.zeros((1, 4)), r"action has shape \(1, 4\), expected \(4,\)"),
    (np.array([0.0, np.nan, 0.0, 0.0]), "action contains NaN or inf"),
    (np.array([0.0, 0.0, np.inf, 0.0]), "action contains NaN or inf"),
])
def test_bad_action_raises(action, message):
    sim = MujocoQuadrotorSim(preset("crazyflie"))
    before = sim.state
    with pytest.raises(ValueError, match=message):
        sim.step(action)
    np.testing.assert_array_equal(sim.state, before)


def test_bad_state_raises():
    sim = MujocoQuadrotorSim(preset("crazyflie"))
    with pytest.raises(ValueError, match=r"state has shape \(13,\), expected \(17,\)"):
        sim.reset(np.zeros(13))
    with pytest.raises(ValueError, match="zero norm"):
        sim.reset(np.zeros(17))
    s = sim.state
    s[0] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        sim.reset(s)


def test_mjcf_structure():
    p = preset("racer5")
    m = mujoco.MjModel.from_xml_string(build_mjcf(p))
    assert m.opt.timestep == p.dt and m.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4
    assert m.opt.density == 0 and m.opt.viscosity == 0
    np.testing.assert_allclose(m.opt.gravity, p.gravity)
    body = m.body("quadrotor")
    assert body.mass[0] == pytest.approx(p.mass)
    np.testing.assert_allclose(np.sort(body.inertia), np.sort(np.linalg.eigvalsh(np.asarray(p.inertia))), rtol=1e-9)
    for i, r in enumerate(p.rotor_positions):
        np.testing.assert_allclose(m.site(f"rotor_{i}").pos, r)
    assert m.camera("chase").id >= 0 and m.geom("floor").id >= 0
    # only the collision box and the floor collide
    colliding = {m.geom(g).name for g in range(m.ngeom) if m.geom_contype[g] or m.geom_conaffinity[g]}
    assert colliding == {"collision", "floor"}


def test_obstacles_load_and_collide():
    obstacles = [
        {"type": "box", "pos": (1.0, 0.0, 0.5), "size": (0.2, 0.2, 0.5), "rgba": (0.8, 0.3, 0.3, 1.0)},
        {"type": "sphere", "pos": (0.0, 0.0, 0.5), "size": 0.3},
        {"type": "cylinder", "pos": (-1.0, 1.0, 1.0), "size": (0.1, 1.0), "name": "pole"},
    ]
    m = mujoco.MjModel.from_xml_string(build_mjcf(preset("x500"), obstacles=obstacles))
    assert {m.geom(i).name for i in range(m.ngeom)} >= {"obstacle_0", "obstacle_1", "pole"}
    # a quad dropped onto the sphere comes to rest on it instead of falling through
    p = preset("x500")
    sim = MujocoQuadrotorSim(p, obstacles=obstacles)
    for _ in range(150):
        s = sim.step(-np.ones(4))
    assert s[2] > 0.75 and sim.data.ncon > 0


@pytest.mark.parametrize("bad, message", [
    ({"type": "cone", "pos": (0, 0, 0), "size": 1.0}, "type 'cone'"),
    ({"type": "box", "pos": (0, 0, 0), "size": (1.0, 1.0)}, r"box\) needs 3 positive size"),
    ({"type": "sphere", "pos": (0, 0), "size": 1.0}, "finite 3-vector pos"),
    ({"type": "sphere", "pos": (0, 0, 0), "size": 1.0, "colour": "red"}, "unknown key"),
])
def test_bad_obstacle_raises(bad, message):
    with pytest.raises(ValueError, match=message):
        build_mjcf(preset("x500"), obstacles=[bad])


def test_external_force_matches_batched_sim():
    p, s0, actions = _flight("x500")
    mj = MujocoQuadrotorSim(p, state=s0)
    th = BatchedQuadrotorSim(ParamsBatch.from_params(p, 1, dtype=torch.float64))
    th.reset(torch.as_tensor(s0)[None])
    push = np.array([3.0, -2.0, 1.0])  # world frame, N
    mj.external_force, th.external_force = push, torch.as_tensor(push)[None]
    for a in actions[:50]:
        x = mj.step(a)
        y = th.step(torch.as_tensor(a)[None])[0].numpy()
    np.testing.assert_allclose(x, y, atol=1e-8)
    mj.external_force = None  # removing the push clears MuJoCo's applied force
    mj.step(actions[50])
    assert not mj.data.xfrc_applied.any()
