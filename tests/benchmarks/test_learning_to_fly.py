"""benchmarks/learning_to_fly.py: the main job's run as the benchmark composes it, and one-line refusals of a
missing Learning to Fly checkout."""

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tests.benchmarks import BENCHMARKS


@pytest.fixture
def l2f(benchmark):
    return benchmark("learning_to_fly")


def test_robo_rows_are_the_main_job_with_the_c_step_stopping_at_its_target(l2f, benchmark):
    common = benchmark("common")
    ap = common.parser("test", "train", "seed=1")
    c = OmegaConf.to_container(common.command_config(ap, "train", [], l2f.DEFAULTS, ["seed=1"]), resolve=True)
    assert c["sim"]["step_backend"] == "c" and c["algo"]["name"] == "sac_fast" and c["total_steps"] == 300000
    assert c["stop"] == {"median_position_error": 0.05, "crashes": 0} and c["eval"]["num_envs"] == 256


def test_a_folder_that_is_not_a_learning_to_fly_checkout_is_refused_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(BENCHMARKS / "learning_to_fly.py"), "--l2f-source", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "not a learning-to-fly checkout" in r.stderr, r.stderr
