"""SB3 plumbing: the VecEnv adapter, asymmetric actor-critic, actor export, the trainer's
checkpoints, resume and divergence handling."""

import json
import re

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from stable_baselines3 import PPO, SAC, TD3
from tests.hydra_configs import composed, composed_dict

from policies.registry import load_policy
from robo.evaluate import rollout
from robo.media import write_flight_media
from robo.rl.asymmetric import POLICY_CLASSES, export_actor
from robo.rl.callbacks import DivergenceError
from robo.rl.sb3_vec_env import SB3VecEnvAdapter
from robo.rl.trainer import Trainer
from sims.envs import QuadrotorVectorEnv, make_task_config


def test_adapter_reports_terminal_observations_and_timeouts():
    venv = SB3VecEnvAdapter(QuadrotorVectorEnv(3, make_task_config("hover", episode_seconds=0.03), privileged=True))
    venv.seed(0)
    obs = venv.reset()
    assert obs.shape == (3, 36)
    for _ in range(2):
        venv.step_async(np.zeros((3, 4)))
        _, _, dones, infos = venv.step_wait()
        assert not dones.any()
    venv.step_async(np.zeros((3, 4)))
    obs, rewards, dones, infos = venv.step_wait()
    assert dones.all() and all(i["TimeLimit.truncated"] for i in infos)
    assert all(i["terminal_observation"].shape == (36,) for i in infos)
    assert not np.allclose(obs, np.stack([i["terminal_observation"] for i in infos]))


@pytest.mark.parametrize("algo, cls", [("td3", TD3), ("sac", SAC), ("ppo", PPO)])
def test_actor_sees_only_the_deployable_observation_and_exports_exactly(algo, cls):
    venv = SB3VecEnvAdapter(QuadrotorVectorEnv(4, "hover", privileged=True))
    model = cls(POLICY_CLASSES[algo], venv, seed=0, policy_kwargs={"actor_obs_dim": 22},
                **({"n_steps": 8, "batch_size": 32} if algo == "ppo" else {"learning_starts": 10}))
    model.learn(64)
    obs = venv.reset()
    changed = obs.copy()
    changed[:, 22:] += 5.0  # privileged part only
    a0, _ = model.predict(obs, deterministic=True)
    a1, _ = model.predict(changed, deterministic=True)
    np.testing.assert_array_equal(a0, a1)
    if algo != "ppo":
        q = lambda o: model.critic(torch.as_tensor(o), torch.as_tensor(a0))[0]  # noqa: E731
        assert not torch.allclose(q(obs), q(changed)), "the critic must read the privileged features"
    policy = export_actor(model)
    np.testing.assert_allclose(policy.act(obs[:, :22]), a0, atol=1e-6)


def train_config(tmp, **over):
    overrides = ["num_envs=4", "total_steps=400", "eval_every=200", "checkpoint_every=200", "eval.num_envs=4",
                 "eval.seconds=0.2", "algo.kwargs.learning_starts=50", "algo.kwargs.buffer_size=5000"]
    overrides += [f"{k}={v}" for k, v in over.items()]
    return composed_dict("train", *overrides)


def test_checkpoint_holds_a_loadable_policy_and_resume_continues(tmp_path):
    c = train_config(tmp_path)
    first = Trainer(c, tmp_path)
    saved_at, save = [], first.save_checkpoint
    first.save_checkpoint = lambda step: saved_at.append(step) or save(step)
    first.train(progress=False)
    assert saved_at == [200, 400]  # every checkpoint_every, and the final one once
    latest = tmp_path / "checkpoints" / "latest"
    state = json.loads((latest / "state.json").read_text())
    assert state["step"] == 400 and {"policy", "sb3.zip", "replay_buffer.pkl"} <= {p.name for p in latest.iterdir()}
    assert list(tmp_path.rglob("*.pkl")) == [latest / "replay_buffer.pkl"]  # the buffer is kept for resume only
    filled = first.model.replay_buffer  # 100 of 1250 rows: the file holds those, not the allocation
    assert (latest / "replay_buffer.pkl").stat().st_size < filled.observations.nbytes / 4
    policy = load_policy(latest / "policy")
    obs = np.zeros((2, 22), np.float32)
    np.testing.assert_allclose(policy.act(obs), first.policy().act(obs), atol=1e-7)
    buffer_size = first.model.replay_buffer.size()

    c2 = train_config(tmp_path, total_steps=800)
    second = Trainer(c2, tmp_path)
    load = second._load_checkpoint

    def load_and_compare(path):  # the buffer comes back whole, at its full capacity
        step = load(path)
        back = second.model.replay_buffer
        assert back.pos == filled.pos and back.observations.shape == filled.observations.shape
        np.testing.assert_array_equal(back.next_observations, filled.next_observations)
        np.testing.assert_array_equal(back.rewards, filled.rewards)
        return step

    second._load_checkpoint = load_and_compare
    final = second.train(resume=True, progress=False)
    assert second.model.replay_buffer.size() > buffer_size  # the old transitions came back
    assert final["step"] == 800 and [h["step"] for h in second.history][:2] == [h["step"] for h in first.history][:2]
    # resuming a finished run evaluates it again but leaves its checkpoint (and 300 MB buffers) alone
    written = (latest / "replay_buffer.pkl").stat().st_mtime_ns
    again = Trainer(c2, tmp_path).train(resume=True, progress=False)
    assert again["step"] == 800 and (latest / "replay_buffer.pkl").stat().st_mtime_ns == written


@pytest.mark.parametrize("normalize", ["false", "true"])
def test_init_from_starts_a_new_run_from_another_runs_networks_without_its_buffer(tmp_path, normalize):
    norm = {"algo.normalize_observations": normalize}
    hover = Trainer(train_config(tmp_path / "hover", **norm), tmp_path / "hover")
    hover.train(progress=False)
    latest = tmp_path / "hover" / "checkpoints" / "latest"
    c = train_config(tmp_path / "fig8", total_steps=0, task="figure_eight", init_from=str(latest), **norm)
    tuned = Trainer(c, tmp_path / "fig8")
    tuned.train(progress=False)
    obs = np.random.default_rng(0).normal(size=(8, 22)).astype(np.float32)
    np.testing.assert_allclose(tuned.policy().act(obs), hover.policy().act(obs), atol=1e-6)
    assert torch.equal(tuned.model.log_ent_coef, hover.model.log_ent_coef) and hover.model.log_ent_coef.item() != 0.0
    assert tuned.model.replay_buffer.size() == 0 and tuned.model.num_timesteps == 0
    with pytest.raises(FileNotFoundError, match="init_from: no sb3.zip"):
        Trainer(train_config(tmp_path / "x", init_from=str(tmp_path)), tmp_path / "x").train(progress=False)
    with pytest.raises(ValueError, match="init_from: .* does not fit"):
        Trainer(train_config(tmp_path / "y", init_from=str(latest), **{"task.action_history": 2}),
                tmp_path / "y").train(progress=False)


def test_train_resumes_a_run_from_its_own_config(tmp_path, monkeypatch):
    """``robo train resume=<run>`` continues with the run's config.yaml: nothing to type again; a safe
    override (total_steps) is applied, any other refused."""
    import robo.run_dir
    from robo.commands.train import run

    tiny = ["num_envs=4", "total_steps=200", "eval_every=200", "checkpoint_every=200", "eval.num_envs=4",
            "eval.seconds=0.2", "algo.kwargs.learning_starts=50", "algo.kwargs.buffer_size=5000",
            "video.enabled=false", "plot_envs=1"]
    folder = tmp_path / "run"
    run(composed("train", *tiny), folder)
    typed = []
    monkeypatch.setattr(robo.run_dir, "typed_overrides", lambda: typed)  # what Hydra reads off the command line

    def resume(*overrides):
        typed[:] = [*overrides, f"resume={folder}"]
        run(composed("train", *typed), tmp_path / "new")
        return OmegaConf.load(folder / "config.yaml"), json.loads((folder / "checkpoints" / "latest" /
                                                                    "state.json").read_text())["step"]

    c, step = resume()
    assert (c.num_envs, c.total_steps, c.resume, step) == (4, 200, str(folder), 200)
    c, step = resume("total_steps=400")
    assert (c.num_envs, c.total_steps, step) == (4, 400, 400)
    with pytest.raises(ValueError, match=r"cannot change on resume: seed \(the run has 0, given 1\)"):
        resume("seed=1")
    assert not (tmp_path / "new").exists()  # a resumed run writes into its own folder


def test_divergence_stops_with_a_message_and_keeps_the_last_good_checkpoint(tmp_path):
    Trainer(train_config(tmp_path, total_steps=200), tmp_path).train(progress=False)
    good = load_policy(tmp_path / "checkpoints" / "latest" / "policy")
    t = Trainer(train_config(tmp_path, total_steps=600), tmp_path)
    load = t._load_checkpoint

    def load_then_break(path):  # the optimizer blew the weights up right after resuming
        step = load(path)
        with torch.no_grad():
            next(t.model.policy.actor.parameters()).fill_(float("nan"))
        return step

    t._load_checkpoint = load_then_break
    with pytest.raises(DivergenceError, match="Last good checkpoint"):
        t.train(resume=True, progress=False)
    kept = load_policy(tmp_path / "checkpoints" / "latest" / "policy")
    obs = np.zeros((1, 22), np.float32)
    np.testing.assert_array_equal(kept.act(obs), good.act(obs))


def test_level_replay_curriculum_scores_the_levels_it_plays(tmp_path):
    c = train_config(tmp_path, curriculum="level_replay", **{"task.episode_seconds": 0.1})
    t = Trainer(c, tmp_path)
    t.train(progress=False)
    replay = t.level_sampler.replay
    assert replay.seen.sum() >= 4 and np.all(replay.scores[replay.seen] > 0)
    levels = t.venv.core.levels
    assert (levels >= 0).all()
    # an env's physics is its level's: level k always gives the same quadrotor
    k = int(levels[0])
    again = t.level_sampler.level_params(np.array([k]))
    assert torch.allclose(again.mass, t.venv.core.sim.params.mass[:1])
    state = json.loads((tmp_path / "checkpoints" / "latest" / "state.json").read_text())
    assert sum(state["level_replay"]["seen"]) == replay.seen.sum()


def test_observation_normalization_is_carried_by_the_exported_actor(tmp_path):
    t = Trainer(train_config(tmp_path, **{"algo.normalize_observations": "true"}), tmp_path)
    t.train(progress=False)
    obs = t.sb3_env.reset()  # normalized by VecNormalize
    raw = t.sb3_env.get_original_obs()
    expected, _ = t.model.predict(obs, deterministic=True)
    np.testing.assert_allclose(t.policy().act(raw[:, :22]), expected, atol=1e-5)
    saved = load_policy(tmp_path / "checkpoints" / "latest" / "policy")
    assert not torch.allclose(saved.model.obs_std, torch.ones(22))


def test_best_checkpoint_keeps_the_best_evaluated_policy_across_resume(tmp_path, caplog):
    obs = np.random.default_rng(0).normal(size=(8, 22)).astype(np.float32)
    scores = iter([(3, float("inf")), (0, 0.2), (0, 0.3), (1, 0.001), (0, 0.25), (0, 0.4), (0, 0.5)])
    acted = {}

    def make_fake_eval(trainer):
        def fake_eval():  # crashes first, then median error decide
            crashes, err = next(scores, (0, 0.9))
            acted[trainer.model.num_timesteps] = trainer.policy().act(obs)
            return {"num_envs": 3, "crashes": crashes, "final_median_position_error": err, "success_rate": 0.0}
        return fake_eval

    t = Trainer(train_config(tmp_path, total_steps=800), tmp_path)
    t.evaluate = make_fake_eval(t)
    with caplog.at_level("INFO", logger="robo.rl.trainer"):
        t.train(progress=False)
    logged = [re.sub(r", return -?[\d.]+$", "", r.getMessage()) for r in caplog.records]
    assert logged[:4] == ["step 200: all 3 crashed", "new best at step 200: all 3 crashed -> checkpoints/best",
                          "step 400: median error 20.00 cm, 0 crashes, success 0.00",
                          "new best at step 400: median error 20.00 cm, 0 crashes, success 0.00 -> checkpoints/best"]
    assert sum("new best" in line for line in logged) == 2 and not any("inf" in line for line in logged)
    best = tmp_path / "checkpoints" / "best"
    assert json.loads((best / "metrics.json").read_text())["step"] == 400
    np.testing.assert_allclose(load_policy(best / "policy").act(obs), acted[400], atol=1e-6)
    assert not np.allclose(acted[400], acted[800], atol=1e-4), "the policy must have changed after the best"

    t2 = Trainer(train_config(tmp_path, total_steps=1200), tmp_path)  # worse evaluations after resuming
    t2.evaluate = make_fake_eval(t2)
    t2.train(resume=True, progress=False)
    assert json.loads((best / "metrics.json").read_text())["step"] == 400


def test_train_command_summary_and_media_show_the_kept_best_actor(tmp_path, monkeypatch):
    """`robo train` leads its summary with checkpoints/best (the deployed actor) and flies that actor, loaded
    as `robo eval` loads it, for the trajectory plot and the video, whose titles name its step."""
    import robo.commands.train as train_command

    scores = iter([(0, 0.01), (0, 0.5)])  # the best at step 200, a worse last actor

    def fake_eval(self):
        crashes, err = next(scores, (1, 0.6))
        return {"num_envs": 4, "crashes": crashes, "final_median_position_error": err, "success_rate": 0.5}

    flown, titled = [], []
    monkeypatch.setattr(Trainer, "evaluate", fake_eval)
    monkeypatch.setattr(train_command, "rollout", lambda p, task, s: flown.append(p) or rollout(p, task, s))
    monkeypatch.setattr(train_command, "write_flight_media",
                        lambda run_dir, task, r, title, *a: titled.append(title) or write_flight_media(
                            run_dir, task, r, title, *a))
    video = {"video.width": 96, "video.height": 64, "video.fps": 10}
    result = train_command.run(OmegaConf.create(train_config(tmp_path, **video)), tmp_path)
    best = tmp_path / "checkpoints" / "best" / "policy"
    assert list(result) == ["deployed_policy", "best_step", "best_median_position_error", "best_crashes",
                            "best_success_rate", "last_actor_step", "last_actor_median_position_error",
                            "last_actor_crashes", "last_actor_success_rate"]
    assert result["deployed_policy"] == str(best) and result["best_step"] == 200 and result["last_actor_step"] == 400
    assert (result["best_median_position_error"], result["last_actor_crashes"]) == (0.01, 1)
    obs = np.random.default_rng(0).normal(size=(8, 22)).astype(np.float32)
    np.testing.assert_array_equal(flown[0].act(obs), load_policy(best).act(obs))
    assert titled == ["hover: sac on crazyflie, best actor from step 200"]
    assert (tmp_path / "plots" / "trajectories.png").exists() and (tmp_path / "videos" / "flight.mp4").exists()
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["best"]["step"] == 200 and metrics["last_actor"]["step"] == 400


def test_actor_average_moves_toward_the_actor_at_its_rate():
    from types import SimpleNamespace

    from robo.rl.callbacks import ActorAverage

    model = SimpleNamespace(actor=torch.nn.Linear(3, 2))
    average = ActorAverage(horizon=40)
    average.attach(model)
    before = model.actor.weight.detach().clone()
    with torch.no_grad():
        model.actor.weight.add_(1.0)
    average.update(model.actor, 10)  # rate 10 / 40
    torch.testing.assert_close(average.actor.weight, before + 0.25)
    with pytest.raises(ValueError, match="positive"):
        ActorAverage(horizon=0)


def test_averaged_actor_is_deployed_checkpointed_and_resumed(tmp_path):
    c = train_config(tmp_path, algo="sac", **{"algo.average_actor_steps": 100})
    t = Trainer(c, tmp_path)
    t.train(progress=False)
    obs = np.random.default_rng(0).normal(size=(8, 22)).astype(np.float32)
    averaged = t.policy().act(obs)
    assert not np.allclose(averaged, t.policy(averaged=False).act(obs), atol=1e-4)
    np.testing.assert_allclose(load_policy(tmp_path / "checkpoints" / "latest" / "policy").act(obs), averaged,
                               atol=1e-6)
    resumed = Trainer(c, tmp_path)
    resumed.train(resume=True, progress=False)  # nothing left to train: the average comes back as saved
    np.testing.assert_allclose(resumed.policy().act(obs), averaged, atol=1e-6)
    c["algo"]["name"] = "ppo"
    with pytest.raises(ValueError, match="average_actor_steps needs td3 or sac"):
        Trainer(c, tmp_path)


def test_checkpoints_and_evaluations_do_not_change_the_training(tmp_path):
    """Exporting the actor (for a checkpoint, an evaluation or the best policy) must not draw from the
    global RNGs that SB3 samples actions and batches with: a run checkpointed every 100 steps learns
    exactly what one checkpointed once learns."""
    obs = np.random.default_rng(0).normal(size=(8, 22)).astype(np.float32)
    actions = []
    for every in (100, 400):
        t = Trainer(train_config(tmp_path / str(every), checkpoint_every=every), tmp_path / str(every))
        t.train(progress=False)
        actions.append(t.policy().act(obs))
    np.testing.assert_array_equal(actions[0], actions[1])


def test_trim_deploys_the_actor_without_its_steady_hover_offset(tmp_path, monkeypatch):
    """With trim.starts > 0 an evaluation flies (and best/ keeps, without trimming again) the actor trimmed on the
    nominal robot. Stand-in actor: RAPTOR on a Crazyflie loaded to 34 g, which settles ~10 cm low (no integral
    action)."""
    from policies.foundation import load_raptor

    over = {"robot.mass": 0.034, "eval.num_envs": 16, "eval.seconds": 5.0, "trim.starts": 8}
    t = Trainer(train_config(tmp_path, **over), tmp_path)
    t.policy = lambda averaged=True: load_raptor()
    trimmed = t.evaluate()
    assert trimmed["final_median_position_error"] < 0.01 and trimmed["crashes"] == 0
    assert trimmed["trim_offset_m"][2] < -0.05
    monkeypatch.setattr("robo.rl.trainer.trim_policy", lambda *a, **k: pytest.fail("trimmed a second time"))
    t._keep_if_best({"step": 0, **trimmed})
    monkeypatch.undo()
    best = load_policy(tmp_path / "checkpoints" / "best" / "policy")
    obs = np.random.default_rng(0).normal(size=(4, 22)).astype(np.float32)
    flown = t.deployed_policy()[0]
    flown.reset()
    best.reset()
    np.testing.assert_allclose(best.act(obs), flown.act(obs), atol=1e-6)
    t.c["trim"]["starts"] = 0
    untrimmed = t.evaluate()
    assert untrimmed["final_median_position_error"] > 0.05 and "trim_offset_m" not in untrimmed
