"""Recording demonstrations: push-T expert and quadrotor RAPTOR datasets, and ``robo record``."""

import json
import os
import subprocess
import signal
import sys
import time

import numpy as np
import pytest

from robo.datasets import LeRobotDataset
from robo.datasets.record import record_pusht, record_quadrotor
from sims.pusht import PushTEnv
from sims.pusht.demos import generate_demos


def test_pusht_state_dataset_replays_to_success(tmp_path):
    summary = record_pusht(tmp_path / "ds", episodes=2, seed=7, progress=False)
    ds = LeRobotDataset(tmp_path / "ds")
    assert ds.num_episodes == 2 and summary["frames"] == ds.num_frames and ds.fps == 10.0
    ep = ds.episode(0)
    assert ep["observation.state"].shape[1] == 5 and ep["action"].shape[1] == 2
    assert ep["next.reward"][-1] == 1.0 and ep["next.done"][-1]
    # the recorded actions, replayed open loop from the recorded start, reproduce the success
    env = PushTEnv()
    env.reset(options={"state": ep["observation.state"][0].astype(np.float64)})
    for a in ep["action"]:
        _, reward, terminated, _, _ = env.step(a)
    assert terminated and reward == 1.0
    assert ds.info["codebase_version"] == "v3.0" and ds.tasks == {0: "Push the T-shaped block onto the green target T."}


def test_gym_pusht_dataset_replays_to_success_in_gym_pusht(tmp_path):
    import gymnasium as gym

    from sims.pusht.gym_pusht import MAKE_ID

    summary = record_pusht(tmp_path / "ds", episodes=2, seed=3, progress=False, sim="gym_pusht")
    ds = LeRobotDataset(tmp_path / "ds")
    assert ds.num_episodes == 2 and summary["expert_success_rate"] == 1.0 and ds.fps == 10.0
    ep = ds.episode(1)
    env = gym.make(MAKE_ID, obs_type="state", render_mode=None)
    obs, _ = env.reset(options={"state": ep["observation.state"][0].astype(np.float64)})
    np.testing.assert_allclose(obs, ep["observation.state"][0], atol=1e-5)
    for a in ep["action"]:
        _, _, terminated, _, info = env.step(a)
    assert terminated and info["is_success"]


def test_pusht_image_dataset_and_determinism(tmp_path):
    record_pusht(tmp_path / "a", episodes=1, obs="image", seed=3, progress=False)
    ds = LeRobotDataset(tmp_path / "a")
    ep = ds.episode(0)
    assert ep["observation.image"].shape[1:] == (96, 96, 3) and ep["observation.state"].shape[1] == 2
    env = PushTEnv()
    env.reset(options={"state": ep["observation.environment_state"][0].astype(np.float64)})
    np.testing.assert_array_equal(ep["observation.image"][0], env.render_image())
    demos = generate_demos(1, seed=3, obs_type="image")
    np.testing.assert_array_equal(demos[0]["action"], ep["action"])
    np.testing.assert_array_equal(demos[0]["image"].transpose(0, 2, 3, 1), ep["observation.image"])
    with pytest.raises(ValueError, match="use it with obs=image"):
        record_pusht(tmp_path / "b", episodes=1, obs="state", video=True, progress=False)


def test_pusht_errors(tmp_path):
    with pytest.raises(ValueError, match="choose 'state' or 'image'"):
        record_pusht(tmp_path / "x", episodes=1, obs="depth", progress=False)
    with pytest.raises(RuntimeError, match="succeeded in only"):
        generate_demos(2, seed=0, max_attempts=1)
    assert not (tmp_path / "x").exists()


def test_quadrotor_raptor_dataset(tmp_path):
    summary = record_quadrotor(tmp_path / "q", task="figure_eight", episodes=3, seconds=0.5, seed=0,
                               progress=False)
    ds = LeRobotDataset(tmp_path / "q")
    assert summary["episodes"] == 3 and ds.fps == pytest.approx(100.0)
    ep = ds.episode(1)
    assert ep["observation.state"].shape == (50, 22) and ep["action"].shape == (50, 4)
    assert np.all(np.abs(ep["action"]) <= 1.0) and np.abs(ep["action"]).std() > 0
    # the observation's previous-action block is the action recorded one step earlier
    np.testing.assert_allclose(ep["observation.state"][1:, 18:22], ep["action"][:-1], atol=1e-6)


def test_robo_record_cli(tmp_path):
    env = {**os.environ, "MUJOCO_GL": "egl"}
    run = subprocess.run([sys.executable, "-m", "robo", "record", "task=pusht", "episodes=2",
                          f"out={tmp_path / 'ds'}", f"hydra.run.dir={tmp_path / 'run'}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["episodes"] == 2 and LeRobotDataset(tmp_path / "ds").num_episodes == 2
    bad = subprocess.run([sys.executable, "-m", "robo", "record", "task=figure_eight", "episodes=1",
                          f"hydra.run.dir={tmp_path / 'run2'}"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode != 0 and "policy=raptor" in bad.stderr
    # an older dataset -> v3.0: `robo record convert=<old folder> out=<new folder>`
    old = tmp_path / "old"
    (old / "meta").mkdir(parents=True)
    (old / "meta/info.json").write_text(json.dumps({"codebase_version": "v2.0", "fps": 10, "features": {}}))
    conv = subprocess.run([sys.executable, "-m", "robo", "record", f"convert={old}", f"out={tmp_path / 'new'}",
                           f"hydra.run.dir={tmp_path / 'run3'}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert conv.returncode != 0 and "meta/episodes.jsonl lists no episodes" in conv.stderr
    conv = subprocess.run([sys.executable, "-m", "robo", "record", f"convert={tmp_path / 'nope'}",
                           f"hydra.run.dir={tmp_path / 'run4'}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert conv.returncode == 2 and "no such file or folder" in conv.stderr


def test_killed_recording_leaves_no_dataset(tmp_path):
    """SIGKILL in the middle of ``robo record``: the dataset folder never appears."""
    env = {**os.environ, "MUJOCO_GL": "egl"}
    proc = subprocess.Popen([sys.executable, "-m", "robo", "record", "task=pusht", "episodes=500",
                             f"out={tmp_path / 'ds'}", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 180
        while not list(tmp_path.glob(".ds.tmp-*/data/chunk-000/*.parquet")) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # a few episodes into the recording
        assert list(tmp_path.glob(".ds.tmp-*/data/chunk-000/*.parquet")), "recording never started"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (tmp_path / "ds").exists()
    with pytest.raises(FileNotFoundError):
        LeRobotDataset(tmp_path / "ds")


def test_matched_pusht_dataset_comes_from_the_adapted_expert(tmp_path):
    summary = record_pusht(tmp_path / "ds", episodes=1, seed=0, progress=False, sim="pusht_matched")
    ds = LeRobotDataset(tmp_path / "ds")
    assert ds.num_episodes == 1 and summary["expert_success_rate"] == 1.0
    assert summary["mean_episode_length"] < 300  # the adapted expert finishes; robo's own planner is slower there
    with pytest.raises(ValueError, match="sim='mujoco'"):
        record_pusht(tmp_path / "x", episodes=1, progress=False, sim="mujoco")
