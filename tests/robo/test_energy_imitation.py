"""Energy-based policies through the generic imitation trainer, evaluation and the CLI."""

import json

import torch

from policies.energy import EnergyConfig, EnergyPolicy
from policies.registry import load_policy
from robo.imitation import ChunkWindows, ImitationTrainer, TrainConfig, compute_stats, evaluate_chunked_policy
from sims.toy import ENV_ID, generate_demos
from tests.robo.cli_run import robo


def test_trained_energy_policy_beats_the_untrained_one_in_the_toy_env(tmp_path):
    torch.set_num_threads(1)
    episodes = generate_demos(100, seed=0)
    policy = EnergyPolicy(EnergyConfig(obs_dim=2, action_dim=2, n_obs_steps=2, horizon=8, n_action_steps=4,
                                       d_model=32, n_heads=2, n_layers=1, ff_dim=64, actions_per_token=2))
    policy.set_normalization(compute_stats(episodes))
    windows = ChunkWindows(episodes, policy.n_obs_steps, policy.horizon, policy.n_action_steps)
    untrained = evaluate_chunked_policy(policy, ENV_ID, episodes=50, seed=1)
    cfg = TrainConfig(steps=400, batch_size=64, lr=2e-3, warmup_steps=50, checkpoint_every=1000)
    trained = ImitationTrainer(policy, windows, cfg, tmp_path,
                               evaluate=lambda p, s: evaluate_chunked_policy(p, ENV_ID, 50, seed=1)).train(
                                   progress=False)
    assert trained["success_rate"] >= untrained["success_rate"] + 0.3, (trained, untrained)
    assert trained["mean_max_reward"] > untrained["mean_max_reward"] + 0.2
    loaded = load_policy(tmp_path / "checkpoints" / "latest" / "policy")
    obs = torch.rand(3, 2, 2)
    assert torch.equal(loaded.predict_chunk(obs), policy.predict_chunk(obs))


COMMON = ["task=obstacle_reach", "demos=10", "policy.train.steps=10", "policy.train.warmup_steps=2",
          "policy.train.checkpoint_every=5", "policy.train.eval_every=0", "task.eval.episodes=2",
          "video.enabled=false"]


def test_cli_trains_energy_and_implicit_bc(tmp_path):
    for kind, extra in (("energy", ["policy.d_model=16", "policy.n_heads=2", "policy.n_layers=1", "policy.horizon=8",
                                    "policy.n_action_steps=4"]),
                        ("implicit_bc", ["policy.hidden_dims=[32,32]", "policy.n_samples=64", "policy.n_negatives=8"])):
        run = tmp_path / kind
        r = robo("train", f"policy={kind}", *COMMON, *extra, f"hydra.run.dir={run}", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert json.loads((run / "metrics.json").read_text())["step"] == 10
        assert load_policy(run / "checkpoints" / "latest" / "policy").kind == kind
