"""Offline evaluation in the calibrated twin: score many policies at once in one batched simulator
with the twin's estimated parameters (Real-is-Sim's parallel checkpoint scoring)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from policies.base import Policy
from sims.envs import make_robot
from sims.envs.observation import observe
from sims.quadrotor import BatchedQuadrotorSim, ParamsBatch, QuadrotorParams, hover_state


def hover_scores(errors: np.ndarray, success_radius: float = 0.1) -> dict[str, np.ndarray]:
    """errors (T, N) distance to the hover point, m -> per-flight ``mean_error`` (N,) m over the
    flight, ``final_error`` (N,) m (mean of the last 10 %) and ``success`` (N,) (final < radius)."""
    e = np.asarray(errors, dtype=np.float64)
    if e.ndim != 2 or len(e) < 1:
        raise ValueError(f"errors has shape {e.shape}, expected (T >= 1, N)")
    final = e[-max(1, len(e) // 10):].mean(0)
    return {"mean_error": e.mean(0), "final_error": final, "success": (final < success_radius).astype(float)}


@torch.no_grad()
def evaluate_in_twin(policies: Sequence[Policy], robot: QuadrotorParams | str | dict, start: Sequence[float],
                     hover: Sequence[float] = (0.0, 0.0, 1.0), steps: int = 500, envs_per_policy: int = 1,
                     start_jitter: float = 0.0, seed: int = 0) -> np.ndarray:
    """Fly every policy from ``start`` (world FLU m, at rest) for ``steps`` ticks in one batched sim
    with parameters ``robot`` (e.g. ``twin.calibrated_params()``). Returns errors (T, P, E): distance
    to ``hover`` per tick, policy and env (``start_jitter``: m, uniform start spread per env, the same
    ``envs_per_policy`` starts for every policy)."""
    if not policies:
        raise ValueError("no policies to evaluate")
    P, E = len(policies), int(envs_per_policy)
    params = ParamsBatch.from_params(make_robot(robot), P * E, dtype=torch.float64)
    sim = BatchedQuadrotorSim(params)
    rng = np.random.default_rng(seed)  # the same E starts for every policy
    p0 = np.asarray(start, dtype=np.float64)[None] + np.tile(rng.uniform(-start_jitter, start_jitter, (E, 3)), (P, 1))
    sim.reset(hover_state(params, torch.as_tensor(p0)))
    ref = torch.as_tensor(np.asarray(hover, dtype=np.float64)).expand(P * E, 3)
    prev = torch.full((P * E, 4), float(make_robot(robot).hover_action), dtype=torch.float64)
    zero = torch.zeros(P * E, 3, dtype=torch.float64)
    for pol in policies:
        pol.reset()
    errors = []
    for _ in range(steps):
        obs = observe(sim.state, ref, zero, prev).float()
        acts = [torch.as_tensor(pol.act(obs[i * E:(i + 1) * E])) for i, pol in enumerate(policies)]
        prev = torch.cat(acts).double().clamp(-1, 1)
        sim.step(prev)
        errors.append((sim.state[:, :3] - ref).norm(dim=-1).numpy().reshape(P, E))
    return np.stack(errors)
