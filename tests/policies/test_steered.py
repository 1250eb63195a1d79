"""The steered policy (frozen chunked policy + latent-noise actor): one robo checkpoint."""

import numpy as np
import pytest
import torch

from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.energy import EnergyConfig, EnergyPolicy
from policies.registry import load_policy
from policies.steered import SteeredConfig, SteeredPolicy

TINY = dict(obs_dim=2, action_dim=2, n_obs_steps=2, horizon=8, n_action_steps=4, down_dims=[16, 32],
            diffusion_step_embed_dim=16, num_train_timesteps=20, num_inference_steps=4)


def tiny_diffusion(seed=0):
    torch.manual_seed(seed)
    p = DiffusionPolicy(DiffusionConfig(**TINY))
    p.set_normalization({"obs": {"min": -torch.ones(2), "max": torch.ones(2)},
                         "action": {"min": -torch.ones(2), "max": torch.ones(2)}})
    return p


def tiny_energy(seed=0):
    torch.manual_seed(seed)
    p = EnergyPolicy(EnergyConfig(obs_dim=2, action_dim=2, n_obs_steps=2, horizon=8, n_action_steps=4, d_model=16,
                                  n_heads=2, ff_dim=32, n_layers=1))
    p.set_normalization({"obs": {"min": -torch.ones(2), "max": torch.ones(2)},
                         "action": {"min": -torch.ones(2), "max": torch.ones(2)}})
    return p


def rollout(policy, steps=10, seed=0):
    rng = np.random.default_rng(seed)
    policy.reset()
    return np.stack([policy.act(rng.uniform(-1, 1, (3, 2)).astype(np.float32)) for _ in range(steps)])


@pytest.mark.parametrize("make_base", [tiny_diffusion, tiny_energy])
def test_save_load_gives_identical_actions_and_the_actor_matters(tmp_path, make_base):
    torch.set_num_threads(1)
    steered = SteeredPolicy.for_base(make_base(), noise_bound=1.5, hidden_dims=[16])
    with torch.no_grad():
        for p in steered.model.parameters():
            p.normal_(0, 1.0)
    steered.save(tmp_path / "steered")
    loaded = load_policy(tmp_path / "steered")
    assert isinstance(loaded, SteeredPolicy) and loaded.base.kind == steered.base.kind
    a, b = rollout(steered), rollout(loaded)
    assert a.shape == (10, 3, 2)
    np.testing.assert_array_equal(a, b)
    # deterministic: the noise argument is ignored, the actor picks it
    steered.reset()
    x = np.zeros((3, 2), np.float32)
    assert np.array_equal(steered.act(x, noise=np.random.randn(3, 8, 2)), (steered.reset(), steered.act(x))[1])
    # the actor changes the chunk compared with another actor
    other = SteeredPolicy.for_base(steered.base, noise_bound=1.5, hidden_dims=[16])
    hist = torch.zeros(1, 2, 2)
    assert not torch.allclose(torch.as_tensor(steered.predict_chunk(hist)), torch.as_tensor(other.predict_chunk(hist)))


def test_a_stochastic_steered_policy_samples_its_noise_and_round_trips(tmp_path):
    base = tiny_diffusion()
    cfg = SteeredConfig(obs_dim=2, action_dim=2, n_obs_steps=2, noise_shape=[8, 2], noise_bound=1.5,
                        hidden_dims=[16], stochastic=True)
    steered = SteeredPolicy(base, cfg)
    with torch.no_grad():
        steered.model.log_std.weight.zero_()
        steered.model.log_std.bias.fill_(np.log(0.3))  # std 0.3 before the tanh
    steered.save(tmp_path / "steered")
    loaded = load_policy(tmp_path / "steered")
    assert loaded.config.stochastic
    window = torch.zeros(4000, 2, 2)
    torch.manual_seed(0)
    a = steered.noise(window)
    torch.manual_seed(0)
    np.testing.assert_array_equal(a.numpy(), loaded.noise(window).numpy())  # same weights, same draws
    pre_tanh = torch.atanh((a / 1.5).clamp(-0.999999, 0.999999))
    assert pre_tanh.std(0).mean().item() == pytest.approx(0.3, abs=0.02)
    # a given standard-normal draw sets the sample: the same draw, the same noise; another draw, another noise
    eps = torch.randn(4000, 8, 2)
    given = steered.noise(window, eps)
    np.testing.assert_array_equal(given.numpy(), loaded.noise(window, eps.numpy()).numpy())
    actor = steered.model.actor
    with torch.no_grad():
        mean = actor.net[:-1]((window.reshape(4000, -1) - actor.obs_mean) / actor.obs_std)  # before the tanh
        expected = 1.5 * torch.tanh(mean + 0.3 * eps.reshape(4000, -1))
    np.testing.assert_allclose(given.numpy(), expected.reshape(4000, 8, 2).numpy(), atol=1e-5)
    assert not torch.equal(given, steered.noise(window, -eps))
    with pytest.raises(ValueError, match=r"noise has shape \(4000, 16\), expected \(4000, 8, 2\)"):
        steered.noise(window, torch.zeros(4000, 16))
    with pytest.raises(ValueError, match="stochastic"):
        SteeredPolicy(base, cfg, SteeredPolicy.for_base(base, hidden_dims=[16]).model)


def test_reset_mask_refills_only_the_masked_window():
    steered = SteeredPolicy.for_base(tiny_diffusion(), hidden_dims=[8])
    steered.act(np.zeros((2, 2), np.float32))
    steered.act(np.ones((2, 2), np.float32))
    steered.reset(np.array([True, False]))
    steered.act(np.full((2, 2), 0.5, np.float32))
    np.testing.assert_allclose(steered._window[0].numpy(), 0.5)
    np.testing.assert_allclose(steered._window[1].numpy(), [[1, 1], [0.5, 0.5]])


def test_bad_inputs_raise_clear_errors(tmp_path):
    base = tiny_diffusion()
    steered = SteeredPolicy.for_base(base, hidden_dims=[8])
    with pytest.raises(ValueError, match=r"observation has shape \(3, 5\), expected \(B, 2\)"):
        steered.act(np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        steered.act(np.full((1, 2), np.nan, np.float32))
    with pytest.raises(ValueError, match="obs_history has shape"):
        steered.predict_chunk(np.zeros((1, 3, 2), np.float32))
    with pytest.raises(ValueError, match="does not match the base policy"):
        SteeredPolicy(base, SteeredConfig(obs_dim=2, action_dim=2, n_obs_steps=2, noise_shape=[16, 2]))
    with pytest.raises(ValueError, match="noise_bound must be > 0"):
        SteeredConfig(noise_bound=0.0)
    with pytest.raises(TypeError, match="not a ChunkedPolicy"):
        SteeredPolicy.for_base(object())
    steered.save(tmp_path / "s")
    import shutil

    shutil.rmtree(tmp_path / "s" / "base")
    with pytest.raises(FileNotFoundError, match="without its base policy"):
        load_policy(tmp_path / "s")
