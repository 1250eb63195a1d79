"""ONNX export: onnxruntime matches torch within 1e-5 (random batches, recurrent rollouts)."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from hardware.export import (ModuleSpec, check_onnx_parity, denoiser_spec, export_module_onnx, export_onnx,
                             export_spec_onnx, module_spec, observation_sequence, onnx_runner, verify_onnx)
from hardware.export.parity import random_inputs


@pytest.mark.parametrize("config", [dict(), dict(activation="tanh", squash="clip", hidden_dims=[32, 16, 8])])
def test_mlp_matches_torch_on_random_batches(tmp_path, config, mlp_factory):
    policy = mlp_factory(**config)
    path = export_onnx(policy, tmp_path / "mlp.onnx")
    spec = module_spec(policy)
    for batch in (1, 7, 64):  # the batch axis is dynamic
        report = check_onnx_parity(spec, path, random_inputs(spec, batch, seed=batch))
        assert report.passed and report.max_abs_diff < 1e-5, report.as_dict()
    # the normalization is inside the graph: raw observations around the stats agree with the policy's act()
    mean, std = policy.model.obs_mean.numpy(), policy.model.obs_std.numpy()
    obs = (mean + 2 * std * np.random.default_rng(0).standard_normal((16, policy.obs_dim))).astype(np.float32)
    (action,) = onnx_runner(path)({"obs": obs})
    np.testing.assert_allclose(action, policy.act(obs), atol=1e-5, rtol=0)


def test_gru_hidden_state_is_an_explicit_input_and_output(tmp_path, gru_policy):
    path = export_onnx(gru_policy, tmp_path / "gru.onnx")
    model = onnx.load(str(path))
    assert [i.name for i in model.graph.input] == ["obs", "h"]
    assert [o.name for o in model.graph.output] == ["action", "h_next"]
    meta = {p.key: p.value for p in model.metadata_props}
    h0 = np.array([float(v) for v in meta["initial_hidden"].split(",")], np.float32)
    np.testing.assert_array_equal(h0, gru_policy.model.initial_hidden.detach().numpy())
    assert np.abs(h0).max() > 0.1  # a non-trivial learned initial state is carried

    report = verify_onnx(module_spec(gru_policy), path, atol=1e-5, batch_size=4, steps=100)
    assert report.passed and report.max_abs_diff < 1e-5, report.as_dict()
    assert "rollout, 100 steps, batch 4" in report.checks


def test_a_rollout_allows_twice_torch_float32_drift_and_no_more(gru_policy):
    """An exact (float64) implementation of the GRU passes at atol=0: it differs from torch float32 by torch's own
    rounding drift, which the rollout measures. The same implementation 1e-4 off on its state fails."""
    from hardware.export.parity import compare_rollout, float64_spec

    spec = module_spec(gru_policy)
    spec64 = float64_spec(spec)
    exact = lambda x: [o.float().numpy() for o in spec64.call({k: torch.as_tensor(v).double()  # noqa: E731
                                                               for k, v in x.items()})]
    seq = observation_sequence(200, gru_policy.obs_dim, seed=0, batch_size=4)
    report = compare_rollout(spec, exact, seq, atol=0.0)
    assert report.passed and 0 < report.float32_drift["h_next"] < 1e-4, report.as_dict()
    assert report.per_output["h_next"] <= 2 * report.float32_drift["h_next"]
    off = lambda x: [o + np.float32(1e-4) * (i == 1) for i, o in enumerate(exact(x))]  # noqa: E731
    report = compare_rollout(spec, off, seq, atol=1e-5)
    assert not report.passed and report.per_output["h_next"] >= 1e-4, report.as_dict()


def test_gru_rollout_matches_the_policy_act_loop(tmp_path, gru_policy):
    """Feeding h_next back reproduces FoundationPolicy.act over a multi-step sequence."""
    path = export_onnx(gru_policy, tmp_path / "gru.onnx")
    run = onnx_runner(path)
    rng = np.random.default_rng(1)
    h = np.tile(gru_policy.model.initial_hidden.detach().numpy(), (3, 1))
    gru_policy.reset()
    for _ in range(100):
        obs = rng.normal(size=(3, gru_policy.obs_dim)).astype(np.float32)
        action, h = run({"obs": obs, "h": h})
        np.testing.assert_allclose(action, gru_policy.act(obs), atol=1e-5, rtol=0)


def test_a_position_integral_is_an_explicit_input_and_output(tmp_path, integrating_mlp):
    policy = integrating_mlp
    path = export_onnx(policy, tmp_path / "pi.onnx")
    model = onnx.load(str(path))
    assert [i.name for i in model.graph.input] == ["obs", "integral"]
    assert [o.name for o in model.graph.output] == ["action", "integral_next"]
    assert model.graph.input[0].type.tensor_type.shape.dim[1].dim_value == 22
    meta = {p.key: p.value for p in model.metadata_props}
    assert (meta["obs_dim"], float(meta["position_integral"]), float(meta["integral_dt"])) == ("22", 0.05, 0.02)

    report = verify_onnx(module_spec(policy), path, atol=1e-5, batch_size=4, steps=100)
    assert report.passed and report.max_abs_diff < 1e-5, report.as_dict()
    assert "rollout, 100 steps, batch 4" in report.checks


def test_a_position_integral_rollout_matches_the_policy_act_loop(tmp_path, integrating_mlp):
    """Feeding integral_next back, from zeros, reproduces MLPPolicy.act (which keeps the integral) over 200 steps,
    through the clip."""
    policy = integrating_mlp
    run = onnx_runner(export_onnx(policy, tmp_path / "pi.onnx"))
    mean, std = policy.model.obs_mean.numpy()[:22], policy.model.obs_std.numpy()[:22]
    sequence = mean + std * observation_sequence(200, policy.obs_dim, seed=2, batch_size=3)
    integral, clipped = np.zeros((3, 3), np.float32), 0
    policy.reset()
    for obs in sequence.astype(np.float32):
        action, integral = run({"obs": obs, "integral": integral})
        np.testing.assert_allclose(action, policy.act(obs), atol=1e-5, rtol=0)
        np.testing.assert_allclose(integral, policy.integral.numpy(), atol=1e-7, rtol=0)
        clipped += int(np.isclose(np.abs(integral), 0.05).sum())
    assert clipped > 0  # the clip was reached


def test_raptor_policy_matches_torch(tmp_path, raptor):
    path = export_onnx(raptor, tmp_path / "raptor.onnx")
    report = verify_onnx(module_spec(raptor), path, atol=1e-5, batch_size=16, steps=500)
    assert report.passed, report.as_dict()


class TinyDenoiser(nn.Module):
    """(noisy_actions (B, T, A), timestep (B,), global_cond (B, C)) -> noise (B, T, A)."""

    def __init__(self, horizon=8, action_dim=4, cond_dim=10):
        super().__init__()
        self.freq = nn.Parameter(torch.linspace(0.01, 1.0, 8), requires_grad=False)
        self.net = nn.Sequential(nn.Linear(horizon * action_dim + 16 + cond_dim, 64), nn.Mish(),
                                 nn.Linear(64, horizon * action_dim))

    def forward(self, noisy_actions, timestep, global_cond):
        t = timestep.float()[:, None] * self.freq
        x = torch.cat([noisy_actions.flatten(1), t.sin(), t.cos(), global_cond], dim=1)
        return self.net(x).view_as(noisy_actions)


def test_denoiser_network_of_a_chunked_policy_exports(tmp_path):
    spec = denoiser_spec(TinyDenoiser(), horizon=8, action_dim=4, cond_dim=10, metadata={"scheduler": "DDIM"})
    path = export_spec_onnx(spec, tmp_path / "denoiser.onnx")
    report = verify_onnx(spec, path, atol=1e-5, batch_size=5)
    assert report.passed, report.as_dict()
    meta = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert meta["horizon"] == "8" and meta["scheduler"] == "DDIM"


class TinyEnergy(nn.Module):
    """Energy-based chunk scorer: (obs_n (B, To, O), chunk (B, H, A)) -> energy (B,), a TransformerEncoder."""

    def __init__(self, obs_dim=5, action_dim=2, d=32):
        super().__init__()
        self.obs_embed, self.action_embed = nn.Linear(obs_dim, d), nn.Linear(action_dim, d)
        layer = nn.TransformerEncoderLayer(d, 4, 64, 0.0, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, 1)

    def forward(self, obs_n, chunk):
        h = self.encoder(torch.cat([self.obs_embed(obs_n), self.action_embed(chunk)], dim=1))
        return self.head(h[:, -1]).squeeze(-1)


def test_energy_transformer_exports(tmp_path):
    """nn.TransformerEncoder's fused inference fast path has no ONNX form: export turns it off, then restores it."""
    spec = ModuleSpec(TinyEnergy().eval(), {"obs_n": torch.zeros(2, 2, 5), "chunk": torch.zeros(2, 8, 2)}, ["energy"])
    path = export_spec_onnx(spec, tmp_path / "energy.onnx")
    assert torch.backends.mha.get_fastpath_enabled()
    report = verify_onnx(spec, path, atol=1e-5, batch_size=6)
    assert report.passed, report.as_dict()


def test_energy_policy_exports_its_network_and_inference_settings(tmp_path):
    """The energy policy's network exports with what a runtime needs to drive it: the descent steps and
    the number of candidates to keep the lowest-energy chunk of (the descent runs outside the network)."""
    from policies.energy import EnergyConfig, EnergyPolicy

    policy = EnergyPolicy(EnergyConfig(obs_dim=5, action_dim=2, horizon=8, n_action_steps=2, d_model=16, n_heads=2,
                                       n_layers=1, ff_dim=32, n_steps=2, n_candidates=4))
    spec = module_spec(policy)
    assert spec.metadata["n_steps"] == "2" and spec.metadata["n_candidates"] == "4"
    assert verify_onnx(spec, export_spec_onnx(spec, tmp_path / "energy.onnx"), atol=1e-5).passed


def test_parity_check_catches_a_wrong_model(tmp_path, mlp_factory):
    a, b = mlp_factory(seed=0), mlp_factory(seed=1)
    path = export_onnx(b, tmp_path / "b.onnx")
    report = check_onnx_parity(a.model, path, {"obs": torch.randn(8, a.obs_dim)})
    assert not report.passed and report.max_abs_diff > 1e-3


def test_export_module_onnx_with_fixed_batch(tmp_path):
    m = nn.Linear(3, 2).train()
    path = export_module_onnx(m, (torch.randn(4, 3),), tmp_path / "lin.onnx", ["x"], ["y"], dynamic_batch=False)
    assert m.training  # exported in eval mode, handed back in the mode it came in
    assert check_onnx_parity(m, path, {"x": torch.randn(4, 3)}).passed
    with pytest.raises(Exception):
        onnx_runner(path)({"x": np.zeros((5, 3), np.float32)})  # batch fixed at 4


def test_errors_are_clear(tmp_path):
    class Unknown:
        kind = "unknown_kind"

    with pytest.raises(ValueError, match="no export spec for policy kind 'unknown_kind'.*register_module_spec"):
        export_onnx(Unknown(), tmp_path / "x.onnx")
    with pytest.raises(FileNotFoundError, match="ONNX file not found"):
        onnx_runner(tmp_path / "missing.onnx")
    with pytest.raises(ValueError, match="recurrent"):
        ModuleSpec(nn.Identity(), {"x": torch.zeros(1, 2)}, ["y"], recurrent={"y": "h"})
    with pytest.raises(ValueError, match="2 example inputs but 1 input names"):
        export_module_onnx(nn.Identity(), (torch.zeros(1), torch.zeros(1)), tmp_path / "x.onnx", ["a"], ["b"])
    assert not (tmp_path / "x.onnx").exists()


def test_hardware_export_imports_only_policies():
    code = "import sys, hardware.export; print(sorted({m.split('.')[0] for m in sys.modules} & {'sims', 'robo'}))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
