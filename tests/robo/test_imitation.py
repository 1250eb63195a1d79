"""Imitation: training windows, the generic trainer (resume, NaN stop), evaluation, the CLI."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import robo.configs as robo_configs
from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.registry import policy_class
from robo.imitation import (ChunkWindows, ImitationTrainer, TrainConfig, TrainingDiverged, compute_stats,
                            evaluate_chunked_policy)
from robo.imitation.sources import make_imitation_policy
from sims.toy import ENV_ID, generate_demos
from tests.hydra_configs import composed
from tests.robo.cli_run import robo

TOY = dict(obs_dim=2, action_dim=2, n_obs_steps=2, horizon=8, n_action_steps=4, down_dims=[32, 64],
           diffusion_step_embed_dim=32, num_train_timesteps=50, num_inference_steps=10)


def toy_setup(demos=100, **overrides):
    episodes = generate_demos(demos, seed=0)
    policy = DiffusionPolicy(DiffusionConfig(**{**TOY, **overrides}))
    policy.set_normalization(compute_stats(episodes))
    return policy, ChunkWindows(episodes, policy.n_obs_steps, policy.horizon, policy.n_action_steps)


def test_windows_pad_with_the_episode_edges():
    ep = {"obs": np.arange(5, dtype=np.float32)[:, None] * [1, 1], "action": np.arange(5, dtype=np.float32)[:, None]}
    w = ChunkWindows([ep], n_obs_steps=2, horizon=4, n_action_steps=2)
    # starts -1 .. T - horizon + n_action_steps - 1 = 2
    assert len(w) == 4
    b = w.batch(torch.arange(4))
    assert b["obs"].shape == (4, 2, 2) and b["action"].shape == (4, 4, 1)
    assert b["action"][0, :, 0].tolist() == [0, 0, 1, 2]  # first step repeated before the start
    assert b["action"][3, :, 0].tolist() == [2, 3, 4, 4]  # last step repeated after the end
    assert b["obs"][0, :, 0].tolist() == [0, 0]
    with pytest.raises(ValueError, match="'action' has 4 steps but 'obs' has 5"):
        ChunkWindows([{"obs": ep["obs"], "action": ep["action"][:4]}], 2, 4, 2)
    with pytest.raises(ValueError, match="episode 0: 'obs' contains NaN"):
        compute_stats([{"obs": ep["obs"] * np.nan, "action": ep["action"]}])


def test_windows_of_a_recorded_policy_start_at_its_planning_steps():
    """An episode with ``plan`` (a chunked policy replanning every 2 steps) keeps only the windows whose
    first executed action is the first of a plan; episodes without it keep every window."""
    obs = np.arange(7, dtype=np.float32)[:, None] * [1, 1]
    ep = {"obs": obs, "action": np.arange(7, dtype=np.float32)[:, None], "plan": np.arange(7) % 2 == 0}
    w = ChunkWindows([ep, {"obs": obs, "action": ep["action"]}], n_obs_steps=2, horizon=4, n_action_steps=2)
    b = w.batch(torch.arange(len(w)))
    executed_first = b["action"][:, 1, 0].tolist()  # index n_obs_steps - 1 of each window
    assert executed_first[:3] == [0, 2, 4] and len(w) == 3 + 6
    assert executed_first[3:] == [0, 1, 2, 3, 4, 5]

def test_training_beats_the_untrained_policy_on_the_multimodal_toy_task(tmp_path):
    torch.set_num_threads(1)
    policy, windows = toy_setup()
    untrained = evaluate_chunked_policy(policy, ENV_ID, episodes=50, seed=1)
    cfg = TrainConfig(steps=400, batch_size=64, lr=1e-3, warmup_steps=50, checkpoint_every=1000)
    trained = ImitationTrainer(policy, windows, cfg, tmp_path,
                               evaluate=lambda p, s: evaluate_chunked_policy(p, ENV_ID, 50, seed=1)).train(
                                   progress=False)
    assert untrained["success_rate"] <= 0.05
    assert trained["success_rate"] >= untrained["success_rate"] + 0.3
    assert trained["mean_max_reward"] > untrained["mean_max_reward"] + 0.2
    assert (tmp_path / "checkpoints" / "latest" / "policy" / "model.safetensors").exists()
    assert (tmp_path / "train_log.csv").read_text().count("\n") == 5  # header + a row per 100 steps


def test_resume_after_a_kill_continues_from_the_saved_step(tmp_path):
    cfg = TrainConfig(steps=20, batch_size=16, lr=1e-3, warmup_steps=5, checkpoint_every=10, log_every=5)
    policy, windows = toy_setup(demos=10)
    ImitationTrainer(policy, windows, cfg, tmp_path / "straight").train(progress=False)

    class Killed(Exception):
        pass

    def kill(step):
        if step == 15:
            raise Killed

    torch.manual_seed(0)
    policy2, windows2 = toy_setup(demos=10)
    with pytest.raises(Killed):
        ImitationTrainer(policy2, windows2, cfg, tmp_path / "killed", on_step=kill).train(progress=False)
    policy3, windows3 = toy_setup(demos=10)
    trainer = ImitationTrainer(policy3, windows3, cfg, tmp_path / "killed")
    assert trainer.load_checkpoint() == 10
    trainer = ImitationTrainer(policy3, windows3, cfg, tmp_path / "killed")
    trainer.train(resume=True, progress=False)
    assert trainer.step == 20
    for a, b in zip(policy.model.state_dict().values(), policy3.model.state_dict().values()):
        assert torch.equal(a, b)
    for a, b in zip(policy.ema.state_dict().values(), policy3.ema.state_dict().values()):
        assert torch.equal(a, b)
    steps = [int(r.split(",")[0]) for r in (tmp_path / "killed" / "train_log.csv").read_text().splitlines()[1:]]
    assert steps == [5, 10, 15, 20]


def test_keep_every_keeps_loadable_snapshots_of_earlier_steps(tmp_path):
    from policies.registry import load_policy

    cfg = TrainConfig(steps=12, batch_size=16, lr=1e-3, warmup_steps=2, checkpoint_every=12, keep_every=6)
    policy, windows = toy_setup(demos=10)
    ImitationTrainer(policy, windows, cfg, tmp_path).train(progress=False)
    ckpts = tmp_path / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step_0000006", "step_0000012"]
    early, last = load_policy(ckpts / "step_0000006" / "policy"), load_policy(ckpts / "step_0000012" / "policy")
    final = load_policy(ckpts / "latest" / "policy")
    obs, noise = torch.zeros(1, 2, 2), torch.randn(1, 8, 2, generator=torch.Generator().manual_seed(0))

    def chunk(p):
        return torch.as_tensor(p.predict_chunk(obs, noise))

    assert torch.equal(chunk(last), chunk(final))
    assert not torch.allclose(chunk(early), chunk(final))  # an earlier policy, not a copy
    with pytest.raises(ValueError, match="keep_every must be >= 0"):
        TrainConfig(keep_every=-1)


def test_nan_loss_stops_with_a_clear_error_and_keeps_the_last_good_checkpoint(tmp_path):
    policy, windows = toy_setup(demos=5)
    loss_fn = policy.compute_loss
    calls = []

    def poisoned(batch):
        calls.append(1)
        loss = loss_fn(batch)
        return loss * float("nan") if len(calls) > 12 else loss

    policy.compute_loss = poisoned
    trainer = ImitationTrainer(policy, windows, TrainConfig(steps=50, batch_size=8, checkpoint_every=5), tmp_path)
    with pytest.raises(TrainingDiverged, match="loss is nan at step 12.*last good checkpoint"):
        trainer.train(progress=False)
    assert ImitationTrainer(policy, windows, TrainConfig(steps=50), tmp_path).load_checkpoint() == 10


def test_evaluation_is_reproducible_and_writes_a_video(tmp_path):
    import cv2

    policy, _ = toy_setup(demos=5)
    a = evaluate_chunked_policy(policy, ENV_ID, episodes=6, seed=3, num_envs=4, video_path=tmp_path / "v.mp4")
    b = evaluate_chunked_policy(policy, ENV_ID, episodes=6, seed=3, num_envs=3)
    # batch size changes float rounding only
    assert a == pytest.approx(b, rel=1e-5) and a["episodes"] == 6 and 0 <= a["success_rate"] <= 1
    video = cv2.VideoCapture(str(tmp_path / "v.mp4"))
    assert int(video.get(cv2.CAP_PROP_FRAME_COUNT)) > 1


TINY = ["policy=diffusion", "task=obstacle_reach", "demos=10", "policy.down_dims=[16,32]", "policy.horizon=8",
        "policy.n_action_steps=4", "policy.diffusion_step_embed_dim=16", "policy.train.steps=20",
        "policy.train.warmup_steps=2", "policy.train.checkpoint_every=10", "policy.train.eval_every=10",
        "task.eval.episodes=4", "task.eval.episodes_during_training=2"]


def test_cli_trains_and_resumes_an_imitation_policy(tmp_path):
    run = tmp_path / "run"
    r = robo("train", *TINY, f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "success_rate" in r.stdout
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["step"] == 20 and metrics["episodes"] == 4
    assert json.loads((run / "checkpoints" / "latest" / "policy" / "config.json").read_text())["kind"] == "diffusion"
    assert (run / "videos").is_dir() and (run / "plots" / "learning_curve.png").exists()
    # robo eval scores a checkpoint on the seeds the trainer's final evaluation used: the same numbers
    # (up to float32 sums, which differ with the torch thread count)
    r = robo("eval", "task=obstacle_reach", "task.eval.episodes=4", "policy=checkpoint",
             f"policy.path={run / 'checkpoints' / 'latest' / 'policy'}", f"hydra.run.dir={tmp_path / 'eval'}",
             cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    scored = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert (scored["success_rate"], scored["episodes"]) == (metrics["success_rate"], metrics["episodes"])
    assert scored["mean_max_reward"] == pytest.approx(metrics["mean_max_reward"], rel=1e-5)
    assert [p.name for p in (tmp_path / "eval" / "videos").iterdir()] == ["eval.mp4"]
    r = robo("eval", "task=obstacle_reach", "policy=raptor", f"hydra.run.dir={tmp_path / 'eval_raptor'}", cwd=tmp_path)
    assert r.returncode != 0 and "needs a chunked imitation policy checkpoint" in r.stderr
    # a resume takes the run's own config; only the safe keys typed with it change
    r = robo("train", "policy.train.steps=30", "policy.train.keep_every=30", f"resume={run}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "metrics.json").read_text())["step"] == 30
    assert (run / "checkpoints" / "step_0000030" / "policy" / "config.json").exists()  # keep_every may change
    r = robo("train", "policy.horizon=16", f"resume={run}", cwd=tmp_path)
    assert r.returncode != 0 and "cannot change on resume: policy.horizon (the run has 8, given 16)" in r.stderr


def test_cli_rejects_mismatched_task_and_policy(tmp_path):
    r = robo("train", "task=obstacle_reach", cwd=tmp_path)
    assert r.returncode != 0 and "choose a policy, e.g. policy=diffusion" in r.stderr
    r = robo("train", "policy=diffusion", "task=hover", cwd=tmp_path)
    assert r.returncode != 0 and "choose an imitation task" in r.stderr


def test_pusht_policy_presets_set_their_chunk_and_execution_horizon():
    def policy_cfg(*overrides):
        return composed("train", *overrides).policy

    def n_act(*overrides):
        return policy_cfg(*overrides).n_action_steps

    assert n_act("policy=diffusion", "task=pusht") == 2  # configs/task_policy/pusht_diffusion.yaml
    assert n_act("policy=diffusion", "task=pusht", "policy.n_action_steps=4") == 4  # the command line wins
    assert n_act("policy=diffusion", "task=obstacle_reach") == 8 and n_act("policy=energy", "task=obstacle_reach") == 8
    assert n_act("policy=energy", "task=pusht") == 2  # pusht_energy.yaml: energy score, 6-action chunks
    energy = policy_cfg("policy=energy", "task=pusht")
    assert (energy.horizon, energy.spread_weight, energy.n_candidates, energy.backbone) == (6, 0.5, 4, "resmlp")
    assert energy.denoise_weight == 1.0
    assert n_act("policy=diffusion", "task=pusht_image") == 2  # pusht_image_diffusion.yaml includes it
    image_energy = policy_cfg("policy=energy", "task=pusht_image")  # pusht_image_energy.yaml includes pusht_energy
    assert (image_energy.horizon, image_energy.backbone, image_energy.encoder_channels) == (6, "resmlp", [16, 32, 64])
    assert image_energy.denoise_weight == 0.0  # measured without the state preset's denoising term
    assert image_energy.image_crop == [84, 84] and policy_cfg("policy=diffusion", "task=pusht_image").image_crop is None
    # the DSRL-shaped preset: a 4-action chunk executed whole from the last observation (no task specialization)
    mlp = policy_cfg("policy=diffusion_mlp", "task=pusht")
    assert (mlp.kind, mlp.denoiser, mlp.n_obs_steps, mlp.horizon, mlp.n_action_steps) == ("diffusion", "mlp", 1, 4, 4)


def test_image_pusht_policy_runs_in_the_pixel_env():
    from robo.imitation.evaluate import policy_observation

    obs = {"agent_pos": np.array([0.1, -0.2], np.float32), "pixels": np.full((96, 96, 3), 255, np.uint8)}
    mapped = policy_observation(obs)
    assert mapped["image"].shape == (3, 96, 96) and mapped["image"].max() == 1.0
    assert mapped["state"].tolist() == pytest.approx([0.1, -0.2])
    assert policy_observation(np.zeros(5)).shape == (5,)  # state observations pass through
    policy = DiffusionPolicy(DiffusionConfig(**{**TOY, "image_shape": [3, 96, 96], "encoder_channels": [8, 16],
                                                "spatial_keypoints": 4, "image_feature_dim": 8}))
    policy.set_normalization({"obs": {"min": -0.3 * torch.ones(2), "max": 0.3 * torch.ones(2)},
                              "action": {"min": -0.25 * torch.ones(2), "max": 0.25 * torch.ones(2)}})
    m = evaluate_chunked_policy(policy, "robo/PushT-v0", episodes=2, num_envs=2, max_steps=5,
                                env_kwargs={"obs_type": "pixels_agent_pos", "render_mode": None})
    assert m["episodes"] == 2 and m["mean_length"] == 5 and 0 <= m["mean_max_reward"] <= 1


class RandomPolicy:
    """Uniform random pusher targets: the baseline a trained policy must beat."""

    noise_shape = (16, 2)

    def __init__(self, low, high, seed=0):
        self.low, self.high, self.rng = low, high, np.random.default_rng(seed)

    def reset(self, mask=None):
        pass

    def act(self, obs, noise=None):
        return self.rng.uniform(self.low, self.high, (len(obs), 2)).astype(np.float32)


@pytest.mark.slow
def test_a_short_pusht_run_beats_a_random_policy(tmp_path):
    """About 8 min on one free core: 200 expert demos, 4000 steps (the benchmark run's curve: mean max
    coverage 0.19 at 2000 steps, 0.42 at 4000, 0.60 at 6000; random: 0.10)."""
    from robo.imitation.demos import pusht_demos

    torch.set_num_threads(1)
    episodes = pusht_demos(200, seed=0)
    policy = DiffusionPolicy(DiffusionConfig(obs_dim=5, action_dim=2, down_dims=[32, 64, 128],
                                             diffusion_step_embed_dim=64))
    policy.set_normalization(compute_stats(episodes))
    windows = ChunkWindows(episodes, policy.n_obs_steps, policy.horizon, policy.n_action_steps)
    ImitationTrainer(policy, windows, TrainConfig(steps=4000, lr=5e-4, warmup_steps=300), tmp_path).train(
        progress=False)
    kw = dict(env="robo/PushT-v0", episodes=20, seed=7, num_envs=20, env_kwargs={"render_mode": None})
    trained = evaluate_chunked_policy(policy, **kw)
    rand = evaluate_chunked_policy(RandomPolicy(-0.256, 0.256), **kw)
    assert trained["mean_max_reward"] > rand["mean_max_reward"] + 0.15


def test_quadrotor_demos_label_the_teachers_clean_actions_under_dart_noise():
    from policies.foundation import load_raptor
    from robo.imitation.demos import quadrotor_demos

    clean = quadrotor_demos(load_raptor(), 4, action_noise=0.0, seed=0, seconds=0.5)
    noisy = quadrotor_demos(load_raptor(), 4, action_noise=0.2, seed=0, seconds=0.5)
    assert len(clean) == len(noisy) == 4 and clean[0]["obs"].shape == (50, 22) and clean[0]["action"].shape == (50, 4)
    np.testing.assert_array_equal(clean[0]["obs"][0], noisy[0]["obs"][0])  # same seeded starts
    assert np.abs(clean[0]["obs"][1:] - noisy[0]["obs"][1:]).max() > 1e-4  # the noise moved the flights
    # labels are the teacher's own (clean) action at each visited state, in [-1, 1]
    teacher = load_raptor()
    teacher.reset()
    first = np.asarray(teacher.act(torch.as_tensor(np.stack([e["obs"][0] for e in noisy]))))
    np.testing.assert_allclose(np.stack([e["action"][0] for e in noisy]), first, atol=1e-6)
    assert all(np.abs(e["action"]).max() <= 1.0 for e in noisy)
    with pytest.raises(ValueError, match="action_noise"):
        quadrotor_demos(load_raptor(), 1, action_noise=-1.0)


def test_noisy_pusht_demos_record_the_noisy_actions_they_execute():
    from robo.imitation.demos import pusht_demos

    def jitter(episodes):  # mean |second difference| of the recorded pusher targets, m
        return float(np.mean([np.abs(np.diff(ep["action"], 2, axis=0)).mean() for ep in episodes]))

    clean = pusht_demos(2, seed=0, successful_only=False)
    noisy = pusht_demos(2, seed=0, successful_only=False, noise_std=0.01)
    assert jitter(noisy) > 1.5 * jitter(clean), (jitter(clean), jitter(noisy))  # measured 0.0104 vs 0.0189
    with pytest.raises(ValueError, match="noise_std"):
        pusht_demos(1, noise_std=-0.01)


def test_dart_pusht_demos_label_the_experts_action_at_the_drifted_states():
    from robo.imitation.demos import pusht_demos
    from sims.pusht.expert import PushTExpert

    clean = pusht_demos(1, seed=0)[0]
    dart = pusht_demos(1, seed=0, dart_std=0.005)[0]
    # the executed noise moves the pusher off the expert's path ...
    n = min(len(clean["obs"]), len(dart["obs"]))
    assert np.abs(dart["obs"][:n, :2] - clean["obs"][:n, :2]).max() > 0.005
    # ... but every label is the expert's own action at the state actually visited
    expert = PushTExpert(seed=0)
    expert.reset()
    relabelled = np.stack([expert.act(o) for o in dart["obs"]])
    np.testing.assert_array_equal(relabelled, dart["action"])
    with pytest.raises(ValueError, match="dart_std"):
        pusht_demos(1, dart_std=float("nan"))


def test_mirror_demos_append_each_demos_mirror_image():
    from robo.imitation.sources import load_episodes
    from sims.pusht.symmetry import GoalMirror

    task = {"name": "pusht", "demo_generator": "robo.imitation.demos:pusht_demos", "demos": 2,
            "symmetry": "sims.pusht.symmetry:GoalMirror"}
    plain = load_episodes(task, None, None, seed=0)
    both = load_episodes({**task, "mirror_demos": True}, None, None, seed=0)
    assert len(plain) == 2 and len(both) == 4
    for i, (ep, image) in enumerate(zip(plain, both[2:])):
        np.testing.assert_array_equal(both[i]["obs"], ep["obs"])
        np.testing.assert_allclose(image["obs"], GoalMirror().state(ep["obs"]), atol=1e-6)
        np.testing.assert_allclose(image["action"], GoalMirror().action(ep["action"]), atol=1e-6)
        np.testing.assert_array_equal(image["reward"], ep["reward"])
        assert np.abs(image["obs"] - ep["obs"]).max() > 0.01
    with pytest.raises(ValueError, match="names no task.symmetry"):
        load_episodes({**task, "mirror_demos": True, "symmetry": None}, None, None, seed=0)
    with pytest.raises(ValueError, match="mirror-symmetric"):  # the env's own goal sets the mirror line
        load_episodes({**task, "mirror_demos": True, "env_kwargs": {"config": {"goal_x": 0.05}}}, None, None, seed=0)


@pytest.mark.parametrize("name", ["diffusion", "energy", "implicit_bc"])
def test_policy_yaml_mirrors_its_config_dataclass(name):
    """configs/policy/<name>.yaml sets every field of its config dataclass (bar the shapes taken from the
    data) to the dataclass's default: the Python API and ``robo train policy=<name>`` build the same policy."""
    raw = OmegaConf.to_container(OmegaConf.load(Path(robo_configs.__path__[0]) / "policy" / f"{name}.yaml"))
    config_class = policy_class(raw["kind"], trainable=True).config_class
    built = make_imitation_policy(raw, obs_dim=5, action_dim=2).config  # as `robo train` builds it
    assert built == config_class(obs_dim=5, action_dim=2)
    assert {f.name for f in dataclasses.fields(config_class)} - {"obs_dim", "action_dim", "image_shape"} <= set(raw)
