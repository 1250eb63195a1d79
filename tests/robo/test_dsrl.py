"""DSRL and DSRL-NA improve a weak frozen diffusion policy on the toy task, on the base's own
evaluation seeds; DSRL-NA learns from noise-free transitions and resumes exactly."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import sims  # noqa: F401  (registers the envs)

from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.registry import load_policy
from robo.imitation import evaluate_chunked_policy
from robo.imitation.data import ChunkWindows, compute_stats
from robo.steer import LatentNoiseEnv, SteerTrainer
from robo.commands.steer import algo_config
from robo.steer.dsrl_na import DSRLNA, DSRLNAConfig, TwinQ
from sims.toy import generate_demos
from tests.hydra_configs import composed

TOY = "robo/ObstacleReach-v0"
EVAL_SEED, EPISODES = 100000, 50


@pytest.fixture(scope="module")
def weak_base():
    """A diffusion policy (MLP denoiser) stopped early on 100 bimodal demos: it often averages
    the two ways around the obstacle (about 40 % success with N(0, I) noise)."""
    torch.manual_seed(0)
    demos = generate_demos(100, seed=0)
    policy = DiffusionPolicy(DiffusionConfig(obs_dim=2, action_dim=2, denoiser="mlp", mlp_hidden=128, mlp_blocks=2))
    policy.set_normalization(compute_stats(demos))
    windows = ChunkWindows(demos, policy.n_obs_steps, policy.horizon, policy.n_action_steps)
    opt = torch.optim.AdamW(policy.model.parameters(), 1e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(1000):
        loss = policy.compute_loss(windows.batch(torch.randint(len(windows), (256,), generator=gen)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        policy.update_ema()
    return policy


def success(policy) -> float:
    return evaluate_chunked_policy(policy, TOY, EPISODES, seed=EVAL_SEED)["success_rate"]


def test_dsrl_raises_success_over_the_base_on_the_same_seeds(tmp_path, weak_base):
    base_success = success(weak_base)
    assert base_success < 0.7, "the base must leave room to improve"
    c = {"algo": algo_config("dsrl"), "total_env_steps": 6000, "num_envs": 1, "seed": 0, "eval_every": 6000,
         "checkpoint_every": 6000, "eval": {"episodes": 20, "episodes_during_training": 10, "seed": EVAL_SEED}}
    trainer = SteerTrainer(c, tmp_path, weak_base, lambda: gym.make(TOY), progress=False)
    trainer.train()
    steered = success(trainer.steered_policy())  # the exported policy, through the chunked evaluation path
    assert steered >= min(0.95, base_success + 0.25), (base_success, steered)
    best = load_policy(tmp_path / "checkpoints" / "best" / "policy")  # kept at the best evaluation
    assert best.kind == "steered" and success(best) >= min(0.95, base_success + 0.25)


def short_run_config(*overrides: str) -> dict:
    """A 200-env-step DSRL run with small nets, one evaluation and one checkpoint at its end."""
    algo = algo_config("dsrl", [*overrides, "kwargs.learning_starts=20", "kwargs.gradient_steps=1",
                                "policy_kwargs.net_arch=[32,32]"])
    return {"algo": algo, "total_env_steps": 200, "num_envs": 1, "seed": 0, "eval_every": 200, "checkpoint_every": 200,
            "eval": {"episodes": 2, "episodes_during_training": 2, "seed": EVAL_SEED}}


def test_layer_norm_critics_train_save_and_resume(tmp_path, weak_base):
    def has_layer_norm(module):
        return any(isinstance(m, torch.nn.LayerNorm) for m in module.modules())

    c = short_run_config("critic_layer_norm=true")
    trainer = SteerTrainer(c, tmp_path, weak_base, lambda: gym.make(TOY), progress=False)
    trainer.train()
    critic, target = trainer.model.policy.critic, trainer.model.policy.critic_target
    assert has_layer_norm(critic) and has_layer_norm(target) and not has_layer_norm(trainer.model.policy.actor)
    optimized = {id(p) for g in critic.optimizer.param_groups for p in g["params"]}
    assert all(id(p) in optimized for p in critic.parameters())  # the new layers are the ones trained
    norm = critic.qf0[1]
    assert isinstance(norm, torch.nn.LayerNorm) and not torch.allclose(norm.weight, torch.ones_like(norm.weight))
    c["total_env_steps"] = 300
    resumed = SteerTrainer(c, tmp_path, weak_base, lambda: gym.make(TOY), progress=False)
    resumed.train(resume=True)
    assert has_layer_norm(resumed.model.policy.critic) and resumed.env_steps >= 300
    assert load_policy(tmp_path / "checkpoints" / "latest" / "policy").kind == "steered"


def test_a_resumed_run_keeps_its_n_step_returns_without_a_warning(tmp_path, weak_base):
    c = short_run_config("kwargs.n_steps=3")
    SteerTrainer(c, tmp_path, weak_base, lambda: gym.make(TOY), progress=False).train()
    c["total_env_steps"] = 300
    resumed = SteerTrainer(c, tmp_path, weak_base, lambda: gym.make(TOY), progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        resumed.train(resume=True)
    buffer = resumed.model.replay_buffer
    assert type(buffer).__name__ == "NStepReplayBuffer" and buffer.n_steps == 3 and resumed.env_steps >= 300


def test_stochastic_steering_exports_sacs_sampled_noise(tmp_path, weak_base):
    c = short_run_config("stochastic=true")
    trainer = SteerTrainer(c, tmp_path, weak_base, lambda: gym.make(TOY), progress=False)
    trainer.train()
    policy = load_policy(tmp_path / "checkpoints" / "latest" / "policy")
    assert policy.kind == "steered" and policy.config.stochastic
    window = torch.randn(1, weak_base.n_obs_steps, weak_base.obs_dim)
    torch.manual_seed(0)
    ours = torch.stack([policy.noise(window).flatten() for _ in range(2000)]) / policy.config.noise_bound
    assert ours.std(0).min() > 1e-3  # it samples: each call draws new noise
    # the same squashed Gaussian as SB3's actor on the same (normalized) window
    center, scale = trainer.envs[0].window_normalization()
    x = (window.reshape(1, -1) - torch.as_tensor(center, dtype=torch.float32)) / torch.as_tensor(scale,
                                                                                                  dtype=torch.float32)
    with torch.no_grad():
        mean, log_std, _ = trainer.model.actor.get_action_dist_params(x)
        sb3 = torch.tanh(mean + log_std.exp() * torch.randn(2000, mean.shape[1]))
    np.testing.assert_allclose(ours.mean(0), sb3.mean(0), atol=0.08)
    np.testing.assert_allclose(ours.std(0), sb3.std(0), atol=0.08)
    # a seeded evaluation scores it the same every time, whatever the global generator holds: the per-episode
    # noise the chunked evaluation path draws is its Gaussian's standard-normal draw
    scores = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        m = evaluate_chunked_policy(policy, TOY, 20, seed=EVAL_SEED)
        scores.append((m["success_rate"], m["mean_return"]))
    assert scores[0] == scores[1]
    with pytest.raises(ValueError, match="stochastic"):
        SteerTrainer({**c, "algo": algo_config("dsrl_na", ["stochastic=true"])}, tmp_path / "na", weak_base,
                     lambda: gym.make(TOY), progress=False).train()


def _na(base, **cfg) -> DSRLNA:
    env = LatentNoiseEnv(gym.make(TOY), base, noise_bound=1.0, reward="success", reward_offset=1.0,
                         failure_reward=-60.0)
    return DSRLNA(env, DSRLNAConfig(**{"batch_size": 64, "learning_starts": 20, "utd": 1, **cfg}), seed=0)


def test_dsrl_na_learns_from_noise_free_demos_and_distils_the_noise_critic(weak_base):
    na = _na(weak_base, hidden_dims=[64, 64])
    # expert decisions with actions but no noise, as demos or interventions arrive
    demos = generate_demos(20, seed=1)
    n_act, To = na.env.n_action_steps, weak_base.n_obs_steps
    rows = {"window": [], "action": [], "reward": [], "next_window": [], "terminated": []}
    for ep in demos:
        T = len(ep["obs"])
        obs = np.concatenate([np.repeat(ep["obs"][:1], To - 1, 0), ep["obs"]])  # the first obs fills the window
        for s in range(0, T, n_act):
            e = min(s + n_act, T)
            last = e == T
            rows["window"].append(obs[s:s + To].reshape(-1))
            rows["next_window"].append(obs[e:e + To].reshape(-1) if not last else obs[-To:].reshape(-1))
            rows["action"].append(na.normalize_actions(ep["action"][s:e]))
            rows["reward"].append(-(e - s) + (1.0 if last else 0.0))  # -1 per step, success at the end
            rows["terminated"].append(float(last))
    na.add_transitions(**{k: np.asarray(v, np.float32) for k, v in rows.items()})
    assert na.buffer.n == len(rows["window"]) > 0
    first = na.update()
    for _ in range(150):
        last = na.update()
    assert last["q_action"] < first["q_action"]
    assert np.isfinite(list(last.values())).all()
    # Q^W agrees with Q^A through the frozen policy on fresh noise, far better than untrained
    b = na.buffer.sample(256, np.random.default_rng(1))
    s = na._norm_window(b["window"])
    w = torch.rand(256, na.noise_dim) * 2 - 1
    untrained = TwinQ(na.window_dim + na.noise_dim, [64, 64])
    with torch.no_grad():
        qa = na.q_action(s, na.decode(b["window"], w)).min(-1).values
        err = (na.q_noise(s, w).min(-1).values - qa).abs().mean()
        err0 = (untrained(s, w).min(-1).values - qa).abs().mean()
    assert err < 0.3 * err0, (err, err0)
    with pytest.raises(ValueError, match="NaN"):
        na.add_transitions(**{k: np.full_like(np.asarray(v[:1], np.float32), np.nan) for k, v in rows.items()})


def test_dsrl_na_resumes_bit_for_bit(weak_base):
    a = _na(weak_base, hidden_dims=[32])
    a.learn(30)
    state = a.state_dict()
    b = _na(weak_base, hidden_dims=[32])
    b.load_state_dict(state)
    a._obs = None  # both start a fresh episode after the checkpoint
    for na in (a, b):
        na.learn(5)
    for p, q in zip(a.actor.parameters(), b.actor.parameters()):
        assert torch.equal(p, q)
    assert a.decisions == b.decisions == 35


@pytest.mark.slow
def test_dsrl_na_raises_success_over_the_base(tmp_path, weak_base):
    base_success = success(weak_base)
    c = {"algo": algo_config("dsrl_na"), "total_env_steps": 5000, "num_envs": 1, "seed": 0, "eval_every": 5000,
         "checkpoint_every": 5000, "eval": {"episodes": 20, "episodes_during_training": 10, "seed": EVAL_SEED}}
    trainer = SteerTrainer(c, tmp_path, weak_base, lambda: gym.make(TOY), progress=False)
    trainer.train()
    assert success(trainer.steered_policy()) >= min(0.95, base_success + 0.25)


def test_imagined_envs_add_data_but_not_real_env_steps(tmp_path, weak_base):
    from policies.world_model import EnsembleConfig, EnsembleDynamics
    from robo.world_model import ImaginedEnv, SingleImaginedEnv

    real = gym.make(TOY)
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    act = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    step = np.clip(act - obs, -0.1, 0.1)
    data = {"obs": obs, "action": act, "next_obs": obs + step, "reward": np.zeros(256, np.float32),
            "terminated": np.zeros(256, np.float32)}
    model = EnsembleDynamics(EnsembleConfig(obs_dim=2, action_dim=2, num_members=2, hidden_dims=[32]))
    model.fit(data, steps=20)

    def imagined():
        return SingleImaginedEnv(ImaginedEnv(model, obs[:4], 1, real.action_space, 60,
                                             observation_space=real.observation_space, seed=0))

    c = {"algo": algo_config("dsrl", ["kwargs.learning_starts=10", "kwargs.gradient_steps=1"]),
         "total_env_steps": 100, "num_envs": 1, "imagined_envs": 2, "seed": 0, "eval_every": 100,
         "checkpoint_every": 100, "eval": {"episodes": 2, "episodes_during_training": 2, "seed": EVAL_SEED}}
    trainer = SteerTrainer(c, tmp_path, weak_base, lambda: gym.make(TOY), progress=False, make_imagined_env=imagined)
    trainer.train()
    assert 100 <= trainer.env_steps < 100 + weak_base.n_action_steps  # the budget counts real steps only
    assert trainer.imagined_env_steps > trainer.env_steps  # two imagined envs stepped beside the real one
    with pytest.raises(ValueError, match="make_imagined_env"):
        SteerTrainer(c, tmp_path / "x", weak_base, lambda: gym.make(TOY), progress=False)


def test_robo_imagine_train_steers_with_dsrl_in_real_and_imagined_envs(tmp_path, weak_base):
    """``robo imagine train train.algo=dsrl``: the world model is fitted on the toy's behaviour data,
    DSRL steps one real and one imagined env, the budget counts real steps, the steered policy is saved."""
    from robo.commands.imagine import run

    weak_base.save(tmp_path / "base")
    overrides = ["task=obstacle_reach", "mode=train", "train.algo=dsrl", f"train.base={tmp_path / 'base'}",
                 "train.total_steps=400", "train.real_envs=1", "train.imagined_fraction=0.5", "train.eval_episodes=4",
                 "model.data_episodes=8", "model.fit_steps=50", "model.members=2", "model.hidden_dims=[32]"]
    m = run(composed("imagine", *overrides), tmp_path / "run")
    assert 200 <= m["real_env_steps"] < 200 + weak_base.n_action_steps  # half of total_steps is real
    assert m["imagined_envs"] == 1 and m["imagined_env_steps"] > 0
    assert m["model_data_env_steps"] > 0 and 0.0 <= m["sim_success"] <= m["best_sim_success"] <= 1.0
    assert m["model_data"] == "behaviour" and m["model_data_transitions"] == m["model_data_env_steps"]
    assert load_policy(tmp_path / "run" / "checkpoints" / "latest" / "policy").kind == "steered"
    bad = [composed("imagine", "task=hover", "mode=train", "train.algo=dsrl", "train.base=x"),
           composed("imagine", "task=obstacle_reach", "mode=train", "train.algo=dsrl")]
    for cfg, match in zip(bad, ["single gym envs", "train.base"]):
        with pytest.raises(ValueError, match=match):  # before any data is collected
            run(cfg, tmp_path / "bad")

