"""The fused step (step_backend='compiled', torch.compile of rk4_step) against the eager torch step.

Every CPU test steps B = 64 float32 quadrotors, so the file compiles one graph (about 20 s the first time on a
small CPU, seconds from inductor's on-disk cache); the CUDA test is skipped without a GPU."""

import numpy as np
import pytest
import torch

from sims.envs import QuadrotorVectorEnv, make_batched_task
from sims.quadrotor import BatchedQuadrotorSim, compiled_step
from sims.quadrotor.dynamics import hover_state, rk4_step
from sims.quadrotor.randomization import RandomizationConfig, sample_params

B = 64
RANDOMIZATION = {"mass": [0.02, 0.05], "thrust_to_weight": [2.0, 3.0]}


@pytest.fixture(scope="module")
def compiled():
    """The compiled step for B = 64 float32 CPU tensors (compiled once for the whole file)."""
    return compiled_step.warm_up(sample_params(RandomizationConfig(), B, seed=0))


def _rollout(step, device="cpu", steps: int = 50):
    """States (steps, B, 17) of randomized quadrotors under seeded actions around hover, with a world force
    (zeros on every third step, the compiled step's form of no force) from step 10 on."""
    p = sample_params(RandomizationConfig(), B, seed=1).to(device=device)
    g = torch.Generator().manual_seed(2)
    s, out = hover_state(p), []
    hover = (2 * p.hover_command() - 1)[:, None].cpu()
    for t in range(steps):
        a = (hover + 0.3 * torch.randn(B, 4, generator=g)).clamp(-1, 1)
        f = 0.3 * torch.randn(B, 3, generator=g) * p.mass[:, None].cpu()
        f = f if t >= 10 and t % 3 else torch.zeros(B, 3)
        s = step(s, a.to(device), p, f.to(device))
        out.append(s.cpu())
    return torch.stack(out)


def _assert_float32_close(x: torch.Tensor, ref: torch.Tensor, atol: float = 2e-5):
    """Equal to ``atol`` relative to each component's largest magnitude (at least 1) over the run: the compiled
    step differs from the eager one by float32 rounding (about 2e-6 after 50 steps), not by a model change."""
    scale = ref.reshape(-1, ref.shape[-1]).abs().amax(0).clamp(min=1.0)
    np.testing.assert_allclose((x / scale).numpy(), (ref / scale).numpy(), rtol=0, atol=atol)


def test_compiled_step_matches_rk4_step_over_a_rollout(compiled):
    ref, fused = _rollout(rk4_step), _rollout(compiled)
    assert ref[:, :, 2].std() > 0.01 and ref[-1, :, 10:13].abs().max() > 1.0  # the quadrotors went different ways
    _assert_float32_close(fused, ref)


def test_simulator_and_task_fly_the_same_on_both_backends(compiled):
    p = sample_params(RandomizationConfig(), B, seed=3)
    sims = [BatchedQuadrotorSim(p, step_backend=b) for b in ("torch", "compiled")]
    assert [s.step_backend for s in sims] == ["torch", "compiled"]
    g = torch.Generator().manual_seed(4)
    for t in range(30):
        a = 0.2 * torch.randn(B, 4, generator=g) + (2 * p.hover_command() - 1)[:, None]
        force = 0.1 * torch.randn(B, 3, generator=g) * p.mass[:, None] if t % 2 else None
        for sim in sims:
            sim.external_force = force
            sim.step(a)
    assert torch.equal(sims[0].time, sims[1].time)
    _assert_float32_close(sims[1].state, sims[0].state)

    obs = []
    for backend in ("torch", "compiled"):  # pushes (external forces), resets and new airframes
        task = make_batched_task({"name": "hover", "episode_seconds": 0.2, "push": {"probability": 0.5}},
                                 "crazyflie", B, randomization=RANDOMIZATION, step_backend=backend)
        task.seed(0)
        out = [task.reset()]
        actions = torch.Generator().manual_seed(5)
        for _ in range(40):
            r = task.step(0.3 * torch.randn(B, 4, generator=actions))
            out.append(r.obs)
            task.reset(r.terminated | r.truncated)
        obs.append(torch.stack(out))
        assert task.sim.step_backend == backend
    _assert_float32_close(obs[1], obs[0])

    env = QuadrotorVectorEnv(B, step_backend="compiled", randomization=RANDOMIZATION)
    first, _ = env.reset(seed=0)
    nxt, reward, *_ = env.step(np.zeros((B, 4), np.float32))
    assert env.core.sim.step_backend == "compiled" and nxt.shape == (B, 22) and np.isfinite(reward).all()


def test_bad_inputs_raise_before_stepping(compiled):
    sim = BatchedQuadrotorSim(sample_params(RandomizationConfig(), B, seed=0), step_backend="compiled")
    s0 = sim.state
    with pytest.raises(ValueError, match=rf"action has shape \({B}, 3\), expected \({B}, 4\)"):
        sim.step(torch.zeros(B, 3))
    bad = torch.zeros(B, 4)
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or inf.*environments \[1\]"):
        sim.step(bad)
    sim.external_force = torch.zeros(3)
    with pytest.raises(ValueError, match=rf"external_force has shape \(3,\), expected \({B}, 3\)"):
        sim.step(torch.zeros(B, 4))
    assert sim.state is s0 and sim.time.eq(0).all()
    with pytest.raises(ValueError, match="unknown step_backend 'compile'.*'compiled'"):
        BatchedQuadrotorSim(sim.params, step_backend="compile")


def test_a_failed_compile_warns_and_steps_with_torch(monkeypatch):
    def broken(device_type):
        def fail(*args):
            raise RuntimeError("backend='inductor' raised") from OSError("no working C++ compiler found\nmore")
        return fail

    monkeypatch.setattr(compiled_step, "compiled_rk4_step", broken)
    p = sample_params(RandomizationConfig(), 2, seed=0)
    with pytest.warns(RuntimeWarning, match=r"torch.compile of the RK4 step failed on cpu \(OSError: no working C\+\+ "
                                            r"compiler found\); stepping with step_backend='torch' instead"):
        sim = BatchedQuadrotorSim(p, step_backend="compiled")
    assert sim.step_backend == "torch"
    torch.testing.assert_close(sim.step(torch.zeros(2, 4)), rk4_step(hover_state(p), torch.zeros(2, 4), p))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_compiled_step_matches_the_cpu_torch_step():
    sim = BatchedQuadrotorSim(sample_params(RandomizationConfig(), B, seed=0), step_backend="compiled", device="cuda")
    assert sim.step_backend == "compiled" and sim.state.device.type == "cuda"
    fused = _rollout(compiled_step.compiled_rk4_step("cuda"), device="cuda")
    _assert_float32_close(fused, _rollout(rk4_step), atol=1e-4)  # CUDA's kernels round differently
