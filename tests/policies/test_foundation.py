import numpy as np
import pytest
import torch

from policies.foundation import FoundationPolicy, load_raptor
from policies.registry import load_policy


@pytest.fixture(scope="module")
def raptor():
    return load_raptor(clip_actions=False)


def test_raptor_has_2084_parameters(raptor):
    assert raptor.num_parameters == 2084  # incl. the 16 learned initial hidden-state values


def test_raptor_matches_the_packages_numpy_evaluation(raptor):
    import foundation_policy

    reference = foundation_policy.QuadrotorPolicy()
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(200, 8, 22)).astype(np.float32)
    reference.reset()
    raptor.reset()
    worst = 0.0
    for t in range(len(obs)):
        worst = max(worst, float(np.abs(reference.evaluate_step(obs[t]) - raptor.act(obs[t])).max()))
    assert worst < 1e-5


def test_raptor_matches_the_example_stored_in_the_checkpoint(raptor):
    import h5py

    from policies.foundation import raptor_checkpoint_path

    with h5py.File(raptor_checkpoint_path()) as f:
        x, y = f["example"]["input"][()], f["example"]["output"][()]
    raptor.reset()
    out = np.stack([raptor.act(x[t]) for t in range(len(x))])
    np.testing.assert_allclose(out, y, atol=1e-5)


def test_reset_mask_restarts_only_the_chosen_envs(raptor):
    obs = np.random.default_rng(1).normal(size=(3, 22)).astype(np.float32)
    raptor.reset()
    for _ in range(5):
        raptor.act(obs)
    raptor.reset(np.array([False, True, False]))
    h = raptor.hidden
    assert torch.allclose(h[1], raptor.model.initial_hidden)
    assert not torch.allclose(h[0], raptor.model.initial_hidden)


def test_save_load_round_trip(tmp_path, raptor):
    raptor.save(tmp_path / "ckpt")
    loaded = load_policy(tmp_path / "ckpt")
    assert isinstance(loaded, FoundationPolicy)
    obs = np.random.default_rng(2).normal(size=(4, 22)).astype(np.float32)
    raptor.reset()
    loaded.reset()
    np.testing.assert_array_equal(raptor.act(obs), loaded.act(obs))
    # overwriting an existing checkpoint leaves exactly one complete folder
    raptor.save(tmp_path / "ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_bad_inputs(tmp_path, raptor):
    with pytest.raises(ValueError, match=r"observation has shape \(4, 21\), expected \(B, 22\)"):
        raptor.act(np.zeros((4, 21), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        raptor.act(np.full((1, 22), np.nan, np.float32))
    with pytest.raises(FileNotFoundError, match="not a robo checkpoint"):
        load_policy(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_raptor(tmp_path / "missing.h5")
