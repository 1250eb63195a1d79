"""The compiled RK4 step (step_backend='c') against the torch step it mirrors."""

import warnings

import numpy as np
import pytest
import torch

from sims.envs import make_batched_task
from sims.quadrotor import BatchedQuadrotorSim, ParamsBatch, preset
from sims.quadrotor import c_step
from sims.quadrotor.c_compile import CompilerNotFound, shared_library
from sims.quadrotor.c_step import CStep, c_rk4_step
from sims.quadrotor.dynamics import rk4_step
from sims.quadrotor.randomization import RandomizationConfig, sample_params

EPS32 = float(torch.finfo(torch.float32).eps)


def random_case(B: int, seed: int, dtype=torch.float64):
    """Randomized quadrotors, states (tilted, spinning, motors anywhere), actions (some beyond [-1, 1]) and
    world forces, drawn in float64 and cast, so that the float32 and float64 cases are the same problem."""
    p = sample_params(RandomizationConfig(), B, seed=seed, dtype=dtype)
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    q = r(B, 4)
    s = torch.cat([r(B, 3), q / q.norm(dim=1, keepdim=True), 2 * r(B, 3), 10 * r(B, 3),
                   torch.rand(B, 4, generator=g, dtype=torch.float64)], 1)
    a = torch.rand(B, 4, generator=g, dtype=torch.float64) * 2.4 - 1.2
    ext = r(B, 3) * p.mass[:, None].double()
    return p, s.to(dtype), a.to(dtype), ext.to(dtype)


# B = 37: two full 16-wide blocks and a 5-wide one; 2 and 1: the one-lane path
@pytest.mark.parametrize("B", [1, 2, 37])
def test_float32_step_matches_torch_to_rounding(B):
    for seed in range(3):
        p, s, a, ext = random_case(B, seed, torch.float32)
        p64, s64, a64, ext64 = random_case(B, seed)
        for e, e64 in ((None, None), (ext, ext64)):
            exact = rk4_step(s64, a64, p64, e64)
            torch_err = (rk4_step(s, a, p, e).double() - exact).abs().amax(0)
            c = c_rk4_step(s, a, p, e)
            assert c.dtype == torch.float32 and c.shape == (B, 17)
            scale = exact.abs().amax(0)
            # as close to the float64 truth as torch's own float32 step, up to a few units of rounding
            assert torch.all((c.double() - exact).abs().amax(0) <= 2 * torch_err + 4 * EPS32 * scale)
            np.testing.assert_allclose(c.numpy(), rk4_step(s, a, p, e).numpy(), rtol=0,
                                       atol=8 * EPS32 * float(scale.max()))


def test_float64_step_matches_torch():
    p, s, a, ext = random_case(37, 3)
    for e in (None, ext):
        np.testing.assert_allclose(c_rk4_step(s, a, p, e).numpy(), rk4_step(s, a, p, e).numpy(), rtol=0, atol=1e-12)


def test_simulators_agree_over_a_rollout_with_forces_and_new_parameters():
    """100 steps of per-environment quadrotors under random actions and pushes, with parameters redrawn
    in place halfway (as a task's reset does): the two backends stay together (float64). The C
    simulator's mixer is a non-contiguous view, which it copies, and copies again when it changes."""
    B = 19
    p = sample_params(RandomizationConfig(), B, seed=4, dtype=torch.float64)
    sims = [BatchedQuadrotorSim(p.index(torch.arange(B)), step_backend=b) for b in ("torch", "c")]
    sims[1].params.mixer = sims[1].params.mixer.transpose(1, 2).contiguous().transpose(1, 2)
    assert not sims[1].params.mixer.is_contiguous()
    assert [sim.step_backend for sim in sims] == ["torch", "c"]
    g = torch.Generator().manual_seed(5)
    new = sample_params(RandomizationConfig(), B, seed=6, dtype=torch.float64)
    for t in range(100):
        a = torch.rand(B, 4, generator=g, dtype=torch.float64) * 0.4 - 0.2
        f = 0.05 * torch.randn(B, 3, generator=g, dtype=torch.float64) * p.mass[:, None]
        if t == 50:
            for sim in sims:
                idx = torch.arange(0, B, 2)
                for name, value in vars(new).items():
                    if name != "dt":
                        getattr(sim.params, name)[idx] = value[idx]
        for sim in sims:
            sim.external_force = f if t % 3 else None
            sim.step(a)
    ref, c = sims
    assert torch.equal(ref.time, c.time)
    assert ref.state[:, 2].std() > 0.01  # the environments went different ways
    np.testing.assert_allclose(c.state.numpy(), ref.state.numpy(), rtol=0, atol=1e-9)


def test_task_runs_on_the_c_backend():
    torch.manual_seed(0)
    tasks = [make_batched_task("hover", "crazyflie", 8, step_backend=b, randomization={}) for b in ("torch", "c")]
    obs = []
    for task in tasks:
        task.seed(0)
        task.reset()
        for _ in range(20):
            out = task.step(torch.full((8, 4), 0.1))
        obs.append(out.obs)
    assert tasks[1].sim.step_backend == "c"
    np.testing.assert_allclose(obs[1].numpy(), obs[0].numpy(), atol=1e-4)


def test_bad_inputs_raise_before_stepping():
    sim = BatchedQuadrotorSim(ParamsBatch.from_params(preset("crazyflie"), 2), step_backend="c")
    s0 = sim.state
    with pytest.raises(ValueError, match=r"action has shape \(2, 3\), expected \(2, 4\)"):
        sim.step(torch.zeros(2, 3))
    bad = torch.zeros(2, 4)
    bad[1, 2] = float("inf")
    with pytest.raises(ValueError, match=r"NaN or inf.*environments \[1\]"):
        sim.step(bad)
    assert sim.state is s0 and sim.time.eq(0).all()
    sim.external_force = torch.zeros(3)
    with pytest.raises(ValueError, match=r"external_force has shape \(3,\), expected \(2, 3\)"):
        sim.step(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="float32 and float64"):
        CStep(torch.float16)
    with pytest.raises(ValueError, match="params have batch size 2, state has 3"):
        CStep(torch.float32)(torch.zeros(3, 17), torch.zeros(3, 4), sim.params)


def test_c_backend_is_cpu_only():
    p = ParamsBatch.from_params(preset("crazyflie"), 3)
    with pytest.raises(ValueError, match="step_backend='c' runs on CPU tensors, params are on meta"):
        BatchedQuadrotorSim(p, step_backend="c", device="meta")
    with pytest.raises(ValueError, match="unknown step_backend 'cuda'"):
        BatchedQuadrotorSim(p, step_backend="cuda")
    sim = BatchedQuadrotorSim(p, step_backend="c")
    with pytest.raises(ValueError, match="the C step runs on CPU tensors, action is on meta"):
        sim.step(torch.zeros(3, 4, device="meta"), validate=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_backend_steps_on_the_params_device():
    p = sample_params(RandomizationConfig(), 64, seed=0)
    cpu, gpu = BatchedQuadrotorSim(p), BatchedQuadrotorSim(p, device="cuda")
    assert gpu.state.device.type == gpu.time.device.type == gpu.params.mass.device.type == "cuda"
    a = torch.rand(64, 4, generator=torch.Generator().manual_seed(0)) * 2 - 1
    for _ in range(10):
        cpu.step(a)
        gpu.step(a.cuda())
    np.testing.assert_allclose(gpu.state.cpu().numpy(), cpu.state.numpy(), atol=1e-4)


def test_missing_compiler_warns_and_steps_with_torch(monkeypatch):
    monkeypatch.setattr(c_step, "_functions", {})
    monkeypatch.setenv("CC", "no-such-compiler-robo")
    with pytest.warns(RuntimeWarning, match="no C compiler found .*'no-such-compiler-robo'.*step_backend='torch'"):
        sim = BatchedQuadrotorSim(ParamsBatch.from_params(preset("crazyflie"), 1), step_backend="c")
    assert sim.step_backend == "torch"
    sim.step(torch.zeros(1, 4))
    with pytest.raises(CompilerNotFound):
        c_step.c_function(torch.float32)


def test_compile_cache_is_keyed_by_source_and_defines(tmp_path, monkeypatch):
    monkeypatch.setenv("ROBO_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "k.c"
    src.write_text("int robo_k(void) { return K; }\n")
    flags = ("-O0",)
    a = shared_library(src, {"K": "1"}, flags)
    assert a.parent == tmp_path / "cache" / "c" and a.exists()
    mtime = a.stat().st_mtime_ns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert shared_library(src, {"K": "1"}, flags) == a and a.stat().st_mtime_ns == mtime  # not rebuilt
    b = shared_library(src, {"K": "2"}, flags)
    src.write_text("int robo_k(void) { return K + 1; }\n")
    c = shared_library(src, {"K": "1"}, flags)
    assert len({a, b, c}) == 3
    src.write_text("int robo_k(void) { return undefined_name; }\n")
    with pytest.raises(RuntimeError, match="compiling k.c failed"):
        shared_library(src, {}, flags)


def test_gymnasium_envs_take_the_step_backend():
    from sims.envs.quadrotor_env import QuadrotorEnv, QuadrotorVectorEnv

    env = QuadrotorEnv(step_backend="c")
    env.reset(seed=0)
    obs, *_ = env.step(np.zeros(4, dtype=np.float32))
    venv = QuadrotorVectorEnv(4, step_backend="c")
    venv.reset(seed=0)
    vobs, *_ = venv.step(np.zeros((4, 4), dtype=np.float32))
    assert env.core.sim.step_backend == venv.core.sim.step_backend == "c"
    assert env.core.sim.state.dtype == torch.float64 and obs.shape == (22,) and vobs.shape == (4, 22)
