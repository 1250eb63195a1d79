"""World models: the ensemble learns a known linear system, guided trajectory generation follows
the target policy, the latent model learns, save/load round trips, bad input raises."""

import numpy as np
import pytest
import torch

from policies.world_model import (EnsembleConfig, PlanarFrame, EnsembleDynamics, LatentConfig, LatentWorldModel,
                                  TrajectoryDiffusion, TrajectoryDiffusionConfig, load_world_model)

A = np.array([[0.9, 0.1, 0.0], [0.0, 0.95, 0.1], [0.0, -0.1, 0.9]])
B = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.2]])


def linear_data(n, seed):
    rng = np.random.default_rng(seed)
    s, a = rng.normal(size=(n, 3)), rng.uniform(-1, 1, (n, 2))
    return {"obs": s, "action": a, "next_obs": s @ A.T + a @ B.T, "reward": -(s ** 2).sum(1),
            "terminated": (np.abs(s[:, 0]) > 2.5).astype(float)}


@pytest.fixture(scope="module")
def linear_model():
    torch.manual_seed(0)
    m = EnsembleDynamics(EnsembleConfig(obs_dim=3, action_dim=2, num_members=3, hidden_dims=[64, 64]))
    m.fit(linear_data(2000, 0), steps=800, seed=0)
    return m


def test_ensemble_learns_linear_system(linear_model):
    t = linear_data(500, 1)
    p = linear_model.predict(t["obs"], t["action"])
    err = np.abs(p.next_obs.numpy() - t["next_obs"]).mean()
    copy_err = np.abs(t["obs"] - t["next_obs"]).mean()
    assert err < 0.02, err  # stated accuracy: mean |error| < 0.02 on unit-variance states
    assert err < copy_err / 10
    assert np.abs(p.reward.numpy() - t["reward"]).mean() < 0.3


def test_disagreement_grows_off_data(linear_model):
    t = linear_data(200, 2)
    near = linear_model.predict(t["obs"], t["action"]).disagreement.mean()
    far = linear_model.predict(t["obs"] * 8, t["action"]).disagreement.mean()
    assert far > 5 * near


def test_member_sampling_is_seeded(linear_model):
    t = linear_data(10, 3)
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    a = linear_model.predict(t["obs"], t["action"], sample="member", generator=g()).next_obs
    b = linear_model.predict(t["obs"], t["action"], sample="member", generator=g()).next_obs
    assert torch.equal(a, b)


def test_ensemble_round_trip(linear_model, tmp_path):
    linear_model.save(tmp_path / "wm")
    loaded = load_world_model(tmp_path / "wm")
    t = linear_data(20, 4)
    assert torch.allclose(loaded.predict(t["obs"], t["action"]).next_obs,
                          linear_model.predict(t["obs"], t["action"]).next_obs)


def test_angle_dims_wrap():
    m = EnsembleDynamics(EnsembleConfig(obs_dim=1, action_dim=1, num_members=2, hidden_dims=[16], angle_dims=[0]))
    obs = np.array([[3.1], [-3.1]] * 50)
    nxt = np.array([[-3.1], [3.1]] * 50)  # a small rotation across the wrap
    d = m._delta(torch.as_tensor(obs), torch.as_tensor(nxt))
    assert torch.allclose(d.abs(), torch.full_like(d, 2 * np.pi - 6.2), atol=1e-6)


def _scene(n, seed):
    rng = np.random.default_rng(seed)
    obs = np.c_[rng.uniform(-0.2, 0.2, (n, 4)), rng.uniform(-np.pi, np.pi, n)]  # pusher x, y, block x, y, yaw
    return torch.as_tensor(obs, dtype=torch.float32), torch.as_tensor(rng.uniform(-0.2, 0.2, (n, 2)),
                                                                      dtype=torch.float32)


def _rigid(obs, action, angle, shift):
    """The whole scene rotated by ``angle`` about the origin and shifted by ``shift`` (2,)."""
    c, s = np.cos(angle), np.sin(angle)
    R = torch.tensor([[c, -s], [s, c]], dtype=torch.float32)
    sh = torch.as_tensor(shift, dtype=torch.float32)
    out = obs.clone()
    out[:, :2], out[:, 2:4] = obs[:, :2] @ R.T + sh, obs[:, 2:4] @ R.T + sh
    out[:, 4] = torch.remainder(obs[:, 4] + angle + np.pi, 2 * np.pi) - np.pi
    return out, action @ R.T + sh


def test_planar_frame_is_invariant_to_rigid_motion_and_inverts():
    frame = PlanarFrame((2, 3, 4), (0, 1), action_is_point=True)
    obs, action = _scene(64, 0)
    f = frame.features(obs, action)
    assert f.shape == (64, frame.feature_dim(5, 2)) == (64, 4 + 2 + 2 + 2 + 2 + 2)
    obs2, action2 = _rigid(obs, action, 1.3, [0.05, -0.1])
    f2 = frame.features(obs2, action2)
    body_cols = slice(8, 12)  # the pusher and its target in the block frame: the contact geometry
    assert torch.allclose(f[:, body_cols], f2[:, body_cols], atol=1e-5)
    assert not torch.allclose(f[:, :4], f2[:, :4], atol=1e-3)  # world positions do change (walls)
    delta = torch.randn(64, 5)
    assert torch.allclose(frame.to_world(obs, frame.to_body(obs, delta)), delta, atol=1e-6)
    assert torch.equal(frame.to_body(obs, delta)[:, [0, 1, 4]], delta[:, [0, 1, 4]])  # only the block's x, y turn


def test_object_frame_model_round_trips(tmp_path):
    c = EnsembleConfig(obs_dim=5, action_dim=2, num_members=2, hidden_dims=[16], angle_dims=[4],
                       frame_pose_dims=[2, 3, 4], frame_point_dims=[0, 1], frame_action_is_point=True, nll_beta=1.0)
    m = EnsembleDynamics(c)
    obs, action = _scene(200, 1)
    nxt = obs.clone()
    nxt[:, 2:4] += 0.01 * (action - obs[:, :2])
    m.fit({"obs": obs, "action": action, "next_obs": nxt, "reward": torch.zeros(200),
           "terminated": torch.zeros(200)}, steps=20, seed=0)
    m.save(tmp_path / "wm")
    loaded = load_world_model(tmp_path / "wm")
    assert loaded.frame == m.frame
    assert torch.equal(loaded.predict(obs, action).next_obs, m.predict(obs, action).next_obs)


def test_bad_input_raises(linear_model):
    with pytest.raises(ValueError, match=r"expected \(B, 3\)"):
        linear_model.predict(np.zeros((4, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="NaN"):
        linear_model.predict(np.full((4, 3), np.nan), np.zeros((4, 2)))
    with pytest.raises(KeyError, match="missing"):
        linear_model.fit({"obs": np.zeros((4, 3))})
    with pytest.raises(ValueError, match="angle_dims"):
        EnsembleConfig(obs_dim=3, angle_dims=[5])
    with pytest.raises(ValueError, match="frame_pose_dims must be the 3"):
        EnsembleConfig(obs_dim=5, frame_pose_dims=[2, 3])
    with pytest.raises(ValueError, match="outside the observation"):
        EnsembleConfig(obs_dim=5, frame_pose_dims=[2, 3, 7])
    with pytest.raises(ValueError, match="pairs"):
        EnsembleConfig(obs_dim=5, frame_pose_dims=[2, 3, 4], frame_point_dims=[0])
    with pytest.raises(ValueError, match="need frame_pose_dims"):
        EnsembleConfig(obs_dim=5, frame_action_is_point=True)
    with pytest.raises(ValueError, match="nll_beta"):
        EnsembleConfig(nll_beta=2.0)
    with pytest.raises(FileNotFoundError):
        load_world_model("/nonexistent/wm")


def test_guidance_moves_actions_toward_target():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    c = TrajectoryDiffusionConfig(obs_dim=2, action_dim=1, horizon=8, down_dims=[16, 32], step_embed_dim=16,
                                  num_inference_steps=10)
    s = rng.normal(size=(256, 8, 2))
    a = rng.uniform(-1, 1, (256, 8, 1))  # behaviour actions unrelated to the states
    gen = TrajectoryDiffusion(c)
    gen.fit(np.concatenate([s, a, np.zeros((256, 8, 1))], -1), steps=100, seed=0)
    target = lambda states: 0.8 * torch.ones(*states.shape[:2], 1)  # noqa: E731
    start = torch.as_tensor(s[:64, 0], dtype=torch.float32)
    free = gen.sample(start, generator=torch.Generator().manual_seed(1))
    guided = gen.sample(start, target, 0.8, generator=torch.Generator().manual_seed(1))
    d_free = (free[..., 2] - 0.8).abs().mean()
    d_guided = (guided[..., 2] - 0.8).abs().mean()
    assert d_guided < 0.5 * d_free, (d_guided, d_free)
    assert torch.allclose(guided[:, 0, :2], start, atol=1e-5)  # the start state is kept
    with pytest.raises(ValueError, match="target_policy"):
        gen.sample(start, None, 0.5)
    with pytest.raises(ValueError, match="segments has shape"):
        gen.fit(np.zeros((4, 5, 4)))


def test_latent_model_learns_and_round_trips(tmp_path):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    # a bright square moved by the action: next image = image shifted by action pixels
    imgs, acts, nxt = [], [], []
    for _ in range(128):
        x, y = rng.integers(4, 20, 2)
        dx, dy = rng.integers(-3, 4, 2)
        im, im2 = np.zeros((3, 32, 32)), np.zeros((3, 32, 32))
        im[:, y:y + 6, x:x + 6] = 1
        im2[:, y + dy:y + dy + 6, x + dx:x + dx + 6] = 1
        imgs.append(im), acts.append([dx, dy]), nxt.append(im2)
    wm = LatentWorldModel(LatentConfig(image_size=32, channels=[8, 16], latent_dim=16, hidden_dim=64))
    x, a, y = np.array(imgs), np.array(acts, float), np.array(nxt)
    before = float(((wm.predict(x, a) - torch.as_tensor(y).float()) ** 2).mean())
    wm.fit(x, a, y, steps=150, batch_size=32)
    after = float(((wm.predict(x, a) - torch.as_tensor(y).float()) ** 2).mean())
    assert after < 0.5 * before
    wm.save(tmp_path / "lat")
    assert torch.allclose(load_world_model(tmp_path / "lat").predict(x[:4], a[:4]), wm.predict(x[:4], a[:4]))
    assert wm.imagine(x[:2], np.zeros((2, 3, 2))).shape == (2, 3, 3, 32, 32)
    with pytest.raises(ValueError, match="actions have shape"):
        wm.predict(x[:2], a[:3])
