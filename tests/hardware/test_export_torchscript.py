"""TorchScript export: the traced module matches torch within 1e-5."""

import numpy as np
import pytest
import torch

from hardware.export import export_torchscript, module_spec, torchscript_runner, verify_torchscript


def test_mlp_matches_torch(tmp_path, mlp_policy):
    path = export_torchscript(mlp_policy, tmp_path / "mlp.pt")
    report = verify_torchscript(module_spec(mlp_policy), path, batch_size=32)
    assert report.passed and report.max_abs_diff < 1e-5, report.as_dict()
    loaded = torch.jit.load(str(path))
    obs = torch.randn(5, mlp_policy.obs_dim)
    np.testing.assert_allclose(loaded(obs).detach().numpy(), mlp_policy.act(obs).numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("which", ["gru", "raptor"])
def test_gru_rollout_matches_torch(tmp_path, which, gru_policy, raptor):
    policy = gru_policy if which == "gru" else raptor
    path = export_torchscript(policy, tmp_path / "gru.pt")
    report = verify_torchscript(module_spec(policy), path, batch_size=4, steps=100)
    assert report.passed, report.as_dict()
    assert "rollout, 100 steps, batch 4" in report.checks
    loaded = torch.jit.load(str(path))  # the learned initial state travels with the module
    torch.testing.assert_close(loaded.initial_hidden, policy.model.initial_hidden)


def test_a_position_integral_rollout_matches_torch(tmp_path, integrating_mlp):
    path = export_torchscript(integrating_mlp, tmp_path / "pi.pt")
    report = verify_torchscript(module_spec(integrating_mlp), path, batch_size=4, steps=100)
    assert report.passed and set(report.per_output) == {"action", "integral_next"}, report.as_dict()
    assert "rollout, 100 steps, batch 4" in report.checks
    loaded = torch.jit.load(str(path))
    obs, integral = torch.randn(5, 22), torch.full((5, 3), 0.049)
    action, integral_next = loaded(obs, integral)
    integrating_mlp.act(torch.zeros(5, 22))  # a state of 5 envs (zero error: it stays 0), set below
    integrating_mlp.integral.fill_(0.049)
    torch.testing.assert_close(action, integrating_mlp.act(obs), atol=1e-5, rtol=0)
    torch.testing.assert_close(integral_next, integrating_mlp.integral, atol=0, rtol=0)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="TorchScript file not found"):
        torchscript_runner(tmp_path / "nope.pt", ["obs"])
