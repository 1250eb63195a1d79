"""Energy-based chunk policies: the EBT-style energy transformer and implicit BC, on a bimodal toy task."""

import json
from functools import partial

import numpy as np
import pytest
import torch

from policies.chunked import ChunkedPolicy
from policies.energy import EnergyConfig, EnergyPolicy, ImplicitBCConfig, ImplicitBCPolicy
from policies.energy.configuration_energy import BACKBONE_NAMES
from policies.energy.modeling_energy import BACKBONES
from policies.registry import load_policy

STATS = {"obs": {"min": -torch.ones(2), "max": torch.ones(2)},
         "action": {"min": -1.5 * torch.ones(2), "max": 1.5 * torch.ones(2)}}


def energy_policy(**kw) -> EnergyPolicy:
    cfg = dict(obs_dim=2, action_dim=2, n_obs_steps=2, horizon=4, n_action_steps=2, actions_per_token=1, d_model=32,
               n_heads=2, n_layers=1, ff_dim=64, n_steps=2, train_steps=2)
    policy = EnergyPolicy(EnergyConfig(**{**cfg, **kw}))
    policy.set_normalization(STATS)
    return policy


def energy_mlp_policy(**kw) -> EnergyPolicy:
    """The energy policy with ``backbone: mlp`` instead of the transformer."""
    return energy_policy(**{"backbone": "mlp", "hidden_dims": [64, 64], **kw})


def ibc_policy(**kw) -> ImplicitBCPolicy:
    cfg = dict(obs_dim=2, action_dim=2, n_obs_steps=2, horizon=2, n_action_steps=1, hidden_dims=[64, 64],
               n_negatives=64, n_samples=256)
    policy = ImplicitBCPolicy(ImplicitBCConfig(**{**cfg, **kw}))
    policy.set_normalization(STATS)
    return policy


def toy_modes(p: torch.Tensor, horizon: int) -> torch.Tensor:
    """The two demonstrated chunks from position p (B, 2): a path to the origin bulging left or
    right of the straight line (an obstacle in the middle) -> (B, 2, horizon, 2)."""
    t = torch.arange(1, horizon + 1) / horizon
    perp = torch.stack([-p[:, 1], p[:, 0]], 1)
    perp = perp / perp.norm(dim=1, keepdim=True).clamp_min(1e-6)
    base = p[:, None] * (1 - t)[None, :, None]
    bump = 0.6 * torch.sin(torch.pi * t)[None, :, None] * perp[:, None]
    return torch.stack([base + bump, base - bump], dim=1)


def toy_batch(n: int, horizon: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Bimodal demos: the side is set by sign(p_y), except near p_y = 0 where it is a coin flip."""
    p = torch.rand(n, 2, generator=gen) * 2 - 1
    coin = torch.randint(0, 2, (n,), generator=gen)
    side = torch.where(p[:, 1].abs() < 0.2, coin, (p[:, 1] < 0).long())
    modes = toy_modes(p, horizon)
    obs = torch.stack([p, p], dim=1)
    return {"obs": obs, "action": modes[torch.arange(n), side]}


def energy_at(policy, obs: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
    """The model's energy (B,) of raw action chunks (B, horizon, 2) for raw observation windows."""
    with torch.no_grad():
        return policy.model(policy.model.obs_normalizer(obs), policy.model.action_normalizer(chunk))


def mode_error(policy, n: int = 256) -> float:
    """Mean squared distance of predicted chunks to the nearest demonstrated mode (raw units)."""
    batch = toy_batch(n, policy.horizon, torch.Generator().manual_seed(123))
    pred = policy.predict_chunk(batch["obs"])
    modes = toy_modes(batch["obs"][:, -1], policy.horizon)
    return ((pred[:, None] - modes) ** 2).mean((2, 3)).min(dim=1).values.mean().item()


def fit(policy, iters: int, lr: float = 2e-3, batch: int = 64):
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(policy.model.parameters(), lr=lr)
    policy.model.train()
    for _ in range(iters):
        loss = policy.compute_loss(toy_batch(batch, policy.horizon, gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
        policy.update_ema()
    policy.model.eval()
    return policy


@pytest.fixture(scope="module")
def trained_energy():
    torch.manual_seed(0)
    return fit(energy_policy(), 250)


@pytest.fixture(scope="module")
def trained_ibc():
    torch.manual_seed(0)
    return fit(ibc_policy(), 300)


MAKERS = [energy_policy, energy_mlp_policy, ibc_policy]


@pytest.mark.parametrize("make", MAKERS)
def test_protocol_and_shapes(make):
    policy = make()
    assert isinstance(policy, ChunkedPolicy)
    obs = np.zeros((3, policy.n_obs_steps, 2), np.float32)
    chunk, energy = policy.predict_chunk(obs, return_energy=True)
    assert isinstance(chunk, np.ndarray) and chunk.shape == (3, policy.horizon, 2)
    assert energy.shape == (3,) and policy.last_energy.shape == (3,)
    assert policy.noise_shape == (policy.horizon, 2)
    action = policy.act(torch.zeros(3, 2))
    assert isinstance(action, torch.Tensor) and action.shape == (3, 2)
    loss = policy.compute_loss(toy_batch(4, policy.horizon, torch.Generator().manual_seed(0)))
    assert loss.ndim == 0 and torch.isfinite(loss)


@pytest.mark.parametrize("make", MAKERS)
def test_same_initial_guess_same_chunk_and_guess_steers(make):
    policy = make()
    obs = torch.rand(4, policy.n_obs_steps, 2)
    guess = torch.rand(4, *policy.noise_shape) * 2 - 1
    a, b = policy.predict_chunk(obs, guess), policy.predict_chunk(obs, guess)
    assert torch.equal(a, b)
    other = policy.predict_chunk(obs, -guess)
    assert not torch.allclose(a, other)


@pytest.mark.parametrize("make", MAKERS)
def test_save_load_round_trip(make, tmp_path):
    policy = fit(make(), 3)
    loaded = load_policy(policy.save(tmp_path / "ckpt"))
    assert type(loaded) is type(policy) and loaded.config == policy.config
    obs = torch.rand(5, policy.n_obs_steps, 2)
    guess = torch.rand(5, *policy.noise_shape) * 2 - 1
    a, ea = policy.predict_chunk(obs, guess, return_energy=True)
    b, eb = loaded.predict_chunk(obs, guess, return_energy=True)
    assert torch.equal(a, b) and torch.equal(ea, eb)
    for key, value in policy.model.state_dict().items():
        assert torch.equal(value, loaded.model.state_dict()[key]), key


@pytest.mark.parametrize("make", MAKERS)
def test_weight_average_acts_and_is_what_is_saved(make, tmp_path):
    policy = fit(make(use_ema=True, ema_max_decay=0.9), 20)
    raw = make()
    raw.model.load_state_dict(policy.model.state_dict())
    averaged = make()
    averaged.model.load_state_dict(policy.ema.module.state_dict())
    obs = torch.rand(5, policy.n_obs_steps, 2)
    guess = torch.rand(5, *policy.noise_shape) * 2 - 1
    chunk = policy.predict_chunk(obs, guess)
    assert torch.equal(chunk, averaged.predict_chunk(obs, guess))
    assert not torch.allclose(chunk, raw.predict_chunk(obs, guess))
    loaded = load_policy(policy.save(tmp_path / "ckpt"))
    assert torch.equal(loaded.predict_chunk(obs, guess), chunk)
    for key, value in policy.ema.module.state_dict().items():  # both copies start from the saved average
        assert torch.equal(loaded.model.state_dict()[key], value) and torch.equal(
            loaded.ema.module.state_dict()[key], value), key


def test_energy_inference_is_k_gradient_steps(trained_energy):
    policy = trained_energy
    obs = toy_batch(8, policy.horizon, torch.Generator().manual_seed(5))["obs"]
    calls = []
    hook = policy.model.head.register_forward_hook(lambda *_: calls.append(1))
    try:
        for k in (1, 2, 4):
            calls.clear()
            policy.predict_chunk(obs, n_steps=k)
            assert len(calls) == k + 1  # k descent steps + the final energy
    finally:
        hook.remove()
    errors = [mode_error_steps(policy, k) for k in (1, 2, 4)]
    batch = toy_batch(256, policy.horizon, torch.Generator().manual_seed(123))
    modes = toy_modes(batch["obs"][:, -1], policy.horizon)
    start = policy.model.action_normalizer.unnormalize(torch.zeros(1, policy.horizon, 2))  # the default guess
    error_start = ((start[:, None] - modes) ** 2).mean((2, 3)).min(dim=1).values.mean().item()
    assert errors[0] < 0.3 * error_start and errors[1] <= errors[0] and errors[2] < 1.2 * errors[1], errors
    _, e_start = policy.predict_chunk(batch["obs"], n_steps=1, return_energy=True)
    obs_n = policy.model.obs_normalizer(batch["obs"])
    with torch.no_grad():
        e_zero = policy.model(obs_n, torch.zeros(256, policy.horizon, 2))
    assert e_start.mean() < e_zero.mean()  # one step already lowers the energy


def test_candidates_keep_the_lowest_energy_chunk(trained_energy):
    policy = trained_energy
    obs = toy_batch(32, policy.horizon, torch.Generator().manual_seed(9))["obs"]
    guess = torch.randn(32, *policy.noise_shape, generator=torch.Generator().manual_seed(10))
    one, e_one = policy.predict_chunk(obs, guess, return_energy=True)
    policy.reset()
    best, e_best = policy.predict_chunk(obs, guess, return_energy=True, n_candidates=8)
    assert (e_best <= e_one + 1e-5).all() and (e_best < e_one - 1e-4).any()  # the guess is one of the candidates
    assert torch.allclose(energy_at(policy, obs, best), e_best, atol=1e-5)  # the energy reported is the kept chunk's
    kept_guess = (e_best - e_one).abs() < 1e-6
    assert torch.allclose(best[kept_guess], one[kept_guess], atol=1e-5)
    policy.reset()  # reseeds the candidates' generator: the same draws again
    assert torch.equal(policy.predict_chunk(obs, guess, n_candidates=8), best)
    with pytest.raises(ValueError, match="n_candidates"):
        EnergyConfig(n_candidates=0).validate()


def mode_error_steps(policy, k):
    batch = toy_batch(256, policy.horizon, torch.Generator().manual_seed(123))
    pred = policy.predict_chunk(batch["obs"], n_steps=k)
    modes = toy_modes(batch["obs"][:, -1], policy.horizon)
    return ((pred[:, None] - modes) ** 2).mean((2, 3)).min(dim=1).values.mean().item()


@pytest.mark.parametrize("name", ["trained_energy", "trained_ibc"])
def test_training_beats_untrained(name, request):
    trained = request.getfixturevalue(name)
    untrained = energy_policy() if name == "trained_energy" else ibc_policy()
    err_trained, err_untrained = mode_error(trained), mode_error(untrained)
    assert err_trained < 0.35 * err_untrained, (err_trained, err_untrained)
    assert err_trained < 0.05, err_trained


@pytest.mark.parametrize("name", ["trained_energy", "trained_ibc"])
def test_energy_lower_at_demos_than_at_random_chunks(name, request):
    policy = request.getfixturevalue(name)
    batch = toy_batch(256, policy.horizon, torch.Generator().manual_seed(7))
    obs_n = policy.model.obs_normalizer(batch["obs"])
    with torch.no_grad():
        e_demo = policy.model(obs_n, policy.model.action_normalizer(batch["action"]))
        e_rand = policy.model(obs_n, torch.rand(256, policy.horizon, 2) * 2 - 1)
    assert (e_demo < e_rand).float().mean() > 0.9


@pytest.mark.parametrize("make", MAKERS)
def test_act_queues_per_env(make):
    policy = make(n_action_steps=2, horizon=4) if make is not ibc_policy else make(n_action_steps=2, horizon=3)
    obs = torch.rand(3, 2) * 2 - 1
    chunk = policy.predict_chunk(torch.stack([obs, obs], 1))
    first, second = policy.act(obs), policy.act(obs + 0.3)  # second comes from the queue: obs ignored
    torch.testing.assert_close(first, chunk[:, 1])
    torch.testing.assert_close(second, chunk[:, 2])
    policy.reset(np.array([True, False, False]))
    third = policy.act(obs)  # env 0 replans from a fresh queue, envs 1, 2 replan on schedule
    torch.testing.assert_close(third[0], chunk[0, 1])
    assert policy.last_energy.shape == (3,)


@pytest.mark.parametrize("make", MAKERS)
def test_bad_inputs_raise_clear_errors(make):
    policy = make()
    with pytest.raises(ValueError, match="obs_history has shape"):
        policy.predict_chunk(torch.zeros(2, policy.n_obs_steps + 1, 2))
    with pytest.raises(ValueError, match="NaN"):
        policy.predict_chunk(torch.full((2, policy.n_obs_steps, 2), float("nan")))
    with pytest.raises(ValueError, match="initial guess"):
        policy.predict_chunk(torch.zeros(2, policy.n_obs_steps, 2), torch.zeros(2, policy.horizon + 1, 2))
    with pytest.raises(ValueError, match="observation has shape"):
        policy.act(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="batch\\['action'\\] has shape"):
        policy.compute_loss({"obs": torch.zeros(2, policy.n_obs_steps, 2), "action": torch.zeros(2, 1, 2)})
    with pytest.raises(KeyError, match="action"):
        policy.set_normalization({"obs": STATS["obs"]})


def test_bad_configs_raise():
    with pytest.raises(ValueError, match="horizon"):
        EnergyConfig(horizon=4, n_action_steps=8).validate()
    with pytest.raises(ValueError, match="divisible"):
        EnergyPolicy(EnergyConfig(d_model=30, n_heads=4))
    with pytest.raises(ValueError, match="noise_shrink"):
        ImplicitBCPolicy(ImplicitBCConfig(noise_shrink=0.0))
    with pytest.raises(ValueError, match="ema_max_decay"):
        EnergyPolicy(EnergyConfig(use_ema=True, ema_max_decay=1.0))
    with pytest.raises(ValueError, match="multiple of actions_per_token"):
        EnergyConfig(horizon=5, n_action_steps=2, actions_per_token=2).validate()
    # the MLP backbone has no action tokens: any horizon
    odd = EnergyPolicy(EnergyConfig(backbone="mlp", hidden_dims=[16], horizon=5, n_action_steps=2, actions_per_token=2))
    assert odd.horizon == 5


def test_regression_takes_one_guess_per_demo():
    with pytest.raises(ValueError, match="n_hypotheses=3 must be 1"):
        EnergyConfig(n_hypotheses=3).validate()
    policy = energy_policy()
    loss = policy.compute_loss(toy_batch(4, policy.horizon, torch.Generator().manual_seed(0)))
    loss.backward()
    assert torch.isfinite(loss) and policy.model.log_step_size.grad is not None


@pytest.mark.parametrize("make", MAKERS)
def test_checkpoints_with_removed_options_load_when_they_held_the_default(make, tmp_path):
    """A checkpoint saved before an option was removed still has its key in config.json: loaded when the key
    holds the value the code now runs, refused with a ValueError naming it otherwise."""
    policy = make()
    folder = policy.save(tmp_path / "ckpt")
    doc = json.loads((folder / "config.json").read_text())
    removed = policy.config_class.REMOVED_OPTIONS
    assert not set(removed) & set(doc["config"])  # new checkpoints do not write them
    key = "langevin_std" if policy.kind == "energy" else "obs_noise_std"
    for value, loads in ((removed[key], True), (0.1, False)):
        doc["config"] = {**doc["config"], **removed, key: value}
        (folder / "config.json").write_text(json.dumps(doc))
        if loads:
            assert load_policy(folder).config == policy.config
        else:
            with pytest.raises(ValueError, match=f"{key}=0.1, an option robo no longer has"):
                load_policy(folder)


def test_descent_clamps_straight_through():
    from policies.energy.modeling_energy import straight_through_clamp

    a = torch.tensor([-1.5, -0.5, 0.0, 2.0], requires_grad=True)
    out = straight_through_clamp(a)
    assert out.tolist() == [-1.0, -0.5, 0.0, 1.0]
    (out * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert a.grad.tolist() == [1.0, 2.0, 3.0, 4.0]  # a hard clamp would give 0 at -1.5 and 2.0


def test_energy_score_loss_rewards_spread():
    from policies.energy.modeling_energy import energy_score

    target = torch.zeros(2, 3, 2)  # 1 demo (all zeros), 2 samples: spread (+1, -1) vs. collapsed (0, 0)
    spread = torch.stack([torch.ones(3, 2), -torch.ones(3, 2)])
    collapsed = torch.zeros(2, 3, 2)
    norm = 6 ** 0.5
    assert energy_score(spread, target, 2).item() == pytest.approx(norm - 0.5 * 2 * norm, abs=1e-4)
    assert energy_score(collapsed, target, 2).item() == pytest.approx(0.0, abs=1e-3)
    with pytest.raises(ValueError, match="n_hypotheses"):
        EnergyConfig(objective="energy_score", n_hypotheses=1).validate()


@pytest.mark.parametrize("spread_weight", [1.0, 0.5, 0.25])
def test_a_lighter_spread_term_keeps_separated_modes_and_draws_each_mode_together(spread_weight):
    from policies.energy.modeling_energy import energy_score

    # two demos, at +1 and -1 (a chunk of 3 x 2 actions), 2 samples each, the samples at +a and -a
    target = torch.cat([torch.ones(2, 3, 2), -torch.ones(2, 3, 2)])
    scales = torch.linspace(0.0, 2.0, 41)
    scores = [energy_score(a * torch.cat([torch.ones(1, 3, 2), -torch.ones(1, 3, 2)]).repeat(2, 1, 1), target, 2,
                           spread_weight=spread_weight).item() for a in scales]
    at_demos = scores[20]  # a = 1: the modes stay where the demos are (the proper score is flat beyond)
    assert at_demos == pytest.approx(min(scores), abs=1e-3) and at_demos < scores[19] - 1e-2
    # one demo (at 0), samples at +-s: the proper score is indifferent to s, a lighter spread term pulls them in
    near, far = (s * torch.stack([torch.ones(3, 2), -torch.ones(3, 2)]) for s in (0.1, 1.0))
    gap = energy_score(far, torch.zeros(2, 3, 2), 2, spread_weight=spread_weight) - energy_score(
        near, torch.zeros(2, 3, 2), 2, spread_weight=spread_weight)
    assert gap.item() == pytest.approx((1 - spread_weight) * 0.9 * 6 ** 0.5, abs=1e-3)
    with pytest.raises(ValueError, match="spread_weight"):
        EnergyConfig(objective="energy_score", n_hypotheses=4, spread_weight=0.0).validate()


def _bimodal_fractions(objective: str, n_hypotheses: int, make=energy_policy) -> tuple[float, float, float]:
    """Train on demos that go to +0.7 or -0.7 (one fixed observation); fractions of 200 chunks
    descended from noise that land near +0.7, near -0.7, and in between."""
    torch.manual_seed(0)
    policy = make(objective=objective, n_hypotheses=n_hypotheses, loss_on="last", default_init="noise")
    policy.set_normalization({"obs": STATS["obs"], "action": {"min": -torch.ones(2), "max": torch.ones(2)}})
    opt = torch.optim.Adam(policy.model.parameters(), 1e-3)
    policy.model.train()
    for _ in range(1000):
        sign = torch.randint(0, 2, (64, 1, 1)) * 2 - 1.0
        loss = policy.compute_loss({"obs": torch.zeros(64, policy.n_obs_steps, 2),
                                    "action": 0.7 * sign.expand(-1, policy.horizon, 2)})
        opt.zero_grad()
        loss.backward()
        opt.step()
    policy.model.eval()
    mean = policy.predict_chunk(torch.zeros(200, policy.n_obs_steps, 2)).mean((1, 2))
    fractions = (mean > 0.4, mean < -0.4, mean.abs() < 0.4)
    return tuple(f.float().mean().item() for f in fractions)


@pytest.mark.slow  # two 1,000-step trainings: ~2 min, the default suite's longest test
def test_energy_score_descends_into_both_modes_where_regression_averages():
    # measured over training seeds 0-7: up 0.45-0.74, down 0.25-0.50, between <= 0.05
    up, down, between = _bimodal_fractions("energy_score", 4)
    assert up > 0.2 and down > 0.2 and between < 0.15, (up, down, between)
    up, down, between = _bimodal_fractions("regression", 1)
    assert between > 0.9, (up, down, between)  # MSE from independent guesses learns the mean, 0


def test_every_backbone_the_config_accepts_builds():
    assert tuple(BACKBONES) == BACKBONE_NAMES  # the config checks names against the one, the models build the other
    for name in BACKBONE_NAMES:
        policy = EnergyPolicy(EnergyConfig(backbone=name, hidden_dims=[16, 16], horizon=4, n_action_steps=2))
        chunk = policy.predict_chunk(np.zeros((3, 2, 5), np.float32))
        assert chunk.shape == (3, 4, 2) and np.isfinite(chunk).all(), name


@pytest.mark.parametrize("backbone", ["mlp", "resmlp"])
def test_mlp_backbone_descends_into_both_modes(backbone):
    make = partial(energy_mlp_policy, backbone=backbone)
    policy = make()
    model_class = {"mlp": "DescentEnergyMLP", "resmlp": "DescentEnergyResMLP"}[backbone]
    assert type(policy.model).__name__ == model_class and policy.model.step_size.item() == 1.0
    # measured over training seeds 0-3: up 0.42-0.49, down 0.47-0.50, between 0.02-0.105;
    # resmlp (seed 0): up 0.49, down 0.475, between 0.035
    up, down, between = _bimodal_fractions("energy_score", 4, make)
    assert up > 0.2 and down > 0.2 and between < 0.15, (up, down, between)
    with pytest.raises(ValueError, match="backbone"):
        EnergyConfig(backbone="conv").validate()
    with pytest.raises(ValueError, match="hidden_dims"):
        EnergyConfig(backbone="mlp", hidden_dims=[]).validate()
    with pytest.raises(ValueError, match="one width"):
        EnergyConfig(backbone="resmlp", hidden_dims=[64, 32]).validate()


IMAGE = dict(image_shape=[3, 8, 8], encoder_channels=[8], spatial_keypoints=4, image_feature_dim=8)


def side_patch_batch(n: int, gen: torch.Generator) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Dark 8 x 8 images with a bright 3 x 3 patch in the left or the right third, and demo chunks of -0.6 or
    +0.6 (the side); the state is zero, so only the image tells them apart. -> (batch, right (n,) bool)."""
    right = torch.rand(n, generator=gen) < 0.5
    x0 = torch.where(right, 5, 0)
    y0 = torch.randint(0, 6, (n,), generator=gen)
    image = 0.05 * torch.rand(n, 2, 3, 8, 8, generator=gen)
    for i in range(n):
        image[i, :, :, y0[i]:y0[i] + 3, x0[i]:x0[i] + 3] = 1.0
    action = torch.where(right, 0.6, -0.6)[:, None, None].expand(n, 4, 2).clone()
    return {"obs": torch.zeros(n, 2, 2), "action": action, "image": image}, right


@pytest.mark.parametrize("backbone", ["resmlp", "transformer"])
def test_image_energy_policy_reads_the_image(backbone, tmp_path):
    """The energy policy on image observations: its chunks follow what only the image shows, the encoder trains
    through the unrolled descent, and a checkpoint round-trips with its encoder."""
    torch.manual_seed(0)
    policy = energy_policy(backbone=backbone, hidden_dims=[64, 64], objective="energy_score", n_hypotheses=4,
                           spread_weight=0.5, loss_on="last", default_init="noise", **IMAGE)
    stem = policy.model.image_encoder.stem[0].weight.detach().clone()
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(policy.model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = policy.compute_loss(side_patch_batch(32, gen)[0])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert not torch.equal(stem, policy.model.image_encoder.stem[0].weight)  # the encoder learned too
    batch, right = side_patch_batch(64, gen)
    window = {"state": batch["obs"], "image": batch["image"]}
    side = policy.predict_chunk(window).mean(dim=(1, 2))
    assert (side[right] > 0.3).float().mean() > 0.9 and (side[~right] < -0.3).float().mean() > 0.9, side
    loaded = load_policy(policy.save(tmp_path / "ckpt"))
    guess = torch.zeros(64, *policy.noise_shape)
    assert torch.equal(loaded.predict_chunk(window, guess), policy.predict_chunk(window, guess))


def test_image_energy_policy_acts_per_env_and_checks_its_inputs():
    policy = energy_policy(backbone="resmlp", hidden_dims=[16, 16], **IMAGE)
    obs = {"state": np.zeros((3, 2), np.float32), "image": np.random.rand(3, 3, 8, 8).astype(np.float32)}
    action = policy.act(obs)
    assert isinstance(action, np.ndarray) and action.shape == (3, 2)
    window = policy._queue.image
    assert window.shape == (3, 2, 3, 8, 8)
    assert torch.equal(window[:, 0], window[:, 1])  # the first image fills the window
    policy.act({"state": obs["state"], "image": np.zeros((3, 3, 8, 8), np.float32)})
    window = policy._queue.image
    assert float(window[:, 1].abs().max()) == 0.0 and float(window[:, 0].min()) >= 0.0
    with pytest.raises(ValueError, match="observes images"):
        policy.act(np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"image has shape \(3, 3, 16, 16\), expected \(B, 3, 8, 8\)"):
        policy.act({"state": obs["state"], "image": np.zeros((3, 3, 16, 16), np.float32)})
    with pytest.raises(ValueError, match="image contains NaN"):
        policy.compute_loss({"obs": torch.zeros(2, 2, 2), "action": torch.zeros(2, 4, 2),
                             "image": torch.full((2, 2, 3, 8, 8), float("nan"))})
    with pytest.raises(ValueError, match="image_shape"):
        EnergyConfig(image_shape=[1, 8, 8]).validate()
    with pytest.raises(ValueError, match="encoder_channels"):
        EnergyConfig(image_shape=[3, 8, 8], encoder_channels=[]).validate()


def landing_error(policy, std: float, n: int = 256) -> float:
    """Mean distance (normalized chunk units) at which the descent from demos noised by N(0, std^2) lands
    from them, on toy demos the policy never trained on."""
    from policies.energy.modeling_energy import descend

    batch = toy_batch(n, policy.horizon, torch.Generator().manual_seed(321))
    obs_n, demo = policy.model.obs_normalizer(batch["obs"]), policy.model.action_normalizer(batch["action"])
    noised = demo + std * torch.randn(demo.shape, generator=torch.Generator().manual_seed(7))
    landed = descend(policy.model, obs_n, noised, policy.config.n_steps)[-1]
    return float((landed - demo).flatten(1).norm(dim=1).mean())


def test_denoising_term_brings_noised_demos_back():
    with pytest.raises(ValueError, match="denoise_weight"):
        EnergyConfig(denoise_weight=-1.0).validate()
    with pytest.raises(ValueError, match="denoise_max_std"):
        EnergyConfig(denoise_max_std=0.0).validate()
    common = dict(backbone="resmlp", hidden_dims=[64, 64], objective="energy_score", n_hypotheses=4, loss_on="last",
                  train_steps=3, n_steps=3, default_init="noise")
    torch.manual_seed(0)
    denoised = energy_mlp_policy(denoise_weight=1.0, **common)
    plain = energy_mlp_policy(**common)
    plain.model.load_state_dict(denoised.model.state_dict())
    # the term adds to the loss (same draws for the energy score) and trains the step size too
    batch = toy_batch(32, 4, torch.Generator().manual_seed(0))
    losses = []
    for policy in (denoised, plain):
        torch.manual_seed(5)
        losses.append(policy.compute_loss(batch))
    assert losses[0] > losses[1]
    losses[0].backward()
    assert denoised.model.log_step_size.grad is not None
    # trained on the same batches (100 steps), the denoising policy brings noised held-out demos back closer
    # (0.08 against 0.30 when written) and samples the modes from random guesses no worse (0.017 against 0.029)
    for policy in (denoised, plain):
        torch.manual_seed(1)
        fit(policy, 100)
    assert landing_error(denoised, 0.2) < 0.5 * landing_error(plain, 0.2)
    assert mode_error(denoised) < 1.2 * mode_error(plain)
