"""An actor trained with task.position_integral deploys as a 22-float policy that integrates its own position error:
the exported MLPPolicy on a task without the integral flies exactly as the SB3 actor flies the task with it."""

import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import VecNormalize
from tests.hydra_configs import composed_dict

from policies.mlp import MLPPolicy
from policies.registry import load_policy
from robo.commands.eval import check_observation
from robo.rl.trainer import Trainer
from sims.envs import make_batched_task, make_task_config

LIMIT = 0.05  # m s


def trained(tmp_path, algo: str, **over) -> Trainer:
    """A Trainer of ``algo`` on hover with ``task.position_integral=LIMIT``, trained 400 env steps (evaluations
    included: they fly the exported actor on the 22-float task)."""
    overrides = ["num_envs=4", "total_steps=400", "eval_every=200", "checkpoint_every=200", "eval.num_envs=4",
                 "eval.seconds=0.2", f"algo={algo}", "algo.kwargs.learning_starts=50", "algo.kwargs.buffer_size=5000",
                 f"task.position_integral={LIMIT}", "video.enabled=false"]
    t = Trainer(composed_dict("train", *overrides, *(f"{k}={v}" for k, v in over.items())), tmp_path)
    t.train(progress=False)
    return t


def seeded_task(t: Trainer, config, privileged: bool):
    task = make_batched_task(config, t.c["robot"], 4, privileged=privileged)
    task.seed(7)
    return task


def sb3_action(t: Trainer, obs: torch.Tensor) -> np.ndarray:
    """The SB3 actor's deterministic action (4, 4) for the training task's raw observations."""
    x = obs.numpy()
    if isinstance(t.sb3_env, VecNormalize):
        x = t.sb3_env.normalize_obs(x)
    return t.model.predict(x, deterministic=True)[0]


@pytest.mark.parametrize("algo, over", [("sac", {}),
                                        ("td3", {"algo.normalize_observations": "true", "task.action_history": 1})])
def test_the_exported_actor_integrates_itself_and_flies_as_the_sb3_actor(tmp_path, algo, over):
    t = trained(tmp_path, algo, **over)
    history = int(over.get("task.action_history", 0))
    assert t.actor_obs_dim == 22 + 4 * history + 3  # what the SB3 actor reads
    policy = load_policy(tmp_path / "checkpoints" / "latest" / "policy")
    c = policy.config
    assert isinstance(policy, MLPPolicy) and policy.obs_dim == 22 + 4 * history
    assert (c.position_integral, c.integral_dt, c.input_dim) == (LIMIT, t.venv.core.dt, t.actor_obs_dim)
    assert t.evaluation_task().obs_dim == policy.obs_dim  # evaluations fly the deployed actor without the integral
    for h in t.history:
        assert h["num_envs"] == 4 and np.isfinite(h["final_median_position_error"])

    with_integral = seeded_task(t, make_task_config(t.c["task"]), bool(t.c["privileged_critic"]))
    without = seeded_task(t, t.flown_task_config(), False)
    obs_a, obs_b = with_integral.reset(), without.reset()
    torch.testing.assert_close(obs_a[:, :policy.obs_dim], obs_b, atol=0, rtol=0)
    policy.reset()
    worst = 0.0
    for _ in range(100):
        a = sb3_action(t, obs_a)
        b = policy.act(obs_b.numpy())
        worst = max(worst, float(np.abs(a - b).max()))
        obs_a, obs_b = with_integral.step(a).obs, without.step(b).obs
        # the task's next observed integral is the one the policy now holds
        np.testing.assert_allclose(policy.integral.numpy(), with_integral.position_integral.numpy(), atol=1e-6)
    assert worst < 1e-5
    observed = obs_a[:, t.actor_obs_dim - 3:t.actor_obs_dim].numpy()
    assert np.abs(observed).max() > 0.01  # the integral grew: the comparison is not of zeros
    np.testing.assert_allclose(policy.integral.numpy(), observed, atol=1e-6)


def test_robo_eval_flies_an_integrating_actor_on_the_default_task_and_says_why_not_on_one_with_the_integral():
    from policies.mlp import MLPConfig

    policy = MLPPolicy(MLPConfig(position_integral=LIMIT))
    check_observation(policy, make_batched_task("hover"), None)  # 22 floats: it flies
    with pytest.raises(ValueError, match="integrates its position error itself.*fly it with task.position_integral=0"):
        check_observation(policy, make_batched_task(make_task_config("hover", position_integral=LIMIT)), None)


def test_trim_shifts_the_position_input_of_an_integrating_actor():
    from policies.mlp import MLPConfig
    from robo.rl.trim import shifted

    torch.manual_seed(0)
    policy = MLPPolicy(MLPConfig(hidden_dims=[8], position_integral=LIMIT))
    trimmed = shifted(policy, np.array([0.01, -0.02, 0.03]))
    torch.testing.assert_close(trimmed.model.obs_mean[:3], torch.tensor([-0.01, 0.02, -0.03]))
    assert not trimmed.model.obs_mean[3:].any() and trimmed.config.position_integral == LIMIT
    obs = np.zeros((2, 22), np.float32)
    obs[:, :3] = [0.01, -0.02, 0.03]
    trimmed.act(obs)
    np.testing.assert_allclose(trimmed.integral.numpy(), 0.01 * obs[:, :3], rtol=1e-6)  # the unshifted error
