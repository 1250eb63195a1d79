"""robo steer: the chunk wrappers (spaces, step cap, human stop, errors), DSRL on the toy task,
the CLI with resume."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.env_checker import check_env

import sims  # noqa: F401  (registers the envs)
from robo.steer import ActionChunkEnv, LatentNoiseEnv, ResidualChunkEnv
from tests.hydra_configs import composed_dict
from tests.policies.test_steered import tiny_diffusion, tiny_energy
from tests.robo.cli_run import robo

TOY = "robo/ObstacleReach-v0"


@pytest.mark.parametrize("make_base", [tiny_diffusion, tiny_energy])
def test_latent_noise_env_spaces_and_chunk_execution(make_base):
    torch.set_num_threads(1)
    base = make_base()
    env = LatentNoiseEnv(gym.make(TOY), base, noise_bound=2.0)
    check_env(env, skip_render_check=True)
    assert env.action_space.shape == (16,) and env.action_space.high.max() == 1.0  # noise = 2 * action
    assert env.observation_space.shape == (4,)  # 2 observations of (2,), normalized to [-1, 1]
    obs, _ = env.reset(seed=3)
    np.testing.assert_allclose(obs[:2], obs[2:])  # the first observation fills the window
    noise = env.action_space.sample()
    hist = torch.as_tensor(env.window)[None]
    expected = np.asarray(base.predict_chunk(hist, 2 * torch.as_tensor(noise).reshape(1, 8, 2)))[0, 1:5]
    ref = gym.make(TOY)
    ref.reset(seed=3)
    ref_reward = sum(ref.step(a)[1] - 0.0 for a in np.clip(expected, -1.5, 1.5))
    obs, reward, term, trunc, info = env.step(noise)
    assert info["env_steps"] == 4 and env.episode_env_steps == 4  # n_action_steps env steps per decision
    assert reward == pytest.approx(ref_reward, rel=1e-5)  # undiscounted sum of the chunk's rewards
    np.testing.assert_allclose(env.window[-1], ref.unwrapped.pos, atol=1e-6)


def test_steering_an_energy_base_with_candidates_descends_the_given_noise_only():
    """A best-of-N energy base (n_candidates > 1) is steered through its guess alone: the decoded chunk is
    a function of (observations, noise), and the user's policy keeps its own setting."""
    base = tiny_energy()
    base.config.n_candidates = 8
    env = LatentNoiseEnv(gym.make(TOY), base, noise_bound=2.0)
    env.reset(seed=3)
    noise = env.action_space.sample()
    hist = torch.as_tensor(env.window)[None]
    one = np.asarray(base.predict_chunk(hist, 2 * torch.as_tensor(noise).reshape(1, 8, 2), n_candidates=1))[0, 1:5]
    np.testing.assert_allclose(env.decode(noise), one, atol=1e-6)
    np.testing.assert_allclose(env.decode(noise), env.decode(noise))  # no draws from the policy's generator
    assert base.config.n_candidates == 8 and env.policy.config.n_candidates == 1
    assert env.policy.candidates is not base.candidates  # the copy's resets leave the user's draws alone


def test_residual_and_action_envs_pass_check_env():
    base = tiny_diffusion()
    for env in (ResidualChunkEnv(gym.make(TOY), base, residual_scale=0.1), ActionChunkEnv(gym.make(TOY), 2, 3)):
        check_env(env, skip_render_check=True)
    env = ActionChunkEnv(gym.make(TOY), 1, 2)
    np.testing.assert_allclose(env.decode(np.array([1, -1, 0, 0.5], np.float32)), [[1.5, -1.5], [0, 0.75]])


def test_step_cap_truncates_inside_a_chunk():
    env = LatentNoiseEnv(gym.make(TOY), tiny_diffusion(), max_env_steps=6)
    env.reset(seed=0)
    _, _, term, trunc, info = env.step(np.zeros(16, np.float32))
    assert not (term or trunc) and info["env_steps"] == 4
    _, _, term, trunc, info = env.step(np.zeros(16, np.float32))
    assert trunc and info["step_cap"] and info["env_steps"] == 2 and env.episode_env_steps == 6
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.zeros(16, np.float32))
    env.reset(seed=0)
    assert env.episode_env_steps == 0 and env.total_env_steps == 6


class _StopsAfter(gym.Wrapper):
    """Requests a human stop from inside the env after ``n`` steps (like a UI thread would)."""

    def __init__(self, env, n):
        super().__init__(env)
        self.n, self.count, self.owner = n, 0, None

    def step(self, action):
        self.count += 1
        if self.count == self.n:
            self.owner.request_stop()
        return self.env.step(action)


def test_human_stop_ends_the_episode_without_further_actions():
    inner = _StopsAfter(gym.make(TOY), 2)
    stopped_envs = []
    env = LatentNoiseEnv(inner, tiny_diffusion(), on_stop=stopped_envs.append)
    inner.owner = env
    env.reset(seed=0)
    _, _, term, trunc, info = env.step(np.zeros(16, np.float32))
    assert trunc and not term and info["stopped"] and info["env_steps"] == 2 and inner.count == 2
    assert stopped_envs == [inner]
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.zeros(16, np.float32))
    env.reset(seed=1)
    assert not env.stop_requested


def test_bad_inputs_raise_clear_errors():
    base = tiny_diffusion()
    env = LatentNoiseEnv(gym.make(TOY), base)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.zeros(16, np.float32))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action has shape \(3,\), expected \(16,\)"):
        env.step(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        env.step(np.full(16, np.nan, np.float32))
    with pytest.raises(ValueError, match="do not match the policy"):
        LatentNoiseEnv(gym.make("robo/PushT-v0", render_mode=None), base)
    with pytest.raises(ValueError, match="noise_bound must be > 0"):
        LatentNoiseEnv(gym.make(TOY), base, noise_bound=0)
    with pytest.raises(ValueError, match=r"n_action_steps must be in \[1, 4\]"):
        LatentNoiseEnv(gym.make(TOY), base, n_action_steps=5)
    with pytest.raises(ValueError, match="unknown reward 'dense'"):
        LatentNoiseEnv(gym.make(TOY), base, reward="dense")
    with pytest.raises(ValueError, match="max_env_steps must be >= 1"):
        LatentNoiseEnv(gym.make(TOY), base, max_env_steps=0)
    with pytest.raises(ValueError, match="flat Box observation"):
        ActionChunkEnv(gym.make("robo/PushT-v0", obs_type="pixels", render_mode=None))


def test_training_evaluations_pick_the_best_on_other_seeds_than_the_final_one(tmp_path, monkeypatch):
    """checkpoints/best is picked by the evaluations during training, on seeds right after the final
    evaluation's (or eval.validation_seed): never on the seeds the final, reported evaluation uses."""
    import robo.steer.trainer as trainer_module
    from robo.steer import SteerTrainer
    from robo.commands.steer import algo_config

    algo = algo_config("dsrl", ["kwargs.learning_starts=5", "kwargs.gradient_steps=1", "policy_kwargs.net_arch=[8]"])

    def run(folder, eval_every, scores, **eval_config):
        """A 24-env-step run whose evaluations score ``scores`` in turn -> (evaluations as (episodes, first
        seed), the scores of the evaluations that saved checkpoints/best, the final evaluation)."""
        calls, saved, scores = [], [], iter(scores)

        def scripted_evaluation(model, make_env, episodes, seed, deterministic=True):
            calls.append((episodes, seed))
            return {"success_rate": next(scores), "mean_return": 0.0, "mean_env_steps": 0.0, "episodes": episodes}

        def save(policy, path):
            if "best" in str(path):
                saved.append(trainer.history[-1]["success_rate"])

        def scripted_final(policy, episodes, seed):  # the final one scores the steered policy, batched
            calls.append((episodes, seed))
            return {"success_rate": next(scores), "mean_length": 0.0}

        monkeypatch.setattr(trainer_module, "evaluate_agent", scripted_evaluation)
        e = {"episodes": 5, "episodes_during_training": 2, "seed": 1000, **eval_config}
        c = {"algo": algo, "total_env_steps": 24, "num_envs": 1, "seed": 0, "eval_every": eval_every,
             "checkpoint_every": 100, "eval": e, "deploy": {"gate": False}}  # the gate has its own test
        trainer = SteerTrainer(c, tmp_path / folder, tiny_diffusion(), lambda: gym.make(TOY), progress=False)
        monkeypatch.setattr(trainer, "steered_policy", lambda: type("Stub", (), {"save": save})())
        monkeypatch.setattr(trainer, "chunked_metrics", scripted_final)
        return calls, saved, trainer.train()

    calls, saved, final = run("a", 8, [0.2, 0.6, 0.4, 1.0])  # three evaluations during training, then the final
    assert calls == [(2, 1005), (2, 1005), (2, 1005), (5, 1000)]  # training: 1005.., final: 1000..1004
    assert final["final"] and final["success_rate"] == 1.0
    assert saved == [0.2, 0.6]  # the best so far during training; the final evaluation's 1.0 picks nothing
    calls, _, _ = run("b", 8, [0.0] * 4, validation_seed=7)
    assert calls == [(2, 7), (2, 7), (2, 7), (5, 1000)]
    calls, saved, _ = run("c", 100, [0.3])  # no evaluation during training: the final one keeps its policy
    assert calls == [(5, 1000)] and saved == [0.3]


TINY_STEER = ["task=obstacle_reach", "total_env_steps=120", "eval_every=60", "checkpoint_every=60",
              "eval.episodes=3", "eval.episodes_during_training=2", "algo.kwargs.learning_starts=5",
              "algo.policy_kwargs.net_arch=[16]", "algo.kwargs.batch_size=8", "progress=false"]


@pytest.mark.slow  # four CLI subprocesses
def test_cli_steers_resumes_and_exports_one_policy(tmp_path):
    import json

    from omegaconf import OmegaConf

    from policies.registry import load_policy
    from policies.steered import SteeredPolicy
    from robo.imitation.evaluate import evaluate_chunked_policy

    tiny_diffusion().save(tmp_path / "base")
    run = tmp_path / "run"
    r = robo("steer", f"base={tmp_path / 'base'}", *TINY_STEER, f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "policy_success_rate" in r.stdout
    metrics = json.loads((run / "metrics.json").read_text())
    assert 120 <= metrics["env_steps"] < 124 and metrics["policy_episodes"] == 3
    policy = load_policy(run / "checkpoints" / "latest" / "policy")
    assert isinstance(policy, SteeredPolicy) and policy.base.kind == "diffusion"
    c = OmegaConf.load(run / "config.yaml")  # the final evaluation scored this saved policy as robo eval would
    m = evaluate_chunked_policy(policy, c.task.env_id, 3, seed=c.eval.seed, max_steps=c.task.eval.max_steps)
    assert (m["success_rate"], m["mean_length"]) == (metrics["success_rate"], metrics["mean_env_steps"])
    deployed = load_policy(run / "checkpoints" / "best" / "policy")  # policy_*: the gate's pick, as robo eval scores it
    m = evaluate_chunked_policy(deployed, c.task.env_id, 3, seed=c.eval.seed, max_steps=c.task.eval.max_steps)
    assert (m["success_rate"], m["mean_length"]) == (metrics["policy_success_rate"], metrics["policy_mean_length"])
    assert (run / "plots" / "learning_curve.png").exists()
    r = robo("steer", "total_env_steps=200", f"resume={run}", cwd=tmp_path)  # the run's own config, base included
    assert r.returncode == 0, r.stderr
    assert 200 <= json.loads((run / "metrics.json").read_text())["env_steps"] < 204
    # already there: evaluates, trains nothing; without the gate it reports the final policy it just scored
    r = robo("steer", "total_env_steps=200", "deploy.gate=false", f"resume={run}", cwd=tmp_path)
    assert r.returncode == 0 and "policy_success_rate" in r.stdout, r.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    assert 200 <= metrics["env_steps"] < 204 and "deployed" not in metrics
    m = evaluate_chunked_policy(load_policy(run / "checkpoints" / "latest" / "policy"), c.task.env_id, 3,
                                seed=c.eval.seed, max_steps=c.task.eval.max_steps)
    assert (m["success_rate"], m["mean_length"]) == (metrics["policy_success_rate"], metrics["policy_mean_length"])
    r = robo("steer", "algo.noise_bound=0.5", f"resume={run}", cwd=tmp_path)
    assert r.returncode != 0 and "cannot change on resume: algo.noise_bound" in r.stderr
    r = robo("steer", "task=obstacle_reach", cwd=tmp_path)
    assert r.returncode != 0 and "base=<policy checkpoint folder>" in r.stderr



def test_gate_bound_keeps_the_base_unless_the_gain_is_clear():
    from robo.steer.gate import choose, difference_lower_bound, wilson_bounds

    low, high = wilson_bounds(62, 100, 1.645)
    assert 0.53 < low < 0.62 < high < 0.70
    assert difference_lower_bound(190, 124, 200) > 0.2  # 95 % vs 62 %: a clear gain
    assert difference_lower_bound(130, 124, 200) < 0  # 65 % vs 62 %: evaluation noise
    assert choose(0.62, {"final": 0.48}, 200, 0).deployed == "base"
    assert choose(0.62, {"final": 0.66}, 200, 0).deployed == "base"
    d = choose(0.62, {"final": 0.95, "best during training": 0.90}, 200, 0)
    assert d.deployed == "final" and d.lower_bound > 0.2 and "deployed the steered policy (final)" in d.message()
    assert choose(0.62, {"final": 0.95}, 200, 0, margin=0.5).deployed == "base"
    with pytest.raises(ValueError, match="confidence must be in"):
        difference_lower_bound(1, 1, 2, confidence=1.0)


@pytest.mark.parametrize("steered_success, deployed_kind", [(0.30, "diffusion"), (0.95, "steered")])
def test_a_worse_steered_policy_is_not_deployed_and_a_clearly_better_one_is(tmp_path, caplog, steered_success,
                                                                           deployed_kind):
    """checkpoints/best ends as the base when the steered policy scores below it on the gate's validation
    episodes, and as the steered policy when it is clearly above (scores scripted per policy kind)."""
    import logging

    from policies.registry import load_policy
    from robo.commands.steer import algo_config
    from robo.run_dir import read_state
    from robo.steer import SteerTrainer

    algo = algo_config("dsrl", ["kwargs.learning_starts=5", "kwargs.gradient_steps=1", "policy_kwargs.net_arch=[8]"])
    c = {"algo": algo, "total_env_steps": 24, "num_envs": 1, "seed": 0, "eval_every": 12, "checkpoint_every": 100,
         "eval": {"episodes": 2, "episodes_during_training": 2, "seed": 1000}, "deploy": {"episodes": 200}}
    trainer = SteerTrainer(c, tmp_path, tiny_diffusion(), lambda: gym.make(TOY), progress=False)
    scored = []

    def scripted_score(policy, episodes, seed):
        scored.append((policy.kind, episodes, seed))
        return steered_success if policy.kind == "steered" else 0.62

    trainer.score = scripted_score
    with caplog.at_level(logging.INFO, logger="robo.steer.gate"):
        final = trainer.train()
    assert {s[1:] for s in scored} == {(200, 1000 + 1_000_000)}  # seeds no other evaluation uses
    assert sorted(k for k, _, _ in scored) == ["diffusion", "steered", "steered"]  # base, final, best
    best = tmp_path / "checkpoints" / "best"
    assert load_policy(best / "policy").kind == deployed_kind
    decision = read_state(best)["deploy"]
    assert decision == final["deploy"] and decision["base_success"] == 0.62
    assert (decision["deployed"] == "base") == (deployed_kind == "diffusion")
    assert ("kept the base policy" in caplog.text) == (deployed_kind == "diffusion")


def test_pusht_preset_is_the_guide_recipe():
    """`+experiment=steer_pusht` composes to the overrides the push-T table was measured with."""
    recipe = ["task=pusht", "total_env_steps=300000", "eval_every=25000", "checkpoint_every=25000",
              "algo.noise_bound=1.5", "algo.stochastic=true", "+algo.kwargs.n_steps=5", "algo.critic_layer_norm=false",
              "eval.validation_seed=100100", "eval.episodes=1000", "eval.seed=200000"]
    preset = composed_dict("steer", "+experiment=steer_pusht", "base=x")
    assert preset == composed_dict("steer", "base=x", *recipe)
    assert preset["algo"]["critic_layer_norm"] is False and preset["algo"]["kwargs"]["n_steps"] == 5
