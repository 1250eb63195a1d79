"""Imitation on the quadrotor: task=quadrotor_tracking (a teacher's figure-eight flights as demos,
policies scored by flying held-out quadrotors in the batched sim)."""

import json

import numpy as np
import pytest
import torch

from policies.foundation import load_raptor
from robo.evaluate import Rollout
from robo.imitation.evaluate import evaluate_flights
from robo.run_dir import read_json
from tests.hydra_configs import composed_dict
from tests.robo.cli_run import robo

ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # for the CLI subprocesses


def tracking_task() -> dict:
    return composed_dict("train", "policy=diffusion", "task=quadrotor_tracking")["task"]


class MotorsOff:
    """Commands zero thrust: every flight falls."""

    def reset(self, mask=None):
        pass

    def act(self, obs):
        return -torch.ones(len(obs), 4)


def test_flight_rmse_is_per_flight_over_the_second_half_and_infinite_after_a_crash():
    T = 5
    states = np.zeros((T, 2, 17))
    states[:, 0, 0] = [9.0, 9.0, 0.3, 0.4, 0.0]  # flight 0: 0.3, 0.4, 0.0 m off over the second half
    r = Rollout(times=np.arange(T) * 0.01, states=states, reference=np.zeros((T, 2, 3)),
                actions=np.zeros((T, 2, 4)), crashed_at=np.array([-1, 3]))
    np.testing.assert_allclose(r.flight_rmse(), [np.sqrt((0.09 + 0.16) / 3), np.inf])


def test_flight_evaluation_scores_raptor_against_a_policy_that_cannot_fly():
    task = tracking_task()
    assert task["flight"]["name"] == "figure_eight" and task["robot"]["preset"] == "crazyflie"
    raptor = evaluate_flights(load_raptor(), task["flight"], task["robot"], 8, seed=12345)
    # RAPTOR tracks the 1 m, 6 s figure-eight with 0.18 m RMSE (measured), inside the 0.25 m success radius
    assert raptor["success_rate"] == 1.0 and raptor["crash_rate"] == 0.0 and raptor["rmse"] < 0.22
    off = evaluate_flights(MotorsOff(), task["flight"], task["robot"], 8, seed=12345)
    assert off["success_rate"] == 0.0 and off["crash_rate"] == 1.0
    with pytest.raises(ValueError, match="success_rmse"):
        evaluate_flights(load_raptor(), task["flight"], task["robot"], 2, success_rmse=0.0)


@pytest.mark.parametrize("policy", ["diffusion", "energy"])
def test_cli_trains_a_chunked_policy_on_raptor_flights_and_flies_it(tmp_path, policy):
    run = tmp_path / "run"
    r = robo("train", f"policy={policy}", "task=quadrotor_tracking", "demos=4", "policy.train.steps=20",
             "policy.train.eval_every=10", "task.eval.episodes=4", "task.eval.episodes_during_training=2",
             "task.flight.episode_seconds=2", "video=false", f"hydra.run.dir={run}", cwd=tmp_path,
             timeout=600, env=ONE_THREAD)
    assert r.returncode == 0, r.stderr
    metrics = read_json(run / "metrics.json")
    assert metrics["step"] == 20 and metrics["num_demos"] == 4 and metrics["episodes"] == 4
    assert {"rmse", "crash_rate", "success_rate", "final_median_position_error"} <= set(metrics)
    history = json.loads((run / "eval_history.json").read_text())  # training evaluations, then the final one
    assert [(h["step"], h["episodes"]) for h in history] == [(10, 2), (20, 2)]
    config = json.loads((run / "checkpoints" / "latest" / "policy" / "config.json").read_text())
    assert config["kind"] == policy and config["config"]["obs_dim"] == 22 and config["config"]["action_dim"] == 4
    # the task's presets (configs/task_policy/quadrotor_tracking_*.yaml): 4 of each chunk executed
    assert config["config"]["n_action_steps"] == 4
    # robo eval flies a checkpoint on the starts the trainer's final evaluation used: the same scores
    r = robo("eval", "task=quadrotor_tracking", "task.eval.episodes=4", "task.flight.episode_seconds=2", "threads=1",
             "policy=checkpoint", f"policy.path={run / 'checkpoints' / 'latest' / 'policy'}",
             f"hydra.run.dir={tmp_path / 'eval'}", cwd=tmp_path, timeout=600, env=ONE_THREAD)
    assert r.returncode == 0, r.stderr
    scored = read_json(tmp_path / "eval" / "metrics.json")
    assert (scored["success_rate"], scored["crashes"]) == (metrics["success_rate"], metrics["crashes"])
    assert scored["final_median_position_error"] == pytest.approx(metrics["final_median_position_error"], rel=1e-4)


@pytest.mark.slow
def test_a_short_energy_run_imitates_raptor_on_the_figure_eight(tmp_path):
    """About 7 min on one free core: 256 RAPTOR flights, 6,000 steps (the preset's 10k-step run: 100 % on
    16 flights at 5k, 98.4 % on 64 at 10k; 128 flights and 5,000 steps: 12.5 %, 0.376 m RMSE, 1 crash of
    16); an untrained policy crashes every flight."""
    run = tmp_path / "run"
    r = robo("train", "policy=energy", "task=quadrotor_tracking", "policy.train.steps=6000",
             "policy.train.eval_every=0", "task.eval.episodes=16", "video=false", f"hydra.run.dir={run}", cwd=tmp_path,
             timeout=600, env=ONE_THREAD)
    assert r.returncode == 0, r.stderr
    metrics = read_json(run / "metrics.json")
    assert metrics["success_rate"] >= 0.75 and metrics["crash_rate"] <= 0.125, metrics
