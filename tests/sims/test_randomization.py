"""Domain randomization: reproducible, within range, physically consistent, hoverable."""

import math

import numpy as np
import pytest
import torch

from sims.quadrotor import preset
from sims.quadrotor.dynamics import MOTOR, POS, hover_state, rk4_step
from sims.quadrotor.randomization import (RandomizationConfig, max_roll_torque, sample_param_list,
                                          sample_params)

F64 = torch.float64
CFG = RandomizationConfig()
FIELDS = ("mass", "inertia", "thrust_curve", "tau_rising", "tau_falling", "rotor_positions", "torque_constant")


def test_same_seed_same_batch_different_seed_different():
    a, b, c = (sample_params(CFG, 256, s) for s in (7, 7, 8))
    for k in FIELDS:
        assert torch.equal(getattr(a, k), getattr(b, k)), k
        assert not torch.equal(getattr(a, k), getattr(c, k)), k


def test_generator_seed_is_advanced():
    rng = np.random.default_rng(3)
    a, b = sample_params(CFG, 8, rng), sample_params(CFG, 8, rng)
    assert not torch.equal(a.mass, b.mass)
    assert torch.equal(a.mass, sample_params(CFG, 8, 3).mass)


def test_samples_within_configured_ranges():
    B = 4096
    p = sample_params(CFG, B, 0, dtype=F64)
    m = p.mass.numpy()
    assert m.min() >= CFG.mass[0] and m.max() <= CFG.mass[1]
    # log-uniform: about half the samples below the geometric mean
    assert abs((m < math.sqrt(CFG.mass[0] * CFG.mass[1])).mean() - 0.5) < 0.05
    twr = p.thrust_curve.sum(dim=(1, 2)).numpy() / (m * 9.81)
    assert twr.min() >= CFG.thrust_to_weight[0] - 1e-9 and twr.max() <= CFG.thrust_to_weight[1] + 1e-9
    tr, tf = p.tau_rising.numpy(), p.tau_falling.numpy()
    assert tr.min() >= CFG.motor_time_constant_rising[0] and tr.max() <= CFG.motor_time_constant_rising[1]
    ratio = tf / tr
    lo, hi = CFG.motor_time_constant_falling_ratio
    assert ratio.min() >= lo - 1e-12 and ratio.max() <= hi + 1e-12
    kq = p.torque_constant.numpy()
    assert kq.min() >= CFG.torque_constant[0] and kq.max() <= CFG.torque_constant[1]
    # arm length consistent with mass within the configured deviation
    base = preset(CFG.base)
    arm = p.rotor_positions.norm(dim=-1).mean(-1).numpy()
    rel = arm / (base.arm_length * (m / base.mass) ** (1 / 3))
    d = CFG.mass_size_deviation
    assert rel.min() >= 1 - d - 1e-12 and rel.max() <= 1 + d + 1e-12
    # torque-to-inertia as sampled, and the base's J_zz / J_xx ratio kept
    J = p.inertia.numpy()
    tti = max_roll_torque(p.thrust_curve.numpy(), p.rotor_positions.numpy()) / J[:, 0, 0]
    assert tti.min() >= CFG.torque_to_inertia[0] - 1e-9 and tti.max() <= CFG.torque_to_inertia[1] + 1e-9
    Jb = np.asarray(base.inertia)
    np.testing.assert_allclose(J[:, 2, 2] / J[:, 0, 0], Jb[2, 2] / (0.5 * (Jb[0, 0] + Jb[1, 1])))
    # per-motor variation: each motor within the band (after renormalizing to mean 1)
    per_motor = p.thrust_curve.sum(-1) / p.thrust_curve.sum(-1).mean(-1, keepdim=True)
    v = CFG.per_motor_thrust_variation
    assert per_motor.min() >= (1 - v) / (1 + v) - 1e-12 and per_motor.max() <= (1 + v) / (1 - v) + 1e-12
    assert per_motor.std() > 0.01


def test_fixed_ranges_reproduce_the_base_shape():
    cfg = RandomizationConfig(base="x500", mass=(2.0, 2.0), thrust_to_weight=(2.0, 2.0),
                              torque_to_inertia=(300.0, 300.0), mass_size_deviation=0.0,
                              per_motor_thrust_variation=0.0)
    p = sample_params(cfg, 4, 0, dtype=F64)
    x500 = preset("x500")
    np.testing.assert_allclose(p.rotor_positions.numpy(), np.broadcast_to(x500.rotor_positions, (4, 4, 3)))
    np.testing.assert_allclose(p.thrust_curve.numpy()[..., 2], 2.0 * 2.0 * 9.81 / 4)
    assert torch.all(p.thrust_curve[..., :2] == 0)


def test_every_sample_is_a_valid_quadrotor():
    params = sample_param_list(CFG, 32, 1)
    assert len(params) == 32
    for q in params:
        q.validate()
        assert CFG.thrust_to_weight[0] - 1e-9 <= q.thrust_to_weight <= CFG.thrust_to_weight[1] + 1e-9
        assert 0 < q.hover_command < 1


def _hover_from_rest(p, motor_commands, seconds=1.0):
    s = hover_state(p)
    s[:, MOTOR] = motor_commands
    a = 2 * motor_commands - 1
    for _ in range(round(seconds / p.dt)):
        s = rk4_step(s, a, p)
    return s


def test_sampled_quads_hover_at_their_hover_command():
    cfg = RandomizationConfig(per_motor_thrust_variation=0.0)
    p = sample_params(cfg, 64, 2, dtype=F64)
    u = p.hover_command()[:, None].expand(-1, 4)
    s = _hover_from_rest(p, u)
    assert s[:, POS].abs().max() < 0.01


def test_sampled_quads_with_motor_variation_hover_at_per_motor_commands():
    # Unequal motors need unequal commands: each motor carries m g / 4 (zero torque on an X quad).
    p = sample_params(CFG, 64, 2, dtype=F64)
    c0, c1, c2 = p.thrust_curve.unbind(-1)
    w = (p.mass * 9.81 / 4)[:, None]
    u = (-c1 + (c1 * c1 - 4 * c2 * (c0 - w)).sqrt()) / (2 * c2)
    s = _hover_from_rest(p, u)
    assert s[:, POS].abs().max() < 0.01


@pytest.mark.parametrize("change, field", [
    (dict(mass=(1.0, 0.5)), "mass"),
    (dict(mass=(0.0, 1.0)), "mass"),
    (dict(thrust_to_weight=(0.8, 2.0)), "thrust_to_weight"),
    (dict(torque_to_inertia=(-1.0, 10.0)), "torque_to_inertia"),
    (dict(motor_time_constant_rising=(0.05, 0.01)), "motor_time_constant_rising"),
    (dict(motor_time_constant_falling_ratio=(0.0, 2.0)), "motor_time_constant_falling_ratio"),
    (dict(torque_constant=(-0.01, 0.01)), "torque_constant"),
    (dict(torque_constant=(0.01,)), "torque_constant"),
    (dict(mass_size_deviation=1.5), "mass_size_deviation"),
    (dict(per_motor_thrust_variation=-0.1), "per_motor_thrust_variation"),
    (dict(base="hexacopter"), "base"),
])
def test_bad_config_names_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        RandomizationConfig(**change)


def test_bad_batch_size():
    with pytest.raises(ValueError, match="batch_size"):
        sample_params(CFG, 0, 0)


def test_config_dict_round_trip():
    assert RandomizationConfig.from_dict(CFG.to_dict()) == CFG
    with pytest.raises(ValueError, match="unknown"):
        RandomizationConfig.from_dict({"masss": (1, 2)})
