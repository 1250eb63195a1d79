"""The MLP policy: stateless, or keeping the integral of its position error (a position-integral actor's state)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from policies.mlp import MLPConfig, MLPIntegralStep, MLPPolicy
from policies.registry import load_policy

LIMIT, DT = 0.05, 0.02  # m s, s


def integrating_policy(seed: int = 0, **config) -> MLPPolicy:
    torch.manual_seed(seed)
    policy = MLPPolicy(MLPConfig(hidden_dims=[16], position_integral=LIMIT, integral_dt=DT, **config))
    with torch.no_grad():
        policy.model.obs_std[-3:] = LIMIT  # the integral reads O(1) in the network: its changes show in the action
    return policy


def obs_with_error(error, batch: int = 1, seed: int = 0) -> np.ndarray:
    """(batch, 22) float32 observations with position error ``error`` (3,) m, the rest random."""
    obs = np.random.default_rng(seed).normal(size=(batch, 22)).astype(np.float32)
    obs[:, 0:3] = error
    return obs


def test_the_network_reads_the_integral_of_the_previous_steps_and_the_policy_reads_22_floats():
    policy = integrating_policy()
    assert policy.obs_dim == 22 and policy.config.input_dim == 25
    assert policy.model.net[0].in_features == 25 and policy.model.obs_mean.shape == (25,)
    error = np.array([0.1, -0.2, 0.004], np.float32)
    integral = np.zeros((2, 3), np.float32)
    policy.reset()
    for t in range(30):
        obs = obs_with_error(error, 2, seed=t)
        action = policy.act(obs)
        expected = policy.model(torch.as_tensor(np.concatenate([obs, integral], 1))).detach().numpy()
        np.testing.assert_allclose(action, expected, atol=1e-6, rtol=0)  # I_t: the errors of obs_0 .. obs_{t-1}
        integral = np.clip(integral + np.float32(DT) * obs[:, 0:3], -LIMIT, LIMIT)
        np.testing.assert_allclose(policy.integral.numpy(), integral, atol=1e-7, rtol=0)
    # 30 steps of 0.02 s: x and y reach the clip, z (0.0024 m s) does not
    np.testing.assert_allclose(policy.integral[0].numpy(), [LIMIT, -LIMIT, 30 * DT * 0.004], rtol=1e-5)
    assert policy.integral.dtype == torch.float32


def test_reset_zeroes_the_integral_of_all_or_of_the_masked_envs_and_a_new_batch_starts_at_zero():
    policy = integrating_policy()
    obs = obs_with_error([0.1, 0.1, 0.1], 3)
    for _ in range(5):
        policy.act(obs)
    policy.reset(np.array([True, False, True]))
    np.testing.assert_array_equal(policy.integral[[0, 2]].numpy(), 0.0)
    np.testing.assert_allclose(policy.integral[1].numpy(), 5 * DT * 0.1, rtol=1e-5)
    policy.reset(torch.tensor([False, True, False]))
    assert not policy.integral.any()
    for _ in range(2):
        policy.act(obs)
    policy.reset()
    assert policy.integral.shape == (3, 3) and not policy.integral.any()
    policy.act(obs)
    policy.act(obs_with_error([0.1, 0.1, 0.1], 5))  # another batch size: its state starts at zero
    np.testing.assert_allclose(policy.integral.numpy(), DT * 0.1, rtol=1e-5)
    with pytest.raises(ValueError, match=r"reset mask has shape \(2,\), expected \(5,\)"):
        policy.reset(np.array([True, False]))


def test_a_policy_without_an_integral_stays_stateless_and_unchanged():
    torch.manual_seed(0)
    policy = MLPPolicy(MLPConfig(hidden_dims=[16]))
    assert policy.config.input_dim == 22 and policy.model.net[0].in_features == 22
    obs = torch.randn(4, 22)
    first = policy.act(obs)
    policy.reset(np.ones(4, bool))
    assert policy.integral is None
    assert torch.equal(policy.act(obs), first) and torch.equal(first, policy.model(obs))


def test_the_integral_travels_in_config_json_and_old_checkpoints_load(tmp_path):
    policy = integrating_policy()
    path = policy.save(tmp_path / "pi")
    loaded = load_policy(path)
    assert loaded.config == policy.config and loaded.obs_dim == 22
    obs = obs_with_error([0.3, -0.1, 0.2], 2)
    for _ in range(10):
        np.testing.assert_array_equal(loaded.act(obs), policy.act(obs))

    old = MLPPolicy(MLPConfig(hidden_dims=[16])).save(tmp_path / "old")
    doc = json.loads((old / "config.json").read_text())
    for key in ("position_integral", "integral_dt"):
        del doc["config"][key]  # a checkpoint written before the integral existed
    (old / "config.json").write_text(json.dumps(doc))
    assert load_policy(old).config.position_integral == 0.0


def test_the_step_module_is_the_policy_with_its_state_explicit():
    policy = integrating_policy()
    step = MLPIntegralStep(policy.model)
    integral = torch.zeros(2, 3)
    policy.reset()
    for t in range(20):
        obs = torch.as_tensor(obs_with_error([0.2, -0.3, 0.1], 2, seed=t))
        action, integral = step(obs, integral)
        torch.testing.assert_close(policy.act(obs), action, atol=0, rtol=0)
        torch.testing.assert_close(policy.integral, integral, atol=0, rtol=0)
    with pytest.raises(ValueError, match="position_integral > 0"):
        MLPIntegralStep(MLPPolicy().model)


@pytest.mark.parametrize("config, match", [
    (dict(position_integral=-0.1), r"position_integral must be >= 0 \(m s; 0: no integral\), got -0.1"),
    (dict(position_integral=0.1, integral_dt=0.0), r"integral_dt must be positive \(s, the control period\), got 0.0"),
    (dict(position_integral=0.1, obs_dim=2), r"needs the position error in obs\[0:3\], but obs_dim=2"),
])
def test_bad_integral_settings_are_refused_in_one_line(config, match):
    with pytest.raises(ValueError, match=match):
        MLPConfig(**config)


def test_policies_mlp_imports_neither_sims_nor_robo():
    code = "import sys, policies.mlp; print(sorted({m.split('.')[0] for m in sys.modules} & {'sims', 'robo'}))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
