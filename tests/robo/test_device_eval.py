"""Imitation evaluation and world-model prediction on the run's device (issue 69, item 1).

CPU only by default: ``device=cpu`` and ``device=auto`` (which falls back to the CPU here) must fly and predict
exactly as the default CPU path does; chunk policies answer in the caller's type. The CUDA variants compare a GPU
against the CPU to float32 tolerance and are skipped without one.
"""

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from policies.base import weights_device
from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.energy import EnergyConfig, EnergyPolicy, ImplicitBCConfig, ImplicitBCPolicy
from policies.world_model import (EnsembleConfig, EnsembleDynamics, LatentConfig, LatentWorldModel,
                                  TrajectoryDiffusion, TrajectoryDiffusionConfig)
from robo.imitation import compute_stats
from robo.imitation.evaluate import acting_device, collect_successes, evaluate_chunked_policy, flying_on
from robo.world_model.imagined_env import ImaginedEnv
from robo.world_model.rollout import imagine_rollout, open_loop_error
from robo.world_model.tasks import ImagineTask
from sims.toy import ENV_ID, generate_demos

CHUNK = dict(obs_dim=2, action_dim=2, n_obs_steps=2, horizon=8, n_action_steps=4)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def chunk_policy(kind: str):
    """A tiny untrained chunk policy with the toy task's normalization, seeded."""
    torch.manual_seed(0)
    if kind == "diffusion":
        policy = DiffusionPolicy(DiffusionConfig(**CHUNK, down_dims=[16, 32], diffusion_step_embed_dim=16,
                                                 num_train_timesteps=20, num_inference_steps=4))
    elif kind == "energy":
        policy = EnergyPolicy(EnergyConfig(**CHUNK, n_candidates=2, default_init="noise"))
    else:
        policy = ImplicitBCPolicy(ImplicitBCConfig(**CHUNK, hidden_dims=[32, 32], n_samples=16, dfo_iters=2))
    policy.set_normalization(compute_stats(generate_demos(5, seed=0)))
    return policy


OBS = np.random.default_rng(1).normal(size=(6, 3, 2)).astype(np.float32)  # 6 steps of 3 envs


def act_sequence(policy, as_tensor: bool = False) -> list:
    policy.reset()
    torch.manual_seed(5)  # the policy's own draws (noise=None) come from the global generator
    return [policy.act(torch.as_tensor(o) if as_tensor else o) for o in OBS]


@pytest.mark.parametrize("kind", ["diffusion", "energy", "implicit_bc"])
def test_a_chunk_policy_answers_in_the_callers_type_from_its_weights_device(kind):
    policy = chunk_policy(kind)
    assert policy.device == torch.device("cpu") == weights_device(policy)
    numpy_actions, tensor_actions = act_sequence(policy), act_sequence(policy, as_tensor=True)
    assert all(isinstance(a, np.ndarray) and a.shape == (3, 2) for a in numpy_actions)
    assert all(isinstance(a, torch.Tensor) and a.device == policy.device for a in tensor_actions)
    np.testing.assert_array_equal(np.stack(numpy_actions), torch.stack(tensor_actions).numpy())
    window = np.stack([OBS[0], OBS[1]], axis=1)  # (3, n_obs_steps, 2)
    noise = torch.randn(3, 8, 2, generator=torch.Generator().manual_seed(2))
    policy.reset()  # a full reset also reseeds the energy policy's candidate draws
    chunk = policy.predict_chunk(window, noise)
    assert isinstance(chunk, np.ndarray) and chunk.shape == (3, 8, 2)
    policy.reset()
    again = policy.predict_chunk(torch.as_tensor(window), noise.numpy())
    assert isinstance(again, torch.Tensor) and again.device == policy.device
    np.testing.assert_array_equal(chunk, again.numpy())


@pytest.mark.parametrize("kind", ["diffusion", "energy"])
def test_evaluating_on_cpu_or_auto_flies_exactly_as_the_default_cpu_path(kind, no_cuda):
    policy = chunk_policy(kind)
    kw = dict(episodes=3, seed=0, num_envs=2, max_steps=12)
    default = evaluate_chunked_policy(policy, ENV_ID, **kw)
    for device in ("cpu", "auto", torch.device("cpu")):
        assert evaluate_chunked_policy(policy, ENV_ID, device=device, **kw) == default
    eps, stats = collect_successes(policy, ENV_ID, starts=2, num_envs=2, max_steps=12, keep_failures=True)
    for device in ("cpu", "auto"):
        again, again_stats = collect_successes(policy, ENV_ID, starts=2, num_envs=2, max_steps=12,
                                               keep_failures=True, device=device)
        assert again_stats == stats
        for a, b in zip(eps, again):
            np.testing.assert_array_equal(a["action"], b["action"])
            np.testing.assert_array_equal(a["obs"], b["obs"])
    assert weights_device(policy) == torch.device("cpu")


class _CpuOnly:
    """A policy whose ``act`` reads host observations only (like a steered policy): it must stay on the CPU."""

    obs_dim, action_dim = 2, 2

    def __init__(self):
        self.model = torch.nn.Linear(2, 2)


def test_flying_on_moves_a_chunk_policy_there_and_back_and_leaves_others_home(monkeypatch, caplog):
    from robo.imitation import evaluate as ev

    policy = chunk_policy("diffusion")
    assert acting_device(policy) == acting_device(policy, "cpu") == torch.device("cpu")
    # a stand-in accelerator ("meta": devices without data) and a move that only records where it goes
    monkeypatch.setattr(ev, "resolve_device", lambda spec: torch.device("meta"))
    moves = []
    monkeypatch.setattr(ev, "move_policy", lambda p, device: moves.append((p, device)))
    with flying_on(policy, "cuda") as device:
        assert device == torch.device("meta") and moves == [(policy, torch.device("meta"))]
    assert moves[1:] == [(policy, torch.device("cpu"))]  # and back where it was
    other = _CpuOnly()
    with caplog.at_level(logging.WARNING), flying_on(other, "cuda") as device:
        assert device == torch.device("cpu") and other.model.weight.device.type == "cpu"
    assert "does not act on meta from host observations" in caplog.text and len(moves) == 2


def test_the_trainers_evaluations_see_the_policy_on_the_run_device(tmp_path):
    from robo.imitation import ChunkWindows, ImitationTrainer, TrainConfig

    policy = chunk_policy("diffusion")
    episodes = generate_demos(5, seed=0)
    windows = ChunkWindows(episodes, policy.n_obs_steps, policy.horizon, policy.n_action_steps)
    seen = []

    def evaluate(p, step):
        seen.append(weights_device(p))
        return {"success_rate": 0.0}

    trainer = ImitationTrainer(policy, windows, TrainConfig(steps=2, batch_size=4, warmup_steps=1, eval_every=1,
                                                            checkpoint_every=2), tmp_path, evaluate=evaluate,
                               device="cpu")
    trainer.train(progress=False)
    assert seen == [trainer.device, trainer.device]


def test_robo_eval_of_an_imitation_checkpoint_records_its_device(tmp_path, no_cuda):
    from omegaconf import OmegaConf

    from robo.commands.eval import evaluate_imitation
    from robo.run_dir import compose

    chunk_policy("diffusion").save(tmp_path / "policy")
    scores = []
    for device in ("cpu", "auto"):
        cfg = compose("eval", ["task=obstacle_reach", "policy=checkpoint", f"policy.path={tmp_path / 'policy'}",
                               "task.eval.episodes=2", "video.enabled=false", f"device={device}"])
        scores.append(evaluate_imitation(OmegaConf.to_container(cfg, resolve=True), tmp_path / device))
    assert scores[0] == scores[1] and scores[0]["device"] == "cpu" and scores[0]["episodes"] == 2


# World models -------------------------------------------------------------------------------------------
def point_data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    s, a = rng.normal(size=(n, 2)), rng.uniform(-1, 1, (n, 2))
    return {"obs": s, "action": a, "next_obs": s + 0.1 * a, "reward": -np.linalg.norm(s + 0.1 * a, axis=1),
            "terminated": np.zeros(n)}


def ensemble(**fit):
    torch.manual_seed(0)
    model = EnsembleDynamics(EnsembleConfig(obs_dim=2, action_dim=2, num_members=3, hidden_dims=[16],
                                            use_prev_change=True))
    data = point_data()
    model.fit({**data, "prev_obs": np.roll(data["obs"], 1, 0)}, steps=20, batch_size=32, seed=0, **fit)
    return model


SPACE = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
TASK = ImagineTask("point", 2, 2, SPACE, None, 8, [], lambda o: np.linalg.norm(o, axis=1) < 0.15, "final",
                   None, None, None, [])


def test_host_predictions_are_the_device_predictions_copied_back():
    model = ensemble()
    assert model.device == torch.device("cpu") and model.to("cpu") is model
    data = point_data(7, seed=3)
    for sample in ("mean", "member"):
        p = model.predict(data["obs"], data["action"], sample, torch.Generator().manual_seed(1),
                          prev_obs=data["next_obs"])
        h = model.predict_numpy(data["obs"], data["action"], sample, torch.Generator().manual_seed(1),
                                prev_obs=data["next_obs"])
        assert p.next_obs.device == model.device
        for key in ("next_obs", "reward", "terminated", "disagreement"):
            np.testing.assert_array_equal(h[key], getattr(p, key).numpy(), err_msg=f"{sample} {key}")
            assert h[key].dtype == getattr(p, key).numpy().dtype
    with pytest.raises(ValueError, match=r"action has shape \(7, 3\), expected \(B, 2\)"):
        model.predict_numpy(data["obs"], np.zeros((7, 3)))


def imagined_steps(model, steps=10):
    """An ImaginedEnv's outputs over ``steps`` seeded random steps, flattened."""
    env = ImaginedEnv(model, point_data(10, seed=4)["obs"], 4, SPACE, 3, disagreement_threshold=0.5, seed=0)
    rows = [env.reset(seed=0)[0]]
    rng = np.random.default_rng(0)
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(rng.uniform(-1, 1, (4, 2)))
        rows += [obs, reward, terminated, truncated, info["disagreement"], info.get("final_obs", np.zeros(0))]
    return np.concatenate([np.asarray(r, np.float64).ravel() for r in rows])


def test_imagination_on_an_explicit_cpu_predicts_exactly_as_before():
    default, on_cpu = ensemble(), ensemble(device="cpu").to("cpu")
    np.testing.assert_array_equal(imagined_steps(default), imagined_steps(on_cpu))
    policy = chunk_policy("diffusion")
    start = point_data(4, seed=5)["obs"]
    torch.manual_seed(0)  # the policy's own noise
    a = imagine_rollout(default, policy, start, 6, TASK, sample="member", seed=1)
    torch.manual_seed(0)
    b = imagine_rollout(on_cpu, policy, start, 6, TASK, sample="member", seed=1)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    episodes = [{"obs": np.random.default_rng(i).normal(size=(5, 2)), "action": np.zeros((5, 2)),
                 "next_obs": np.random.default_rng(i).normal(size=(5, 2))} for i in range(2)]
    np.testing.assert_array_equal(open_loop_error(default, episodes, 4), open_loop_error(on_cpu, episodes, 4))


def test_the_generators_sample_and_predict_where_they_are():
    torch.manual_seed(0)
    gen = TrajectoryDiffusion(TrajectoryDiffusionConfig(obs_dim=2, action_dim=2, horizon=8, down_dims=[16, 32]))
    gen.fit(np.random.default_rng(0).normal(size=(8, 8, 5)), steps=2, batch_size=4, seed=0)
    start = point_data(3)["obs"]
    a = gen.sample(start, lambda s: 0.5 * s, 0.5, generator=torch.Generator().manual_seed(0))
    b = gen.to("cpu").sample(start, lambda s: 0.5 * s, 0.5, generator=torch.Generator().manual_seed(0))
    assert gen.device == a.device == torch.device("cpu")
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.manual_seed(0)
    latent = LatentWorldModel(LatentConfig(image_size=16, channels=[8, 16], latent_dim=8, hidden_dim=16))
    images = np.random.default_rng(0).integers(0, 255, (6, 3, 16, 16)).astype(np.uint8)
    actions = np.random.default_rng(1).normal(size=(6, 2))
    latent.fit(images, actions, np.roll(images, 1, 0), steps=2, batch_size=3, seed=0, device="cpu")
    assert latent.device == torch.device("cpu")
    torch.testing.assert_close(latent.predict(images[:2], actions[:2]),
                               latent.to("cpu").predict(torch.as_tensor(images[:2]), torch.as_tensor(actions[:2])),
                               rtol=0, atol=0)


# CUDA against the CPU ---------------------------------------------------------------------------------------
@CUDA
@pytest.mark.parametrize("kind", ["diffusion", "energy"])
def test_a_chunk_policy_on_cuda_acts_as_on_the_cpu(kind):
    from robo.device import move_policy

    cpu, cuda = chunk_policy(kind), move_policy(chunk_policy(kind), torch.device("cuda"))
    assert cuda.device.type == "cuda"
    expected = np.stack(act_sequence(cpu))
    got = act_sequence(cuda)
    assert all(isinstance(a, np.ndarray) for a in got)
    np.testing.assert_allclose(np.stack(got), expected, rtol=1e-4, atol=1e-4)
    on_device = act_sequence(cuda, as_tensor=True)
    assert all(a.device.type == "cpu" for a in on_device)  # CPU tensors in, CPU tensors out
    cuda.reset()
    torch.manual_seed(5)
    answers = [cuda.act(torch.as_tensor(o, device="cuda")) for o in OBS]
    assert all(a.device.type == "cuda" for a in answers)
    np.testing.assert_allclose(torch.stack(answers).cpu().numpy(), expected, rtol=1e-4, atol=1e-4)


@CUDA
@pytest.mark.parametrize("kind", ["diffusion", "energy"])
def test_evaluating_on_cuda_matches_the_cpu_evaluation(kind):
    policy = chunk_policy(kind)
    kw = dict(episodes=3, seed=0, num_envs=2, max_steps=12)
    cpu = evaluate_chunked_policy(policy, ENV_ID, **kw)
    cuda = evaluate_chunked_policy(policy, ENV_ID, device="cuda", **kw)
    assert weights_device(policy).type == "cpu"  # moved back after the evaluation
    assert cuda["success_rate"] == cpu["success_rate"]
    assert cuda == pytest.approx(cpu, rel=1e-4, abs=1e-4)
    a, _ = collect_successes(policy, ENV_ID, starts=2, num_envs=2, max_steps=12, keep_failures=True)
    b, _ = collect_successes(policy, ENV_ID, starts=2, num_envs=2, max_steps=12, keep_failures=True, device="cuda")
    for x, y in zip(a, b):
        np.testing.assert_allclose(y["action"], x["action"], rtol=1e-4, atol=1e-4)


@CUDA
def test_imagination_on_cuda_matches_the_cpu():
    cpu, cuda = ensemble(), ensemble().to("cuda")
    assert cuda.device.type == "cuda"
    data = point_data(7, seed=3)
    p = cuda.predict(data["obs"], data["action"], "member", torch.Generator().manual_seed(1),
                     prev_obs=data["next_obs"])
    q = cpu.predict(data["obs"], data["action"], "member", torch.Generator().manual_seed(1),
                    prev_obs=data["next_obs"])
    assert p.next_obs.device.type == "cuda"
    torch.testing.assert_close(p.next_obs.cpu(), q.next_obs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(imagined_steps(cuda), imagined_steps(cpu), rtol=1e-4, atol=1e-4)
    torch.manual_seed(0)
    gen = TrajectoryDiffusion(TrajectoryDiffusionConfig(obs_dim=2, action_dim=2, horizon=8, down_dims=[16, 32]))
    gen.fit(np.random.default_rng(0).normal(size=(8, 8, 5)), steps=2, batch_size=4, seed=0)
    start = point_data(3)["obs"]
    a = gen.sample(start, lambda s: 0.5 * s, 0.5, generator=torch.Generator().manual_seed(0))
    b = gen.to("cuda").sample(start, lambda s: 0.5 * s, 0.5, generator=torch.Generator().manual_seed(0))
    assert b.device.type == "cuda"
    torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-4)
