"""C export of a base policy plus a SAC residual (what ``robo finetune real_robot=betaflight_sitl`` builds into the
firmware): torch parity with exploration off, the SAC actor's own Gaussian with it on."""

import numpy as np
import pytest
import torch

from hardware.export import c_rollout, observation_sequence
from hardware.export.residual_c import export_residual_c, torch_residual_rollout
from policies.foundation import load_raptor
from robo.real.learner import LearnerConfig, build_sac

from tests.hardware.conftest import make_mlp


def trained_like_actor(seed: int = 0, log_std: float = -1.0):
    """A SAC actor with random weights (a learner's after some training: a residual far from 0)."""
    actor = build_sac(LearnerConfig(seed=seed)).actor
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.2)
        actor.log_std.bias.fill_(log_std)
    return actor


@pytest.mark.parametrize("base", [load_raptor, lambda: make_mlp(3)], ids=["raptor_gru", "mlp"])
def test_base_plus_residual_matches_torch(tmp_path, base):
    base, actor = base(), trained_like_actor()
    obs = 0.5 * observation_sequence(400, 22, 1)
    sources = export_residual_c(base, actor, 0.5, tmp_path)
    c, t = c_rollout(sources, obs), torch_residual_rollout(base, actor, 0.5, obs)
    print(f"\nmax |C - torch| {np.abs(c - t).max():.2e}")
    assert np.abs(c - t).max() <= 1e-5
    assert np.abs(t - torch_residual_rollout(base, trained_like_actor(1), 0.5, obs)).max() > 0.05  # the residual acts


def test_exploration_draws_the_actors_gaussian(tmp_path):
    base, actor = load_raptor(), trained_like_actor(log_std=-1.0)
    with torch.no_grad():
        actor.log_std.weight.zero_()  # std e^-1 everywhere, so the draws can be read back
    obs = 0.5 * observation_sequence(2000, 22, 2)
    mean = torch_residual_rollout(base, actor, 0.5, obs)
    sources = export_residual_c(base, actor, 0.5, tmp_path, explore=True, seed=7)
    explored = c_rollout(sources, obs)
    assert np.array_equal(explored, c_rollout(sources, obs))  # the same reset count, the same draw
    with torch.no_grad():
        mu = actor.mu(actor.latent_pi(torch.as_tensor(obs))).numpy()
    base_raw = mean - 0.5 * np.tanh(mu)
    # steps where neither the clip nor tanh's tail can bend the draw (chosen by the inputs, not the outcome)
    free = (np.abs(base_raw) < 0.45) & (np.abs(mu) < 0.5)
    eps = (np.arctanh((explored - base_raw) / 0.5) - mu)[free] / np.exp(-1.0)
    print(f"\nexploration noise: mean {eps.mean():+.3f}, std {eps.std():.3f} (N(0, 1) expected), {free.sum()} draws")
    assert free.sum() > 1000 and abs(eps.mean()) < 0.1 and abs(eps.std() - 1.0) < 0.1
    other = c_rollout(export_residual_c(base, actor, 0.5, tmp_path / "s", explore=True, seed=8), obs)
    assert np.abs(other - explored).mean() > 0.01  # another seed, another draw


def test_a_residual_that_does_not_fit_the_base_is_refused(tmp_path):
    actor = build_sac(LearnerConfig(obs_dim=18)).actor
    with pytest.raises(ValueError, match="same sizes"):
        export_residual_c(load_raptor(), actor, 0.5, tmp_path)
    with pytest.raises(ValueError, match="scale"):
        export_residual_c(load_raptor(), trained_like_actor(), 0.0, tmp_path)
