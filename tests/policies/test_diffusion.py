"""Diffusion policy: shapes, determinism given the initial noise, checkpoints, errors."""

import numpy as np
import pytest
import torch

from policies.chunked import ChunkedPolicy, with_execution_horizon
from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.diffusion.vision import ImageEncoder, crop_images
from policies.ema import ema_decay
from policies.registry import load_policy

SMALL = dict(obs_dim=5, action_dim=2, n_obs_steps=2, horizon=8, n_action_steps=4, down_dims=[16, 32],
             diffusion_step_embed_dim=16, num_train_timesteps=20, num_inference_steps=5)
STATS = {"obs": {"min": torch.tensor([-1.0, -1, -0.5, -0.5, -3]), "max": torch.tensor([1.0, 1, 0.5, 0.5, 3])},
         "action": {"min": torch.tensor([-0.2, -0.3]), "max": torch.tensor([0.2, 0.1])}}


def trained_policy(steps=5, **overrides):
    """A policy whose raw and EMA weights are both non-trivial."""
    policy = DiffusionPolicy(DiffusionConfig(**{**SMALL, **overrides}))
    policy.set_normalization(STATS)
    opt = torch.optim.Adam(policy.model.parameters(), 1e-3)
    B, c = 8, policy.config
    for _ in range(steps):
        batch = {"obs": torch.randn(B, c.n_obs_steps, c.obs_dim), "action": 0.1 * torch.randn(B, c.horizon, 2)}
        if c.image_shape:
            batch["image"] = torch.rand(B, c.n_obs_steps, *c.image_shape)
        loss = policy.compute_loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        policy.update_ema()
    return policy


def test_shapes_and_array_types():
    policy = trained_policy()
    assert isinstance(policy, ChunkedPolicy) and policy.noise_shape == (8, 2)
    chunk = policy.predict_chunk(np.random.randn(3, 2, 5).astype(np.float32))
    assert isinstance(chunk, np.ndarray) and chunk.shape == (3, 8, 2)
    action = policy.act(torch.randn(4, 5))
    assert isinstance(action, torch.Tensor) and action.shape == (4, 2)
    lo, hi = STATS["action"]["min"], STATS["action"]["max"]  # clip_sample keeps chunks inside the data range
    assert bool(((torch.as_tensor(chunk) >= lo - 1e-5) & (torch.as_tensor(chunk) <= hi + 1e-5)).all())


IMAGE = dict(image_shape=[3, 32, 32], encoder_channels=[8, 16], spatial_keypoints=8, image_feature_dim=16)


def image_history() -> dict[str, torch.Tensor]:
    """A batch of 2 observation windows (2 steps) for a policy built with ``IMAGE``."""
    return {"state": torch.randn(2, 2, 5), "image": torch.rand(2, 2, 3, 32, 32)}


def test_image_policy_shapes():
    policy = trained_policy(steps=2, **IMAGE)
    obs = {"state": torch.randn(2, 5), "image": torch.rand(2, 3, 32, 32)}
    assert policy.act(obs).shape == (2, 2)
    assert policy.predict_chunk(image_history()).shape == (2, 8, 2)
    with pytest.raises(ValueError, match="observes images"):
        policy.act(torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"image has shape \(2, 3, 16, 16\), expected \(B, 3, 32, 32\)"):
        policy.act({"state": torch.randn(2, 5), "image": torch.rand(2, 3, 16, 16)})


def test_pooled_stem_quarters_the_pixels_the_blocks_see(tmp_path):
    """``encoder_stem_pool`` puts ResNet-18's max-pool after the stem: 32x32 images reach the blocks as 8x8 instead
    of 16x16, the features keep their width, and the setting round-trips with the checkpoint."""
    image = torch.rand(2, 3, 32, 32)
    plain = ImageEncoder([8, 16], 4, 16)
    pooled = ImageEncoder([8, 16], 4, 16, stem_pool=True)
    assert plain.stem(image).shape == (2, 8, 16, 16) and pooled.stem(image).shape == (2, 8, 8, 8)
    assert pooled(image).shape == plain(image).shape == (2, 16)
    policy = trained_policy(steps=2, **IMAGE, encoder_stem_pool=True)
    hist = image_history()
    noise = torch.randn(2, *policy.noise_shape)
    loaded = load_policy(policy.save(tmp_path / "ckpt"))
    assert loaded.config.encoder_stem_pool
    chunks = [torch.as_tensor(p.predict_chunk(hist, noise)) for p in (policy, loaded)]
    assert torch.equal(*chunks)


def test_image_crop_is_random_in_training_and_central_when_acting():
    """``image_crop``: each training image is its own random window (Diffusion Policy's augmentation), acting uses the
    centre window, so the chunk stays a deterministic function of the noise; bad crops are refused."""
    image = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    assert torch.equal(crop_images(image, (4, 6), random=False), image[:, :, 2:6, 1:7])
    torch.manual_seed(0)
    windows = [crop_images(image, (4, 6), random=True) for _ in range(20)]
    corners = {(int(w[0, 0, 0, 0]), int(w[1, 0, 0, 0])) for w in windows}
    assert len(corners) > 5  # per image and per call
    for w in windows:  # every crop is a contiguous window of its own image
        top, left = divmod(int(w[1, 0, 0, 0]) - 192, 8)
        assert torch.equal(w[1], image[1, :, top:top + 4, left:left + 6])
    torch.manual_seed(0)
    cropped = ImageEncoder([8], 4, 8, crop=(24, 24))
    whole = ImageEncoder([8], 4, 8)
    whole.load_state_dict(cropped.state_dict())
    x = torch.rand(3, 3, 32, 32)
    assert torch.equal(cropped.eval()(x), whole.eval()(x[:, :, 4:28, 4:28]))
    assert not torch.equal(cropped.train()(x), cropped.train()(x))
    policy = trained_policy(steps=2, **IMAGE, image_crop=[28, 28])
    hist = image_history()
    noise = torch.randn(2, *policy.noise_shape)
    assert torch.equal(*[torch.as_tensor(policy.predict_chunk(hist, noise)) for _ in range(2)])
    with pytest.raises(ValueError, match=r"image_crop=\[40, 28\] must be \(h, w\) within"):
        DiffusionConfig(image_shape=[3, 32, 32], image_crop=[40, 28])


MLP = dict(denoiser="mlp", mlp_hidden=32, mlp_blocks=1)


@pytest.mark.parametrize("scheduler,denoiser", [("ddim", {}), ("dpmsolver", {}), ("ddim", MLP)])
def test_chunk_is_a_deterministic_function_of_the_noise(scheduler, denoiser):
    policy = trained_policy(inference_scheduler=scheduler, **denoiser)
    obs = torch.randn(4, 2, 5)
    noise = torch.randn(4, 8, 2)
    a, b = policy.predict_chunk(obs, noise), policy.predict_chunk(obs, noise.clone())
    assert torch.equal(a, b)
    c = policy.predict_chunk(obs, torch.randn(4, 8, 2))
    assert (a - c).abs().max() > 1e-3
    # each env's chunk depends only on its own noise
    noise2 = noise.clone()
    noise2[1] = torch.randn(8, 2)
    d = policy.predict_chunk(obs, noise2)
    assert torch.allclose(d[[0, 2, 3]], a[[0, 2, 3]], atol=1e-5) and (d[1] - a[1]).abs().max() > 1e-3


def test_act_executes_the_planned_chunk_and_replans_per_env():
    policy = trained_policy()
    B, obs = 2, torch.randn(2, 5)
    noise = torch.randn(B, 8, 2)
    chunk = policy.predict_chunk(obs[:, None].repeat(1, 2, 1), noise)  # first obs fills the history
    executed = torch.stack([policy.act(obs, noise=torch.randn(B, 8, 2) if k else noise) for k in range(4)], dim=1)
    assert torch.allclose(executed, chunk[:, 1:5], atol=1e-6)  # [n_obs_steps - 1, + n_action_steps)
    # after 4 actions a new chunk is planned from the given noise and the last 2 observations
    obs2, noise2 = torch.randn(B, 5), torch.randn(B, 8, 2)
    a = policy.act(obs2, noise=noise2)
    expected = policy.predict_chunk(torch.stack([obs, obs2], dim=1), noise2)[:, 1]
    assert torch.allclose(a, expected, atol=1e-6)
    # reset(mask) restarts env 1 only: it replans from its fresh observation, env 0 keeps its plan
    policy.reset(np.array([False, True]))
    obs3, noise3 = torch.randn(B, 5), torch.randn(B, 8, 2)
    b = policy.act(obs3, noise=noise3)
    fresh = policy.predict_chunk(obs3[1:, None].repeat(1, 2, 1), noise3[1:])[:, 1]
    old_plan = policy.predict_chunk(torch.stack([obs, obs2], dim=1), noise2)[0, 2]
    assert torch.allclose(b[1:], fresh, atol=1e-6) and torch.allclose(b[0], old_plan, atol=1e-6)


def test_execution_horizon_is_an_inference_setting(tmp_path):
    policy = trained_policy()
    short = with_execution_horizon(policy, 2)
    assert short.model is policy.model and policy.n_action_steps == 4 and short.n_action_steps == 2
    B, obs, noise = 2, torch.randn(2, 5), torch.randn(2, 8, 2)
    chunk = short.predict_chunk(obs[:, None].repeat(1, 2, 1), noise)
    assert torch.equal(chunk, policy.predict_chunk(obs[:, None].repeat(1, 2, 1), noise))  # same model
    executed = torch.stack([short.act(obs, noise=noise if k == 0 else torch.randn(B, 8, 2)) for k in range(2)], 1)
    assert torch.allclose(executed, chunk[:, 1:3], atol=1e-6)
    # the third action is planned anew (from the last 2 observations), not the chunk's 4th action
    obs2, noise2 = torch.randn(B, 5), torch.randn(B, 8, 2)
    expected = short.predict_chunk(torch.stack([obs, obs2], dim=1), noise2)[:, 1]
    assert torch.allclose(short.act(obs2, noise=noise2), expected, atol=1e-6)
    assert load_policy(short.save(tmp_path / "short")).n_action_steps == 2  # saved with the copy
    with pytest.raises(ValueError, match="exceeds horizon"):
        with_execution_horizon(policy, 8)  # n_obs_steps - 1 + 8 > horizon 8
    with pytest.raises(ValueError, match="positive integer"):
        with_execution_horizon(policy, 0)


@pytest.mark.parametrize("denoiser", [{}, MLP])
def test_save_load_round_trip_gives_identical_actions(tmp_path, denoiser):
    policy = trained_policy(**denoiser)
    assert not torch.equal(next(policy.model.parameters()), next(policy.inference_model.parameters()))
    policy.save(tmp_path / "ckpt")
    loaded = load_policy(tmp_path / "ckpt")
    assert isinstance(loaded, DiffusionPolicy) and loaded.config == policy.config
    obs, noise = torch.randn(3, 2, 5), torch.randn(3, 8, 2)
    assert torch.equal(policy.predict_chunk(obs, noise), loaded.predict_chunk(obs, noise))
    # normalization is stored with the weights
    for p in (loaded.model, loaded.inference_model):
        assert torch.allclose(p.action_normalizer.offset, torch.tensor([0.0, -0.1]))
        assert torch.allclose(p.obs_normalizer.scale, torch.tensor([1.0, 1, 0.5, 0.5, 3]))


def test_ema_follows_diffusion_policy_warmup():
    assert ema_decay(1) == 0.0 and ema_decay(2) == pytest.approx(1 - 2 ** -0.75)
    assert ema_decay(10 ** 9) == 0.9999
    policy = trained_policy(steps=1)
    # after one update the EMA equals the weights (decay 0)
    for a, b in zip(policy.model.parameters(), policy.inference_model.parameters()):
        assert torch.equal(a, b)


def test_bad_inputs_raise_clear_errors(tmp_path):
    policy = trained_policy(steps=1)
    with pytest.raises(ValueError, match=r"observation has shape \(3, 4\), expected \(B, 5\)"):
        policy.act(torch.randn(3, 4))
    with pytest.raises(ValueError, match="observation contains NaN"):
        policy.act(torch.full((1, 5), float("nan")))
    with pytest.raises(ValueError, match=r"noise has shape \(2, 16, 2\), expected \(2, 8, 2\)"):
        policy.predict_chunk(torch.randn(2, 2, 5), torch.randn(2, 16, 2))
    with pytest.raises(ValueError, match=r"obs_history has shape \(2, 3, 5\), expected \(B, 2, 5\)"):
        policy.predict_chunk(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="action contains NaN"):
        policy.compute_loss({"obs": torch.randn(2, 2, 5), "action": torch.full((2, 8, 2), float("nan"))})
    with pytest.raises(ValueError, match="horizon 12 must be a multiple of 8"):
        DiffusionConfig(horizon=12, down_dims=[8, 16, 32, 64])
    DiffusionConfig(horizon=12, down_dims=[8, 16, 32, 64], denoiser="mlp")  # the MLP takes any horizon
    with pytest.raises(ValueError, match="unknown denoiser 'transformer'"):
        DiffusionConfig(denoiser="transformer")
    with pytest.raises(ValueError, match="unknown inference_scheduler 'euler'"):
        DiffusionConfig(inference_scheduler="euler")
    with pytest.raises(ValueError, match=r"image_shape must be \(3, H, W\), got \[1, 8, 8\]"):
        DiffusionConfig(image_shape=[1, 8, 8])
    with pytest.raises(ValueError, match="encoder_channels=\\[\\] must list positive widths"):
        DiffusionConfig(image_shape=[3, 8, 8], encoder_channels=[])
    with pytest.raises(KeyError, match="'action'"):
        policy.set_normalization({"obs": STATS["obs"]})
    with pytest.raises(FileNotFoundError, match="not a robo checkpoint"):
        DiffusionPolicy.load(tmp_path)
