"""ONNX export of the action-chunk policies: the network in onnxruntime matches torch, and the sampling
loop run around onnxruntime reproduces the policy's own chunk."""

import numpy as np
import pytest
import torch

from hardware.export import export_onnx, module_spec, onnx_runner, verify_onnx
from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.energy import EnergyConfig, EnergyPolicy, ImplicitBCConfig, ImplicitBCPolicy

STATS = {"obs": {"min": -torch.ones(5), "max": torch.full((5,), 2.0)},
         "action": {"min": torch.zeros(2), "max": torch.full((2,), 0.5)}}


def _diffusion() -> DiffusionPolicy:
    policy = DiffusionPolicy(DiffusionConfig(obs_dim=5, action_dim=2, down_dims=[16, 32], diffusion_step_embed_dim=16,
                                             num_inference_steps=5))
    policy.set_normalization(STATS)
    with torch.no_grad():  # non-trivial weights in the EMA copy that inference uses
        for p in policy.inference_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return policy


@pytest.mark.parametrize("make", [
    _diffusion,
    lambda: EnergyPolicy(EnergyConfig(obs_dim=5, action_dim=2, d_model=32, n_layers=1)),
    lambda: ImplicitBCPolicy(ImplicitBCConfig(obs_dim=5, action_dim=2)),
    lambda: EnergyPolicy(EnergyConfig(obs_dim=5, action_dim=2, backbone="resmlp", hidden_dims=[32, 32])),
    lambda: EnergyPolicy(EnergyConfig(obs_dim=5, action_dim=2, backbone="resmlp", hidden_dims=[32, 32],
                                      image_shape=[3, 16, 16], encoder_channels=[8], image_feature_dim=8)),
    lambda: EnergyPolicy(EnergyConfig(obs_dim=5, action_dim=2, backbone="mlp", hidden_dims=[32, 32])),
], ids=["diffusion", "energy", "implicit_bc", "energy_resmlp", "energy_resmlp_image", "energy_mlp"])
def test_chunked_policy_networks_match_torch_in_onnxruntime(tmp_path, make):
    policy = make()
    path = export_onnx(policy, tmp_path / "policy.onnx")
    report = verify_onnx(module_spec(policy), path, atol=1e-5)
    assert report.passed, report
    assert report.max_abs_diff < 1e-5 and report.per_output


def test_diffusion_sampling_loop_around_onnxruntime_reproduces_predict_chunk(tmp_path):
    policy = _diffusion()
    run = onnx_runner(export_onnx(policy, tmp_path / "denoiser.onnx"))
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(3, policy.n_obs_steps, 5, generator=g)
    noise = torch.randn(3, *policy.noise_shape, generator=g)
    model = policy.inference_model
    cond = model.condition(obs).detach()
    x, scheduler = noise.clone(), policy.make_inference_scheduler()
    for t in scheduler.timesteps:
        out = run({"noisy_actions": x.numpy(), "timestep": np.full(3, int(t), np.int64),
                   "global_cond": cond.numpy()})[0]
        x = scheduler.step(torch.as_tensor(out), t, x).prev_sample
    chunk_onnx = model.action_normalizer.unnormalize(x)
    chunk_torch = torch.as_tensor(policy.predict_chunk(obs, noise))
    np.testing.assert_allclose(chunk_onnx.numpy(), chunk_torch.numpy(), atol=1e-5)
