"""C export of the action-chunk policies (diffusion with an MLP denoiser, energy with an MLP backbone,
DSRL-steered): for the same noise, the C chunk matches ``predict_chunk`` and the C rollout (its own PRNG,
its own chunk queue) matches ``policy.act`` fed the noise C drew, within 1e-5."""

import numpy as np
import pytest

from hardware.export import export_c, verify_c
from hardware.export.c_build import compile_c
from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.energy import EnergyConfig, EnergyPolicy
from tests.hardware.conftest import make_diffusion_mlp as _diffusion
from tests.hardware.conftest import make_energy_mlp as _energy
from tests.hardware.conftest import make_steered as _steered

CASES = {
    "diffusion_ddim": lambda: _diffusion(),
    "diffusion_sample_prediction": lambda: _diffusion(prediction_type="sample", num_inference_steps=4),
    "energy": lambda: _energy(default_init="noise"),
    "energy_candidates_clip": lambda: _energy(n_candidates=3, grad_clip=0.5, default_init="uniform"),
    "steered_diffusion": lambda: _steered(_diffusion()),
    "steered_energy_stochastic": lambda: _steered(_energy(), stochastic=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_c_matches_torch_for_the_same_noise_and_in_a_rollout(tmp_path, name):
    policy = CASES[name]()
    sources = export_c(policy, tmp_path, seed=3)
    report = verify_c(policy, sources, steps=40)
    assert report.passed, report
    assert set(report.per_output) == {"chunk", "action"}
    assert report.max_abs_diff <= 1e-5
    # the example program builds with warnings as errors
    compile_c([tmp_path / "main.c", tmp_path / "robo_policy.c"], tmp_path / "example")


def test_the_c_prng_is_seeded_per_chunk_and_by_the_export_seed(tmp_path):
    from hardware.export.chunked_build import c_chunked_rollout
    from hardware.export.parity import observation_sequence

    policy = _diffusion()
    obs = observation_sequence(12, 5, 0)
    _, noise_a = c_chunked_rollout(export_c(policy, tmp_path / "a", seed=3), obs)
    _, noise_b = c_chunked_rollout(export_c(policy, tmp_path / "b", seed=4), obs)
    # steps 0-3 share chunk 0, 4-7 chunk 1: one draw per chunk, another one for the next, another seed another draw
    assert np.array_equal(noise_a[0], noise_a[3]) and not np.array_equal(noise_a[3], noise_a[4])
    assert not np.array_equal(noise_a[0], noise_b[0])
    assert abs(noise_a.mean()) < 0.2 and 0.8 < noise_a.std() < 1.2  # standard normal draws


@pytest.mark.parametrize("make, match", [
    (lambda: DiffusionPolicy(DiffusionConfig(obs_dim=5, action_dim=2, down_dims=[16, 32])), "denoiser"),
    (lambda: _diffusion(inference_scheduler="dpmsolver"), "ddim"),
    (lambda: EnergyPolicy(EnergyConfig(obs_dim=5, action_dim=2, d_model=16, n_layers=1)), "backbone"),
])
def test_chunked_policies_c_cannot_run_are_refused_in_one_line(tmp_path, make, match):
    with pytest.raises(ValueError, match=match) as e:
        export_c(make(), tmp_path)
    assert "\n" not in str(e.value)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["diffusion_ddim", "steered_diffusion"])
def test_a_plan_spread_over_steps_matches_torch_on_the_same_schedule(tmp_path, name):
    """``spread=S``: each chunk after the first is denoised over S control steps, from the window S steps before it
    takes over, and executed from the action for the step it takes over; torch on that schedule matches."""
    from hardware.export.chunked_build import c_chunked_rollout
    from hardware.export.parity import observation_sequence

    policy, obs = CASES[name](), observation_sequence(40, 5, 1)
    whole = c_chunked_rollout(export_c(policy, tmp_path / "whole", seed=3), obs)[0]
    for spread in (1, 3):  # horizon 8, 2 observations, 4 actions a chunk: at most 3
        sources = export_c(policy, tmp_path / f"s{spread}", seed=3, spread=spread)
        report = verify_c(policy, sources, steps=40, observations=obs)
        assert report.passed and report.max_abs_diff <= 1e-5, report
        spread_actions = c_chunked_rollout(sources, obs)[0]
        assert np.array_equal(spread_actions[:4], whole[:4])  # the first chunk is planned whole
        assert np.abs(spread_actions[4:] - whole[4:]).max() > 1e-3  # the others from older windows
    compile_c([tmp_path / "s3" / "main.c", tmp_path / "s3" / "robo_policy.c"], tmp_path / "example")


def test_a_spread_the_horizon_cannot_hold_is_refused(tmp_path):
    with pytest.raises(ValueError, match="must be 1 .. 3 for horizon 8"):
        export_c(_diffusion(), tmp_path, spread=4)
    with pytest.raises(ValueError, match="only a diffusion plan"):
        export_c(_energy(), tmp_path, spread=2)


def test_the_simulator_flies_a_spread_export_on_its_schedule():
    """``SpreadPlanner`` (robo's simulator beside a spread export) executes what ``torch_spread_rollout`` does."""
    from hardware.export.chunked_build import SpreadPlanner, torch_spread_rollout

    class Ramp:  # a deterministic planner: chunk i = the window's last first feature + i
        obs_dim, action_dim, kind, n_action_steps, n_obs_steps, horizon = 1, 1, "diffusion", 4, 2, 8
        noise_shape = (8, 1)

        def predict_chunk(self, window, noise=None):
            w = np.asarray(window, dtype=np.float32)
            return (w[:, -1, :1][:, None, :] + np.arange(8, dtype=np.float32)[None, :, None]).astype(np.float32)

    obs = np.arange(30, dtype=np.float32)[:, None] * 10
    planner = SpreadPlanner(Ramp(), 3)
    flown = np.stack([planner.act(o[None])[0] for o in obs])
    expected = torch_spread_rollout(Ramp(), obs, np.zeros((30, 8)), 3)
    np.testing.assert_array_equal(flown, expected)
    assert flown[4, 0] == obs[1, 0] + 4  # chunk 1: planned at step 1, its action for step 4
