"""benchmarks/common.py: a benchmark's defaults give way to the command line, presets included."""

import pytest
from omegaconf import OmegaConf

from tests.benchmarks import BENCHMARKS
from tests.hydra_configs import composed_dict


@pytest.fixture
def bench(benchmark):
    return benchmark("common"), benchmark("steer")


def config(bench, overrides, **kw) -> dict:
    common, steer = bench
    overrides = [o.replace("base=x", f"base={BENCHMARKS}") for o in overrides]  # validation wants a folder
    ap = common.parser("test", "steer", "seed=1")
    kw.setdefault("defaults", steer.BENCH_DEFAULTS)
    return OmegaConf.to_container(common.command_config(ap, "steer", overrides, **kw), resolve=True)


def test_a_preset_wins_over_the_benchmark_defaults(bench):
    preset = ["+experiment=steer_pusht", "base=x"]
    assert config(bench, preset) == composed_dict("steer", *preset[:1], f"base={BENCHMARKS}")
    assert config(bench, preset)["eval_every"] == 25000  # the benchmark's default is 2000


def test_the_defaults_apply_where_the_command_line_is_silent(bench):
    c = config(bench, ["base=x", "total_env_steps=6000"])
    assert (c["eval_every"], c["checkpoint_every"]) == (2000, 6000)
    assert config(bench, ["base=x", "eval_every=500"])["eval_every"] == 500


def test_group_defaults_compose_with_keys_of_their_group(bench):
    """A default group choice (``task=hover``) still lets the command line set a key only that group has."""
    c = config(bench, ["base=x", "task.reward.position_abs=5.0"],
               defaults=["task=hover", "task.reward.position=100.0", "eval.seed=777"])
    assert c["task"]["name"] == "hover"
    assert (c["task"]["reward"]["position"], c["task"]["reward"]["position_abs"]) == (100.0, 5.0)
    c = config(bench, ["base=x", "task=obstacle_reach"], defaults=["task=hover", "task.reward.position=100.0"])
    assert c["task"]["name"] == "obstacle_reach"  # the command line's group, without the default's keys of hover


def test_forced_words_come_last(bench):
    assert config(bench, ["base=x", "seed=1"], forced=["seed=3"])["seed"] == 3


def test_a_bad_override_ends_with_one_line(bench, capsys):
    with pytest.raises(SystemExit) as e:
        config(bench, ["base=x", "eval_evry=5"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "eval_evry" in err
