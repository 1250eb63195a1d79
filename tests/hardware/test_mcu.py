"""Exported policies built for flight-controller MCUs with Debian's arm-none-eabi-gcc and stepped on qemu's
emulated Cortex-M4F / M7: the same actions as torch, instruction counts that follow the work done, and which loop
rates a policy holds."""

import numpy as np
import pytest

from hardware.export import export_c, module_spec, reference_rollout
from hardware.export.chunked_build import c_chunked_rollout
from hardware.export.mcu import MCUS, mcu_rollout, mcu_size
from hardware.export.parity import observation_sequence
from tests.hardware.conftest import make_energy_mlp, make_mlp


def test_raptor_on_the_f405_matches_torch_and_fits_a_1khz_loop(tmp_path, raptor):
    sources = export_c(raptor, tmp_path)
    obs = observation_sequence(40, raptor.obs_dim, 0)
    run = mcu_rollout(sources, MCUS["stm32f405"], obs)
    np.testing.assert_allclose(run.actions, reference_rollout(module_spec(raptor), obs), atol=1e-5)
    # a GRU step does the same work every step: ~2k weights, a few instructions each
    assert 2084 * 3 < run.instructions.mean() < 2084 * 20
    assert run.instructions.max() - run.instructions.min() < 0.05 * run.instructions.mean()
    assert run.fits(1000) and run.us_per_step.max() < 1000
    size = mcu_size(sources, MCUS["stm32f405"])
    assert 2084 * 4 < size["flash"] < 2084 * 4 + 16 * 1024  # the weights, in flash, and little code
    assert size["state"] == run.state_bytes and size["ram"] >= size["state"] + size["stack"] > 0


def test_instructions_follow_the_network_width(tmp_path):
    narrow = mcu_rollout(export_c(make_mlp(hidden_dims=[32, 32]), tmp_path / "a"), MCUS["stm32f722"],
                         observation_sequence(8, 22, 0))
    wide = mcu_rollout(export_c(make_mlp(hidden_dims=[64, 64]), tmp_path / "b"), MCUS["stm32f722"],
                       observation_sequence(8, 22, 0))
    macs = lambda h: 22 * h + h * h + h * 4  # noqa: E731
    ratio = wide.instructions.mean() / narrow.instructions.mean()
    assert 0.8 * macs(64) / macs(32) < ratio < 1.1 * macs(64) / macs(32)


def test_a_chunk_policy_plans_every_n_action_steps_on_the_m7(tmp_path):
    policy = make_energy_mlp(n_candidates=2, default_init="noise")
    sources = export_c(policy, tmp_path)
    obs = observation_sequence(12, policy.obs_dim, 0)
    run = mcu_rollout(sources, MCUS["stm32h743"], obs)
    np.testing.assert_allclose(run.actions, c_chunked_rollout(sources, obs)[0], atol=1e-5)
    planning = run.instructions[::policy.n_action_steps]
    popping = np.delete(run.instructions, np.s_[::policy.n_action_steps])
    assert planning.min() > 50 * popping.max()  # the queue pops in a few hundred instructions
    assert run.fits(100, spread=True) and run.us_per_step.mean() < run.us_per_step.max()


def test_a_missing_toolchain_names_the_debian_package(tmp_path, monkeypatch):
    sources = export_c(make_mlp(), tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="install Debian's gcc-arm-none-eabi libnewlib-arm-none-eabi") as e:
        mcu_size(sources, MCUS["stm32f405"])
    assert "\n" not in str(e.value)
