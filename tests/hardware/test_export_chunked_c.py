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
