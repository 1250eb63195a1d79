"""The one device setting (robo.device), its checks, the imitation trainer, evaluation, world models and DSRL
steering on it, and Ray sweeps (robo.sweep)."""

import logging
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.registry import load_policy
from robo.device import move_policy, pin, resolve_device, sb3_device, to_device
from robo.imitation import ChunkWindows, ImitationTrainer, TrainConfig, compute_stats
from robo.ray_tasks import SerialExecutor, fan_out
from robo.run_dir import compose
from robo.sweep import expand, report, run_sweep, sweep_ray
from robo.validation import ConfigError, validate
from sims.toy import generate_demos
from tests.robo.cli_run import robo

TOY = dict(obs_dim=2, action_dim=2, n_obs_steps=2, horizon=8, n_action_steps=4, down_dims=[16, 32],
           diffusion_step_embed_dim=16, num_train_timesteps=20, num_inference_steps=4)


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_auto_falls_back_to_the_cpu_and_picks_cuda_when_torch_sees_one(no_cuda, monkeypatch):
    assert resolve_device("auto") == torch.device("cpu") == resolve_device(None)
    assert resolve_device("cpu") == torch.device("cpu") and sb3_device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device(" CUDA:1 ") == torch.device("cuda", 1) and sb3_device("cuda:1") == "cuda:1"
    with pytest.raises(ValueError, match=r"device=cuda:2: only 2 CUDA GPU\(s\) visible"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("spec, match", [("tpu", "choose auto, cpu, cuda or cuda:N"), ("cuda:x", "choose auto"),
                                         ("cuda", "torch sees no CUDA GPU"), ("cuda:0", "use device=cpu or auto")])
def test_a_bad_or_missing_device_is_one_line(no_cuda, spec, match):
    with pytest.raises(ValueError, match=match) as e:
        resolve_device(spec)
    assert "\n" not in str(e.value)


def test_every_run_config_has_the_device_key_and_validation_checks_it(no_cuda):
    for command in ("train", "steer", "finetune", "foundation", "imagine", "eval"):
        cfg = compose(command, [])
        assert cfg.device == "auto", command
        validate(command, cfg)  # auto is fine without a GPU
    with pytest.raises(ConfigError, match="device='tpu': choose auto, cpu, cuda or cuda:N"):
        validate("train", compose("train", ["device=tpu"]))
    with pytest.raises(ConfigError, match="learner.device=cuda: torch sees no CUDA GPU"):
        validate("finetune", compose("finetune", ["+learner.device=cuda"]))


def test_batches_move_to_the_device_and_pin_only_for_cuda():
    batch = {"obs": torch.ones(2, 3), "n": 3}
    assert pin(batch, torch.device("cpu")) is batch
    moved = to_device(batch, torch.device("cpu"))
    assert moved["obs"].device.type == "cpu" and moved["n"] == 3


def toy(steps: int, **train):
    episodes = generate_demos(20, seed=0)
    torch.manual_seed(0)
    policy = DiffusionPolicy(DiffusionConfig(**TOY))
    policy.set_normalization(compute_stats(episodes))
    windows = ChunkWindows(episodes, policy.n_obs_steps, policy.horizon, policy.n_action_steps)
    return policy, windows, TrainConfig(steps=steps, batch_size=16, warmup_steps=1, log_every=1, checkpoint_every=2,
                                        **train)


def test_the_imitation_trainer_runs_on_the_given_device_with_bf16_autocast(tmp_path, no_cuda):
    policy, windows, config = toy(2, amp="bf16")
    trainer = ImitationTrainer(policy, windows, config, tmp_path, device="cpu")
    assert trainer.device == torch.device("cpu") and trainer.ranks.world == 1
    out = trainer.train(progress=False)
    assert out["step"] == 2 and torch.isfinite(torch.tensor(out["loss"]))
    assert all(p.dtype == torch.float32 for p in policy.model.parameters())  # autocast, not a bf16 model
    # a checkpoint loads wherever it is read: the policy from safetensors (CPU), the state with map_location
    loaded = load_policy(tmp_path / "checkpoints" / "latest" / "policy")
    for a, b in zip(loaded.model.state_dict().values(), policy.inference_model.state_dict().values()):
        assert a.device.type == "cpu" and torch.equal(a, b.cpu())
    fresh, windows4, config4 = toy(4)
    again = ImitationTrainer(fresh, windows4, config4, tmp_path, device="auto")
    assert again.load_checkpoint() == 2
    with pytest.raises(ValueError, match="train.amp='fp8': choose bf16 or null"):
        TrainConfig(amp="fp8")
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        ImitationTrainer(policy, windows, config, tmp_path, device="cuda")


def test_move_policy_moves_every_copy_of_the_weights():
    policy = DiffusionPolicy(DiffusionConfig(**TOY))
    move_policy(policy, torch.device("meta"))
    assert {p.device.type for m in policy.weight_copies() for p in m.parameters()} == {"meta"}


# Evaluation on the device --------------------------------------------------------------------------
class _AnyDevice:
    """A policy whose ``act`` answers on its input's device, as robo's MLP and GRU policies do."""

    obs_dim, action_dim = 22, 4

    def __init__(self):
        self.model = torch.nn.Linear(22, 4)

    def reset(self, mask=None):
        pass

    def act(self, obs):  # cuts the motors of quads whose position error is +x: some crash, some hover
        return torch.where(obs[:, :1] > 0, -1.0, -0.2) + 0.01 * torch.tanh(self.model(obs))


class _NumpyOnly(_AnyDevice):
    def act(self, obs):
        return super().act(torch.as_tensor(obs).cpu()).detach().numpy()


def test_eval_flies_where_its_policy_and_sim_can(monkeypatch, no_cuda):
    from robo import device as robo_device
    from robo.evaluate import flight_device

    assert flight_device("auto", _AnyDevice(), {"step_backend": "torch"}) == torch.device("cpu")
    # a stand-in accelerator: "meta" tensors have devices but no data, enough to see who moves where
    monkeypatch.setattr(robo_device, "resolve_device", lambda spec: torch.device("meta"))
    policy = _AnyDevice()
    assert flight_device("cuda", policy, {"step_backend": "torch"}) == torch.device("meta")
    assert policy.model.weight.device.type == "meta"
    assert flight_device("cuda", _AnyDevice(), {"step_backend": "c"}) == torch.device("cpu")
    assert flight_device("cuda", _AnyDevice(), {"step_backend": "compiled"}) == torch.device("meta")  # any device
    numpy_only = _NumpyOnly()
    assert flight_device("cuda", numpy_only, {"step_backend": "torch"}) == torch.device("cpu")
    assert numpy_only.model.weight.device.type == "cpu"


def test_a_flight_on_an_explicit_cpu_is_the_default_flight():
    from robo.evaluate import rollout
    from robo.factory import make_task

    torch.manual_seed(0)
    policy = _AnyDevice()
    sim = {"backend": "batched", "randomization": {"mass": [0.02, 0.05]}}
    flights = [rollout(policy, make_task({"name": "hover"}, {"preset": "crazyflie"}, sim, 8, seed=1, **kw), 0.5)
               for kw in ({}, {"device": "cpu"})]
    assert (flights[0].crashed_at >= 0).any() and (flights[0].crashed_at < 0).any()  # frozen crashes recorded
    for name in ("states", "reference", "actions", "crashed_at"):
        np.testing.assert_array_equal(getattr(flights[0], name), getattr(flights[1], name), err_msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cuda_flight_matches_the_cpu_flight():
    from policies.foundation import FoundationConfig, FoundationPolicy
    from robo.evaluate import flight_device, rollout
    from robo.factory import make_task

    flights = []
    for spec in ("cpu", "cuda"):
        torch.manual_seed(0)
        policy = FoundationPolicy(FoundationConfig())
        device = flight_device(spec, policy, {"step_backend": "torch"})
        assert device.type == spec
        task = make_task({"name": "hover"}, {"preset": "crazyflie"}, {"backend": "batched"}, 64, seed=1, device=device)
        assert task.state.device.type == spec
        flights.append(rollout(policy, task, 1.0))
    cpu, cuda = flights
    np.testing.assert_array_equal(cpu.crashed_at, cuda.crashed_at)
    alive = cpu.crashed_at < 0
    np.testing.assert_allclose(cuda.states[:, alive], cpu.states[:, alive], rtol=1e-4, atol=1e-4)


# World models on the device -------------------------------------------------------------------------
def _fit_world_models(**device):
    """A small ensemble and trajectory diffusion fitted on seeded data: (ensemble, its stats, generator, its stats)."""
    from policies.world_model import EnsembleConfig, EnsembleDynamics, TrajectoryDiffusion, TrajectoryDiffusionConfig

    rng = np.random.default_rng(0)
    s, a = rng.normal(size=(200, 3)), rng.uniform(-1, 1, (200, 2))
    data = {"obs": s, "action": a, "next_obs": 0.9 * s + 0.1 * a.sum(1, keepdims=True), "reward": -(s ** 2).sum(1),
            "terminated": (np.abs(s[:, 0]) > 2).astype(float)}
    torch.manual_seed(0)
    ensemble = EnsembleDynamics(EnsembleConfig(obs_dim=3, action_dim=2, num_members=2, hidden_dims=[16]))
    ensemble_stats = ensemble.fit(data, steps=10, batch_size=32, seed=0, **device)
    generator = TrajectoryDiffusion(TrajectoryDiffusionConfig(obs_dim=3, action_dim=2, horizon=8,
                                                              down_dims=[16, 32]))
    generator_stats = generator.fit(rng.normal(size=(16, 8, 6)), steps=2, batch_size=4, seed=0, **device)
    return ensemble, ensemble_stats, generator, generator_stats


def test_world_models_fit_on_an_explicit_cpu_as_by_default_and_come_back_on_the_cpu():
    default, on_cpu = _fit_world_models(), _fit_world_models(device="cpu")
    assert default[1] == on_cpu[1] and default[3] == on_cpu[3]
    for a, b in ((default[0].model, on_cpu[0].model), (default[2].model, on_cpu[2].model)):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
            assert x.device.type == "cpu" and torch.equal(x, y), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_world_models_fitted_on_cuda_match_the_cpu_fit():
    cpu, cuda = _fit_world_models(device="cpu"), _fit_world_models(device="cuda")
    assert abs(cpu[1]["train_nll"] - cuda[1]["train_nll"]) < 1e-3 and abs(cpu[3]["loss"] - cuda[3]["loss"]) < 1e-3
    for a, b in ((cpu[0].model, cuda[0].model), (cpu[2].model, cuda[2].model)):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
            assert y.device.type == "cpu", name
            if x.is_floating_point():
                torch.testing.assert_close(y, x, rtol=1e-3, atol=1e-4, msg=name)


# Steering (DSRL) on the device ----------------------------------------------------------------------
TOY_TASK = "robo/ObstacleReach-v0"


class _Chunker:
    """A stand-in chunked base for the toy task (obs (2,), action (2,)): the chunk is the noise plus a linear map of
    the newest observation, on whatever device its input is."""

    kind, obs_dim, action_dim, n_obs_steps, horizon, n_action_steps = "chunker", 2, 2, 2, 8, 4
    noise_shape = (8, 2)
    config = SimpleNamespace(image_shape=None)

    def __init__(self):
        self.model = torch.nn.Linear(2, 2)

    def reset(self, mask=None):
        pass

    def predict_chunk(self, obs_history, noise=None):
        return noise + self.model(obs_history[:, -1])[:, None]


class _NumpyChunker(_Chunker):
    def predict_chunk(self, obs_history, noise=None):
        return super().predict_chunk(obs_history.cpu(), noise.cpu()).detach().numpy()


def _steer_config(algo: str = "dsrl", **over) -> dict:
    from robo.commands.steer import algo_config

    a = algo_config(algo, ["kwargs.learning_starts=10", "kwargs.gradient_steps=1", "policy_kwargs.net_arch=[16]",
                           "kwargs.batch_size=8"] if algo != "dsrl_na" else [])
    return {"algo": a, "total_env_steps": 40, "num_envs": 1, "seed": 0, "eval_every": 40, "checkpoint_every": 40,
            "eval": {"episodes": 1, "episodes_during_training": 1, "seed": 100000}, "deploy": {"gate": False},
            **over}


def test_steering_decodes_with_a_copy_of_the_base_on_the_device(monkeypatch, tmp_path, caplog):
    import sims  # noqa: F401  (registers the toy task)
    from robo.steer import LatentNoiseEnv, SteerTrainer, steering_decoder
    from robo.steer import trainer as steer_trainer

    base, cpu = _Chunker(), torch.device("cpu")
    assert steering_decoder(base, "cpu") == (base, cpu)  # the CPU path: the base itself
    # a stand-in accelerator: "meta" tensors have devices but no data, enough to see who moves where
    decoder, device = steering_decoder(base, "meta")
    assert device.type == "meta" and decoder.model.weight.device.type == "meta"
    assert base.model.weight.device.type == "cpu", "the base (what the steered policy holds) stays on the CPU"
    numpy_only = _NumpyChunker()
    with caplog.at_level(logging.WARNING, logger="robo.steer.envs"):
        assert steering_decoder(numpy_only, "meta") == (numpy_only, cpu)
    assert "does not decode on meta tensors" in caplog.text
    with pytest.raises(ValueError, match="weights are on cpu, but it decodes on device=meta"):
        LatentNoiseEnv(gym.make(TOY_TASK), base, device="meta")

    monkeypatch.setattr(steer_trainer, "sb3_device", lambda spec: "meta")  # SAC's device
    t = SteerTrainer(_steer_config(num_envs=2), tmp_path / "dsrl", base, lambda: gym.make(TOY_TASK), progress=False)
    assert t.decode_device.type == "meta" and t.decoder is not base
    assert all(e.device.type == "meta" and e.policy.model.weight.device.type == "meta" for e in t.envs)
    assert t.envs[0].policy is t.envs[1].policy, "one copy of the base for all the envs"
    assert base.model.weight.device.type == "cpu"
    na = SteerTrainer(_steer_config("dsrl_na"), tmp_path / "na", base, lambda: gym.make(TOY_TASK), progress=False)
    assert na.decoder is base and na.envs[0].device == cpu  # DSRL-NA's networks, and so its base, are on the CPU


def _tiny_run(tmp_path, **over):
    import sims  # noqa: F401
    from robo.steer import SteerTrainer
    from tests.policies.test_steered import tiny_diffusion

    base = tiny_diffusion()
    t = SteerTrainer(_steer_config(**over), tmp_path, base, lambda: gym.make(TOY_TASK), progress=False)
    return t, base, t.train()


def test_steering_on_an_explicit_cpu_decodes_the_base_itself_as_before(tmp_path, no_cuda):
    """device=cpu (and auto without a GPU) decodes with the base itself on the CPU, each decision the chunk of the
    formula the envs used before they took a device, bit for bit; both settings give the same run."""
    t, base, final = _tiny_run(tmp_path / "cpu", device="cpu")
    env = t.envs[0]
    assert t.decoder is base and env.policy is base and env.device == torch.device("cpu")
    assert str(t.model.device) == "cpu"
    env.reset(seed=3)
    a = env.action_space.sample()
    noise = env.noise_bound * torch.as_tensor(a, dtype=torch.float32).reshape(1, *env.noise_shape)
    chunk = torch.as_tensor(base.predict_chunk(torch.as_tensor(env.window, dtype=torch.float32)[None], noise))
    start = base.n_obs_steps - 1
    np.testing.assert_array_equal(env.decode(a), chunk[0, start:start + env.n_action_steps].numpy().astype(np.float64))
    auto, _, final_auto = _tiny_run(tmp_path / "auto", device="auto")
    assert {k: v for k, v in final.items() if k != "wall_time"} == {k: v for k, v in final_auto.items()
                                                                    if k != "wall_time"}
    for x, y in zip(t.model.policy.state_dict().values(), auto.model.policy.state_dict().values()):
        assert torch.equal(x, y)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_steering_on_cuda_decodes_there_and_saves_a_cpu_policy(tmp_path):
    from policies.registry import load_policy

    t, base, final = _tiny_run(tmp_path, device="cuda")
    assert t.decode_device.type == "cuda" and t.model.device.type == "cuda" and final["env_steps"] >= 40
    assert {p.device.type for m in t.decoder.weight_copies() for p in m.parameters()} == {"cuda"}
    assert {p.device.type for m in base.weight_copies() for p in m.parameters()} == {"cpu"}
    saved = load_policy(tmp_path / "checkpoints" / "latest" / "policy")
    assert saved.kind == "steered" and all(p.device.type == "cpu" for p in saved.model.parameters())


# Ray sweeps -----------------------------------------------------------------------------------------
def test_a_multirun_without_ray_address_stays_hydras():
    assert sweep_ray(["seed=0,1"]) is None and sweep_ray(["-m", "seed=0,1"]) is None
    assert sweep_ray(["-m", "seed=0,1", "ray.address=null"]) is None
    ray = sweep_ray(["-m", "seed=0,1", "ray.address=local", "ray.cpus_per_run=0.5"])
    assert (ray.address, ray.cpus_per_run, ray.num_cpus) == ("local", 0.5, None)
    assert expand(["-m", "seed=0,1", "policy=diffusion", "ray.address=local", "demos=2,3"]) == [
        ["seed=0", "policy=diffusion", "demos=2"], ["seed=0", "policy=diffusion", "demos=3"],
        ["seed=1", "policy=diffusion", "demos=2"], ["seed=1", "policy=diffusion", "demos=3"]]


def test_a_sweep_fans_out_one_task_per_job_and_reports_each(tmp_path):
    calls = []

    def job(spec):
        calls.append(spec)
        if spec["overrides"] == ["seed=1"]:
            raise RuntimeError("diverged")
        return {"job": spec["job"], "returncode": 0, "run_dir": spec["run_dir"], "output": ["ok"]}

    executor = SerialExecutor()
    args = ["-m", "seed=0,1,2", "ray.address=local", f"hydra.sweep.dir={tmp_path}"]
    results = run_sweep("train", args, sweep_ray(args), executor=executor, job_fn=job)
    assert len(executor.calls) == 3 and [c["overrides"] for c in calls] == [["seed=0"], ["seed=1"], ["seed=2"]]
    assert [r["run_dir"] for r in results] == [str(tmp_path / str(n)) for n in range(3)]
    assert [r["returncode"] for r in results] == [0, None, 0] and "diverged" in results[1]["error"]
    table, code = report(results)
    assert code == 1 and "diverged" in table.splitlines()[2]


def test_fan_out_resubmits_what_on_error_asks_for():
    attempts = {}

    def flaky(spec):
        attempts[spec] = attempts.get(spec, 0) + 1
        if attempts[spec] < 2:
            raise OSError("worker died")
        return spec * 10

    done = {}
    fan_out(flaky, [1, 2], SerialExecutor(), on_done=done.__setitem__, on_error=lambda spec, e: attempts[spec] < 3)
    assert done == {1: 10, 2: 20} and attempts == {1: 2, 2: 2}


TINY = ["policy=diffusion", "task=obstacle_reach", "demos=4", "policy.down_dims=[8,16]", "policy.horizon=8",
        "policy.n_action_steps=4", "policy.diffusion_step_embed_dim=8", "policy.train.steps=4",
        "policy.train.warmup_steps=1", "policy.train.checkpoint_every=2", "task.eval.episodes=1",
        "task.eval.episodes_during_training=1", "video.enabled=false", "device=cpu"]


@pytest.mark.slow
def test_a_ray_sweep_runs_each_job_in_its_own_run_folder(tmp_path):
    pytest.importorskip("ray")
    r = robo("train", "-m", "seed=0,1", *TINY, "ray.address=local", "ray.num_cpus=2",
             f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for n in (0, 1):
        assert (tmp_path / "sweep" / str(n) / "metrics.json").is_file()
    assert "seed: 1" in (tmp_path / "sweep" / "1" / "config.yaml").read_text()
    r = robo("train", "-m", "seed=0,1", "device=tpu", "ray.address=local", cwd=tmp_path, timeout=600)
    assert r.returncode == 2 and "device='tpu'" in r.stderr
