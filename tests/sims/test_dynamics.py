"""Physics checks with known answers (float64)."""

import math

import numpy as np
import pytest
import torch

from sims.quadrotor import BatchedQuadrotorSim, ParamsBatch, hover_state, preset
from sims.quadrotor.dynamics import MOTOR, OMEGA, POS, QUAT, VEL, rk4_step
from sims.quadrotor.rotations import (quat_from_axis_angle, quat_mul, quat_rotate, quat_to_rotmat,
                                      random_quat_within, rotmat_to_quat)

F64 = torch.float64


BACKENDS = ["torch", "c"]  # the physics checks hold for both step backends


def sim_for(name="crazyflie", B=1, backend="torch", **changes):
    return BatchedQuadrotorSim(ParamsBatch.from_params(preset(name, **changes), B, dtype=F64), step_backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["crazyflie", "racer5", "x500"])
def test_hover_command_holds_position(name, backend):
    sim = sim_for(name, backend=backend)
    a = torch.full((1, 4), preset(name).hover_action, dtype=F64)
    for _ in range(300):
        sim.step(a)
    assert sim.state[0, POS].abs().max() < 1e-9
    assert sim.state[0, VEL].abs().max() < 1e-9


@pytest.mark.parametrize("backend", BACKENDS)
def test_free_fall_matches_kinematics(backend):
    sim = sim_for(backend=backend)
    s = hover_state(sim.params)
    s[:, MOTOR] = 0.0
    s[:, 2] = 10.0
    sim.reset(s)
    a = torch.full((1, 4), -1.0, dtype=F64)
    p = preset("crazyflie")
    thrust_at_zero = 4 * p.thrust_curve[0][0]  # c0 > 0 for the Crazyflie fit
    acc = -9.81 + thrust_at_zero / p.mass
    for _ in range(100):
        sim.step(a)
    assert sim.state[0, 2].item() == pytest.approx(10.0 + 0.5 * acc * 1.0**2, abs=1e-9)
    assert sim.state[0, 9].item() == pytest.approx(acc * 1.0, abs=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_motor_lag_follows_first_order_response(backend):
    p = preset("crazyflie")
    sim = sim_for(backend=backend)
    s = hover_state(sim.params)
    s[:, MOTOR] = 0.0
    sim.reset(s)
    sim.step(torch.ones(1, 4, dtype=F64))  # command u = 1, rising
    h = p.dt / p.motor_time_constant_rising[0]
    expected = 1 - math.exp(-h)
    # RK4's local truncation error on exp(-h) is about h^5 / 120 (1.6e-6 here)
    assert sim.state[0, 13].item() == pytest.approx(expected, abs=h**5 / 60)
    s = hover_state(sim.params)
    s[:, MOTOR] = 1.0
    sim.reset(s)
    sim.step(-torch.ones(1, 4, dtype=F64))  # command u = 0, falling (slower)
    h = p.dt / p.motor_time_constant_falling[0]
    assert sim.state[0, 13].item() == pytest.approx(math.exp(-h), abs=h**5 / 60)


def _spin_up(delta, backend):
    """Hover plus ``delta`` (4,) on the action; returns body rates after 50 ms."""
    p = preset("crazyflie")
    sim = sim_for(backend=backend)
    a = torch.full((1, 4), p.hover_action, dtype=F64) + torch.tensor(delta, dtype=F64)
    for _ in range(5):
        sim.step(a)
    return sim.state[0, OMEGA]


@pytest.mark.parametrize("backend", BACKENDS)
def test_torque_signs_follow_flu_and_motor_order(backend):
    # motor order: FR, BR, BL, FL
    assert _spin_up([0, 0, 0.1, 0.1], backend)[0] > 0, "more thrust on the left rolls right-side down: +x rate"
    assert _spin_up([0.1, 0, 0, 0.1], backend)[1] < 0, "more thrust in front pitches nose up: -y rate in FLU"
    w = _spin_up([0, 0.1, 0, 0.1], backend)  # BR and FL: reaction torque +z
    assert w[2] > 0 and abs(w[0]) < 1e-9 and abs(w[1]) < 1e-9


@pytest.mark.parametrize("backend", BACKENDS)
def test_torque_free_rotation_conserves_world_angular_momentum(backend):
    J = ((2e-5, 0, 0), (0, 3e-5, 0), (0, 0, 4e-5))
    sim = sim_for(backend=backend, inertia=J, thrust_curve=((0.0, 0.0, 0.1),) * 4)
    s = hover_state(sim.params)
    s[:, MOTOR] = 0.0
    s[:, OMEGA] = torch.tensor([3.0, 0.2, -1.0], dtype=F64)  # near the unstable middle axis: tumbles
    sim.reset(s)
    Jt = torch.tensor(J, dtype=F64)

    def momentum():
        R = quat_to_rotmat(sim.state[:, QUAT])[0]
        return R @ (Jt @ sim.state[0, OMEGA])

    L0 = momentum()
    for _ in range(200):
        sim.step(-torch.ones(1, 4, dtype=F64))
    assert torch.allclose(momentum(), L0, rtol=0, atol=1e-5 * L0.norm().item())
    assert torch.isclose(sim.state[0, QUAT].norm(), torch.tensor(1.0, dtype=F64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_env_parameters_match_single_runs(backend):
    names = ["crazyflie", "x500"]
    params = [preset(n) for n in names]
    batch = BatchedQuadrotorSim(ParamsBatch.from_params(params, dtype=F64), step_backend=backend)
    singles = [sim_for(n, backend=backend) for n in names]
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        a = torch.rand(2, 4, generator=g, dtype=F64) * 2 - 1
        batch.step(a)
        for i, s in enumerate(singles):
            s.step(a[i:i + 1])
    for i, s in enumerate(singles):
        assert torch.allclose(batch.state[i], s.state[0], atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_actions_are_rejected_with_clear_errors(backend):
    sim = sim_for(B=2, backend=backend)
    with pytest.raises(ValueError, match=r"action has shape \(2, 3\), expected \(2, 4\)"):
        sim.step(torch.zeros(2, 3, dtype=F64))
    bad = torch.zeros(2, 4, dtype=F64)
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"NaN.*environments \[1\]"):
        sim.step(bad)


def test_batches_must_share_dt():
    with pytest.raises(ValueError, match="share dt"):
        ParamsBatch.from_params([preset("crazyflie"), preset("crazyflie", dt=0.005)])


def test_rotation_helpers_agree():
    g = torch.Generator().manual_seed(1)
    q = random_quat_within(math.pi, 64, g, dtype=F64)
    R = quat_to_rotmat(q)
    assert torch.allclose(R @ R.transpose(-1, -2), torch.eye(3, dtype=F64).expand(64, 3, 3), atol=1e-12)
    v = torch.randn(64, 3, generator=g, dtype=F64)
    assert torch.allclose(quat_rotate(q, v), (R @ v[..., None])[..., 0], atol=1e-12)
    q2 = rotmat_to_quat(R)
    assert torch.allclose(q2 * torch.sign(q2[:, :1] * q[:, :1]), q, atol=1e-9)
    qz = quat_from_axis_angle(torch.tensor([[0.0, 0, 1]], dtype=F64), torch.tensor([math.pi / 2], dtype=F64))
    assert torch.allclose(quat_rotate(qz, torch.tensor([[1.0, 0, 0]], dtype=F64)),
                          torch.tensor([[0.0, 1, 0]], dtype=F64), atol=1e-12)
    assert torch.allclose(quat_mul(qz, qz)[0], torch.tensor([0, 0, 0, 1.0], dtype=F64), atol=1e-12)


def test_random_quat_angles_stay_within_bound():
    from sims.quadrotor.rotations import quat_angle

    q = random_quat_within(math.radians(30), 1000, torch.Generator().manual_seed(0), dtype=F64)
    ang = quat_angle(q)
    assert ang.max() <= math.radians(30) + 1e-9 and ang.max() > math.radians(28)


def test_float32_rk4_matches_float64():
    p = preset("crazyflie")
    s64, s32 = sim_for(B=8), BatchedQuadrotorSim(ParamsBatch.from_params(p, 8))
    g = torch.Generator().manual_seed(2)
    for _ in range(100):
        a = (torch.rand(8, 4, generator=g, dtype=F64) * 0.2 - 0.1 + p.hover_action)
        s64.step(a)
        s32.step(a.float())
    np.testing.assert_allclose(s32.state.numpy(), s64.state.numpy(), atol=2e-4)
    assert rk4_step is not None
