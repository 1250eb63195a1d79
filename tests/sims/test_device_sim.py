"""The batched quadrotor task and its envs on a torch device: ``device="cpu"`` explicitly flies what the default
flies, and on CUDA (skipped without a GPU) the steps match the CPU's to float32 tolerance."""

import numpy as np
import pytest
import torch

from sims.envs import QuadrotorVectorEnv, make_batched_task

# every per-reset draw the task has: randomized airframes, random figure-eight shapes, pushes, guidance
TASK = {"name": "figure_eight", "episode_seconds": 0.3,
        "figure_eight_randomization": {"amplitude": [0.2, 0.6], "period": [2.0, 4.0],
                                       "random_phase": True, "hover_fraction": 0.25},
        "push": {"probability": 0.5, "time": [0.05, 0.2]}, "init": {"guidance": 0.2}}
RANDOMIZATION = {"mass": [0.02, 0.05], "thrust_to_weight": [2.0, 3.0]}


def _fly(device: str | None, steps: int = 80, num_envs: int = 16):
    """(obs, reward, terminated, truncated) per step of ``core`` under seeded random actions (autoresets)."""
    kw = {} if device is None else {"device": device}
    task = make_batched_task(TASK, "crazyflie", num_envs, randomization=RANDOMIZATION, **kw)
    task.seed(3)
    actions = torch.Generator().manual_seed(0)
    out = [(task.reset(), None, None, None)]
    for _ in range(steps):
        a = 0.3 * torch.randn(num_envs, 4, generator=actions) - 0.2
        r = task.step(a.to(task.device))
        out.append((r.obs, r.reward, r.terminated, r.truncated))
        task.reset(r.terminated | r.truncated)
    return task, out


def test_explicit_cpu_flies_the_default_trajectories():
    default, a = _fly(None)
    cpu, b = _fly("cpu")
    assert cpu.device == torch.device("cpu") and cpu.sim.params.mass.device.type == "cpu"
    assert any(bool((t | u).any()) for _, _, t, u in a[1:]), "no episode ended: the resets are not exercised"
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            if u is not None:
                assert torch.equal(u, v)


def test_vector_env_takes_a_device_and_returns_numpy():
    env = QuadrotorVectorEnv(4, task="hover", device="cpu", randomization=RANDOMIZATION)
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, np.ndarray) and obs.shape == (4, 22)
    obs, reward, terminated, truncated, info = env.step(np.zeros((4, 4), np.float32))
    assert obs.dtype == np.float32 and reward.shape == (4,) and info["position_error"].shape == (4,)
    assert env.core.device.type == "cpu" and env.core.steps.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_steps_match_the_cpu_to_float32_tolerance():
    cuda, a = _fly("cuda")
    _, b = _fly("cpu")
    for name in ("steps", "levels", "push_start", "origin", "previous_action"):
        assert getattr(cuda, name).device.type == "cuda", name
    assert cuda.sim.state.device.type == "cuda" and cuda.sim.params.inertia.device.type == "cuda"
    for k, (x, y) in enumerate(zip(a, b)):
        assert x[0].device.type == "cuda"
        torch.testing.assert_close(x[0].cpu(), y[0], rtol=1e-4, atol=1e-4, msg=f"obs at step {k}")
        if x[1] is not None:
            torch.testing.assert_close(x[1].cpu(), y[1], rtol=1e-4, atol=1e-4, msg=f"reward at step {k}")
            assert torch.equal(x[2].cpu(), y[2]) and torch.equal(x[3].cpu(), y[3]), f"episode ends at step {k}"
