"""One Meta-World policy over several tasks, conditioned on a one-hot task id (sims/metaworld/multitask.py,
task=metaworld_multitask): the observation's id slots, the recorded dataset, the per-task evaluation, and a
trained policy whose actions follow the id."""

import importlib.util
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.hydra_configs import composed_dict
from tests.robo.cli_run import robo

pytestmark = pytest.mark.skipif(importlib.util.find_spec("metaworld") is None,
                                reason="the metaworld package is not installed (pip install 'robo[metaworld]')")
TASKS = ["reach-v3", "button-press-v3"]
NAMES = f"task.names=[{','.join(TASKS)}]"


def test_observation_appends_the_tasks_one_hot_to_its_state():
    from sims.metaworld.env import MAKE_ID as SINGLE
    from sims.metaworld.multitask import MAKE_ID

    env = gym.make(MAKE_ID, env_names=TASKS)
    seen = set()
    for seed in range(8):   # the task is drawn per episode, from the reset seed
        obs, info = env.reset(seed=seed)
        k = info["task_index"]
        seen.add(info["task"])
        assert obs.shape == (41,) == env.observation_space.shape and env.observation_space.contains(obs)
        np.testing.assert_array_equal(obs[39:], np.eye(2)[k])
        assert info["task"] == TASKS[k]
    assert seen == set(TASKS)
    single = gym.make(SINGLE, env_name=info["task"])   # the scene of seed s is the single-task env's
    np.testing.assert_array_equal(single.reset(seed=7)[0], obs[:39])
    np.testing.assert_array_equal(env.reset(seed=7)[0], obs)
    obs, _, _, _, info = env.step(np.zeros(4))
    assert obs[39 + info["task_index"]] == 1 and obs[39:].sum() == 1
    fixed = gym.make(MAKE_ID, env_names=TASKS, task="button-press-v3")
    for seed in range(3):
        obs, info = fixed.reset(seed=seed)
        assert info["task"] == "button-press-v3" and obs[40] == 1 and obs[39] == 0
    with pytest.raises(ValueError, match="not one of this env's tasks"):
        gym.make(MAKE_ID, env_names=TASKS, task="hammer-v3")
    for e in (env, single, fixed):
        e.close()


def test_the_per_task_evaluation_reports_one_number_per_task_from_that_tasks_episodes():
    from robo.imitation.evaluate import evaluate_per_task
    from sims.metaworld.multitask import MAKE_ID

    class Recorder:   # a chunked-policy stand-in that holds still and notes the task ids it is shown
        noise_shape = (1, 4)

        def __init__(self):
            self.seen = []

        def reset(self, mask=None):
            pass

        def act(self, obs, noise=None):
            self.seen += [int(np.argmax(o[39:])) for o in obs]
            return np.zeros((len(obs), 4), np.float32)

    policy = Recorder()
    m = evaluate_per_task(policy, MAKE_ID, TASKS, episodes=2, seed=100000, num_envs=2, max_steps=3,
                          env_kwargs={"env_names": TASKS})
    assert sorted(k for k in m if k.startswith("success_rate/")) == [f"success_rate/{t}" for t in sorted(TASKS)]
    assert m["episodes"] == 4 and m["mean_length"] == 3 and policy.seen == [0] * 6 + [1] * 6


def test_recorded_multitask_demos_train_a_policy_conditioned_on_the_task(tmp_path):
    from policies.registry import load_policy
    from robo.datasets import LeRobotDataset
    from sims.metaworld.demos import generate_multitask_demos

    data = tmp_path / "mt"
    r = robo("record", "task=metaworld_multitask", NAMES, "episodes=2", f"out={data}",
             f"hydra.run.dir={tmp_path / 'rec'}", cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    ds = LeRobotDataset(data)
    assert ds.num_episodes == 4 and ds.features["observation.state"]["shape"] == [41]
    for i in range(4):   # two demos of reach-v3, then two of button-press-v3, each with its own id
        state = ds.episode(i)["observation.state"]
        np.testing.assert_array_equal(state[:, 39:], np.broadcast_to(np.eye(2)[i // 2], (len(state), 2)))
    for i, want in zip((0, 2), generate_multitask_demos(1, seed=0, env_names=TASKS)):   # what robo train generates
        np.testing.assert_array_equal(ds.episode(i)["observation.state"], want["obs"])
    summary = json.loads((tmp_path / "rec" / "metrics.json").read_text())
    assert sorted(summary["per_task"]) == sorted(TASKS) and summary["episodes"] == 4 and summary["tasks"] == TASKS

    run = tmp_path / "train"
    r = robo("train", "task=metaworld_multitask", NAMES, "policy=diffusion", f"dataset={data}",
             "policy.mlp_hidden=64", "policy.mlp_blocks=1", "policy.diffusion_step_embed_dim=16",
             "policy.train.steps=40", "policy.train.batch_size=32", "policy.train.warmup_steps=2",
             "policy.train.eval_every=0", "task.eval.episodes_during_training=1", "task.eval.episodes=2",
             "task.eval.num_envs=2", "task.eval.max_steps=16",
             "video.enabled=false", f"hydra.run.dir={run}", cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    per_task = {k: v for k, v in metrics.items() if k.startswith("success_rate/")}
    assert sorted(per_task) == [f"success_rate/{t}" for t in sorted(TASKS)] and metrics["episodes"] == 4
    assert all(f"success_rate/{t}" in r.stdout for t in TASKS)   # robo train prints them

    policy = load_policy(run / "checkpoints" / "latest" / "policy")
    state = np.asarray(ds.episode(0)["observation.state"][0, :39])
    obs = np.stack([np.concatenate([state, np.eye(2)[k]]) for k in (0, 1, 0)]).astype(np.float32)
    history = np.repeat(obs[:, None], policy.n_obs_steps, axis=1)    # (3, n_obs_steps, 41)
    noise = torch.randn(1, *policy.noise_shape, generator=torch.Generator().manual_seed(0)).repeat(3, 1, 1)
    chunks = np.asarray(policy.predict_chunk(history, noise=noise))
    np.testing.assert_allclose(chunks[0], chunks[2], atol=1e-5)      # same state, id and noise: same chunk
    assert np.abs(chunks[0] - chunks[1]).max() > 1e-3                  # only the id differs: another chunk


def test_task_config_conditions_on_the_eight_tasks_and_keeps_the_meta_world_presets():
    c = composed_dict("train", "task=metaworld_multitask", "policy=diffusion")
    eight = ["reach-v3", "button-press-v3", "drawer-open-v3", "door-open-v3", "peg-insert-side-v3", "hammer-v3",
             "pick-place-v3", "assembly-v3"]
    assert c["task"]["names"] == eight == c["task"]["env_kwargs"]["env_names"] == c["task"]["eval"]["tasks"]
    assert c["task"]["demo_kwargs"]["env_names"] == eight
    assert c["policy"]["denoiser"] == "mlp" and c["policy"]["horizon"] == 16   # task_policy/metaworld_diffusion
    assert composed_dict("train", "task=metaworld_multitask", "policy=energy")["policy"]["n_candidates"] == 4
