"""C99 export: the generated code compiles with gcc and matches torch within 1e-5 over 500 steps."""

import re
import shutil
import subprocess

import numpy as np
import pytest

from hardware.export import (c_graph, c_rollout, export_c, generate_c, object_size, observation_sequence, time_c_step,
                             verify_c)
from hardware.export.c_build import compile_c

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None,
                               reason="gcc is not installed: the C export tests compile the generated code")


@needs_gcc
@pytest.mark.parametrize("config", [dict(), dict(activation="tanh", squash="clip", hidden_dims=[32, 32, 16])])
def test_mlp_actor_matches_torch_over_500_steps(tmp_path, mlp_factory, config):
    policy = mlp_factory(**config)
    sources = export_c(policy, tmp_path)
    mean, std = policy.model.obs_mean.numpy(), policy.model.obs_std.numpy()
    obs = mean + std * observation_sequence(500, policy.obs_dim)  # raw observations around the stats
    report = verify_c(policy, sources, atol=1e-5, observations=obs)
    assert report.passed and report.max_abs_diff < 1e-5, report.as_dict()
    assert report.checks == ["C rollout, 500 steps, gcc -O2"]
    assert (np.abs(c_rollout(sources, obs)) < 0.999).mean() > 0.5  # most actions are not squashed flat
    assert "(x[i] - mean[i]) / std[i]" in sources.source  # the normalization is in the C code


@needs_gcc
def test_raptor_gru_matches_torch_over_500_steps(tmp_path, raptor):
    sources = export_c(raptor, tmp_path)
    report = verify_c(raptor, sources, steps=500, atol=1e-5)
    assert report.passed and report.max_abs_diff < 1e-5, report.as_dict()
    # the state is carried: a fresh reset at step 250 would not reproduce torch's second half
    obs = observation_sequence(500, raptor.obs_dim)
    full = c_rollout(sources, obs)
    restarted = c_rollout(sources, obs[250:])
    assert np.abs(full[250:] - restarted).max() > 1e-3
    assert (np.abs(full) < 0.999).mean() > 0.5  # most actions are not clipped, so parity is not trivial


@needs_gcc
def test_random_gru_matches_torch_over_500_steps(tmp_path, gru_policy):
    sources = export_c(gru_policy, tmp_path, prefix="gru_ctrl")
    assert (tmp_path / "gru_ctrl.h").is_file() and "void gru_ctrl_step(gru_ctrl_state *state" in sources.header
    report = verify_c(gru_policy, sources, steps=500, atol=1e-5, seed=3)
    assert report.passed, report.as_dict()


@needs_gcc
@pytest.mark.parametrize("which", ["mlp", "raptor"])
def test_example_main_compiles_and_checks_torch_actions(tmp_path, which, mlp_policy, raptor):
    policy = mlp_policy if which == "mlp" else raptor
    sources = export_c(policy, tmp_path)
    exe = compile_c([tmp_path / "main.c", tmp_path / "robo_policy.c"], tmp_path / "example")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "max |C - torch| over 10 steps" in r.stdout
    assert "expected_action" in sources.main


@needs_gcc
def test_a_changed_weight_is_caught(tmp_path, raptor):
    sources = export_c(raptor, tmp_path)
    first = re.search(r"l0_weight\[\d+\] = \{\n    (\S+?f)", sources.source).group(1)
    broken = type(sources)(sources.prefix, sources.header,
                           sources.source.replace(first, f"{float(first[:-1]) + 0.5:.6f}f", 1), sources.main)
    assert not verify_c(raptor, broken, steps=100).passed


def test_generated_code_is_static_const_heapless_and_deterministic(raptor, mlp_policy):
    for policy in (raptor, mlp_policy):
        a, b = (generate_c(c_graph(policy)) for _ in range(2))
        assert a.files == b.files
        assert "malloc" not in a.source and "free(" not in a.source
        arrays = re.findall(r"^(static const float|static float|float) (l\d+_\w+)\[", a.source, re.M)
        assert arrays and all(kind == "static const float" for kind, _ in arrays)
        n = sum(int(m) for m in re.findall(r"^static const float l\d+_\w+\[(\d+)\]", a.source, re.M))
        assert n == c_graph(policy).num_floats
    assert c_graph(raptor).num_floats == 2084
    assert "float gru1[16];" in generate_c(c_graph(raptor)).header


def test_identity_normalization_is_left_out(mlp_factory):
    policy = mlp_factory()
    policy.model.obs_mean.zero_()
    policy.model.obs_std.fill_(1.0)
    assert "normalize(" not in generate_c(c_graph(policy)).source


def test_errors_are_clear(mlp_policy):
    class Diffusion:
        kind = "diffusion"

    with pytest.raises(ValueError, match="C export supports MLP and GRU policies.*not 'diffusion'.*format=onnx"):
        c_graph(Diffusion())
    with pytest.raises(ValueError, match="not a C identifier"):
        generate_c(c_graph(mlp_policy), prefix="my-policy")
    mlp_policy.model.net[0].weight.data[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        c_graph(mlp_policy)


@needs_gcc
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed: needed to test use from C++ (PX4)")
def test_header_links_from_cpp(tmp_path, raptor):
    """PX4 modules are C++: the header's extern "C" lets them call the C step function."""
    export_c(raptor, tmp_path)
    obj = compile_c([tmp_path / "robo_policy.c"], tmp_path / "robo_policy.o", compile_only=True)
    (tmp_path / "app.cpp").write_text(
        '#include "robo_policy.h"\n#include <cstdio>\nint main() { robo_policy_state s; float o[22] = {0}, a[4];\n'
        '  robo_policy_reset(&s); for (int i = 0; i < 5; ++i) robo_policy_step(&s, o, a);\n'
        '  std::printf("%u %f\\n", (unsigned)s.steps, a[0]); return 0; }\n')
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", str(tmp_path / "app.cpp"), str(obj), "-o",
                    str(tmp_path / "app"), "-lm"], check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "app")], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "5" and -1.0 <= float(out[1]) <= 1.0


@needs_gcc
def test_timing_and_size_helpers(raptor):
    sources = generate_c(c_graph(raptor))
    seconds = time_c_step(sources, steps=2000, repeats=3)
    assert 0 < seconds < 1e-3  # a 2,084-parameter GRU step takes microseconds
    size = object_size(sources)
    assert size["text"] + size["data"] >= 2084 * 4 and size["bss"] == 0  # weights in flash, no RAM globals


def torch_integrals(policy, obs: np.ndarray) -> np.ndarray:
    """The policy's position integral (T, 3) m s after each step of ``obs`` (T, obs_dim) from a reset."""
    policy.reset()
    out = []
    for o in obs:
        policy.act(o[None])
        out.append(policy.integral[0].numpy().copy())
    return np.stack(out)


@needs_gcc
def test_a_position_integral_mlp_carries_its_integral_in_the_state_struct_and_matches_torch(tmp_path,
                                                                                          integrating_mlp):
    policy = integrating_mlp
    sources = export_c(policy, tmp_path)
    assert "#define ROBO_POLICY_OBS_DIM 22" in sources.header and "float integral0[3];" in sources.header
    assert "memset(state->integral0, 0, sizeof(state->integral0));" in sources.source  # zeroed by reset
    mean, std = policy.model.obs_mean.numpy()[:22], policy.model.obs_std.numpy()[:22]
    obs = mean + std * observation_sequence(500, policy.obs_dim, seed=1)
    report = verify_c(policy, sources, atol=1e-5, observations=obs)
    assert report.passed and report.max_abs_diff < 1e-5, report.as_dict()
    integrals = torch_integrals(policy, obs)
    assert np.isclose(np.abs(integrals), 0.05).any() and (np.abs(integrals) < 0.049).mean() > 0.3  # clips, not always
    # the integral is carried: a reset at step 250 does not reproduce torch's second half
    full, restarted = c_rollout(sources, obs), c_rollout(sources, obs[250:])
    assert np.abs(full[250:] - restarted).max() > 1e-3
    assert (np.abs(full) < 0.999).mean() > 0.5
