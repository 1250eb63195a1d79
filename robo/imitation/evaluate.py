"""Roll out a chunked policy in gymnasium envs (success rate, mean max reward, a video) or in the
batched quadrotor sim (tracking error, crashes).

Devices: the policy flies where its weights are, or on the ``device`` an evaluator is given (``flying_on``: moved
there for the evaluation and back afterwards). The gym envs (MuJoCo, gym-pusht, Meta-World) stay on the CPU: each
step the batch of all envs' observations (and the policy's noise) crosses to the policy's device in one copy and
the actions come back in one. The batched quadrotor task of ``evaluate_flights`` is built on the policy's device.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from policies.base import Policy, weights_device
from policies.chunked import ChunkedPolicy, QueuedActing, draw_noise
from robo.device import indexed, move_policy, resolve_device
from robo.evaluate import flight_metrics, rollout
from robo.factory import make_task

EnvFactory = Callable[..., gym.Env]
log = logging.getLogger(__name__)


def acting_device(policy, device: str | torch.device | None = None) -> torch.device:
    """The device ``policy`` flies on: where its weights are (``device`` None), or ``device`` resolved
    (``robo.device.resolve_device``: auto | cpu | cuda | cuda:N) for a policy that acts there on host
    observations: robo's chunk policies (diffusion, energy, implicit BC) do. Any other policy asked onto another
    device than its own (a steered policy, a scripted teacher) stays where it is, with a warning."""
    home = indexed(weights_device(policy))
    if device is None:
        return home
    target = indexed(resolve_device(device))
    if target != home and not isinstance(policy, QueuedActing):
        log.warning("device=%s: %s does not act on %s from host observations; flying on %s", device,
                    type(policy).__name__, target, home)
        return home
    return target


@contextmanager
def flying_on(policy, device: str | torch.device | None = None) -> Iterator[torch.device]:
    """Hold ``policy``'s weights on ``acting_device(policy, device)`` for the ``with`` block, then put them back
    where they were; yields that device."""
    home, target = indexed(weights_device(policy)), acting_device(policy, device)
    moved = target != home
    if moved:
        move_policy(policy, target)
    try:
        yield target
    finally:
        if moved:
            move_policy(policy, home)


def _factory(env: str | EnvFactory, env_kwargs: dict | None) -> EnvFactory:
    if isinstance(env, str):
        import sims  # noqa: F401  (registers the robo/ envs)

        return lambda **kw: gym.make(env, **{**(env_kwargs or {}), **kw})
    return env


def policy_observation(obs):
    """An env observation -> what the chunked policies take. Pixel observations
    ``{"agent_pos": (2,), "pixels": (H, W, 3) uint8}`` (push-T's ``pixels_agent_pos``) become
    ``{"state": (2,), "image": (3, H, W) float32 in [0, 1]}``; anything else passes through."""
    if isinstance(obs, dict) and "pixels" in obs:
        image = np.ascontiguousarray(obs["pixels"].transpose(2, 0, 1)) / 255.0
        return {"state": obs["agent_pos"], "image": image}
    return obs


def _stack(obs_list: list) -> np.ndarray | dict[str, np.ndarray]:
    if isinstance(obs_list[0], dict):
        return {k: np.stack([o[k] for o in obs_list]).astype(np.float32) for k in obs_list[0]}
    return np.stack(obs_list).astype(np.float32)


def _play_batch(policy: ChunkedPolicy, make: EnvFactory, reset_seeds: list[int], noise_seeds: list[int],
                obs_fn: Callable, max_steps: int | None, frames: list | None = None, record: bool = False) -> dict:
    """Play one episode in each of ``len(reset_seeds)`` envs from ``make`` at once (env i reset with
    ``reset_seeds[i]``, the policy's noise drawn from a generator seeded with ``noise_seeds[i]``) until all end or
    ``max_steps`` (default: the env's limit) pass. Returns per-episode arrays success, best (max reward), ret, length,
    and with ``record`` the episodes {"obs" (T, obs_dim), "action" (T, action_dim) as executed, "reward" (T,)};
    renders env 0 into ``frames`` when given."""
    n = len(reset_seeds)
    envs = [make(render_mode="rgb_array") if frames is not None and i == 0 else make() for i in range(n)]
    try:
        return _play(policy, envs, reset_seeds, noise_seeds, obs_fn,
                     max_steps or (envs[0].spec.max_episode_steps if envs[0].spec else None), frames, record)
    finally:
        for e in envs:
            e.close()


def _play(policy, envs, reset_seeds, noise_seeds, obs_fn, limit, frames, record) -> dict:
    """``_play_batch``'s stepping loop on open ``envs``, ``limit`` steps at most (None: until all end)."""
    n = len(envs)
    obs = [obs_fn(e.reset(seed=s)[0]) for e, s in zip(envs, reset_seeds)]
    done, success = np.zeros(n, bool), np.zeros(n, bool)
    best, ret, length = np.full(n, -np.inf), np.zeros(n), np.zeros(n, int)
    rows = [{"obs": [], "action": [], "reward": []} for _ in range(n)]
    gens = [torch.Generator().manual_seed(int(s)) for s in noise_seeds]
    policy.reset()
    step = 0
    while not done.all() and (limit is None or step < limit):
        if frames is not None and not done[0]:
            frames.append(envs[0].render())
        noise = torch.cat([draw_noise(policy, 1, g) for g in gens])
        actions = np.asarray(policy.act(_stack(obs), noise=noise))
        for i in np.nonzero(~done)[0]:
            if record:
                rows[i]["obs"].append(obs[i])
                rows[i]["action"].append(actions[i])
            o, r, term, trunc, info = envs[i].step(actions[i])
            obs[i] = obs_fn(o)
            best[i], ret[i], length[i] = max(best[i], r), ret[i] + r, length[i] + 1
            if record:
                rows[i]["reward"].append(r)
            if term or trunc:
                done[i], success[i] = True, bool(info.get("is_success", False))
        step += 1
    out = {"success": success, "best": best, "ret": ret, "length": length}
    if record:
        out["episodes"] = [{k: np.asarray(v, np.float32) for k, v in row.items()} for row in rows]
    return out


def evaluate_chunked_policy(policy: ChunkedPolicy, env: str | EnvFactory, episodes: int = 100, seed: int = 0,
                            num_envs: int = 50, max_steps: int | None = None, video_path: str | Path | None = None,
                            env_kwargs: dict | None = None, obs_fn: Callable | None = None,
                            device: str | torch.device | None = None) -> dict[str, float]:
    """Run ``episodes`` episodes (``num_envs`` at a time, batched through the policy) and score them.

    ``env``: a registered gymnasium id or a factory ``f(render_mode=None) -> env``. Episode i is
    reset with seed ``seed + i``. Success is
    ``info["is_success"]`` at the last step. The policy's initial noise for episode i comes from a
    generator seeded with ``seed + i``, so results do not depend on ``num_envs`` and the global RNG
    is left alone. ``obs_fn`` maps an env observation to the policy's (default
    ``policy_observation``: pixel dicts become ``{"state", "image"}``). Returns success_rate,
    mean_max_reward, mean_return, mean_length, episodes; writes ``video_path`` (mp4 of episode 0)
    when given. ``device``: where the policy flies (``flying_on``; None: where its weights are); the envs run on
    the CPU.
    """
    make = _factory(env, env_kwargs)
    obs_fn = obs_fn or policy_observation
    results, frames = [], [] if video_path else None
    with flying_on(policy, device):
        for first in range(0, episodes, num_envs):
            seeds = list(range(seed + first, seed + min(first + num_envs, episodes)))
            results.append(_play_batch(policy, make, seeds, seeds, obs_fn, max_steps,
                                       frames if first == 0 else None))
    if frames:
        write_video(video_path, frames)
    cat = {k: np.concatenate([r[k] for r in results]) for k in ("success", "best", "ret", "length")}
    return {"success_rate": float(np.mean(cat["success"])), "mean_max_reward": float(np.mean(cat["best"])),
            "mean_return": float(np.mean(cat["ret"])), "mean_length": float(np.mean(cat["length"])),
            "episodes": episodes}


def evaluate_per_task(policy: ChunkedPolicy, env: str, tasks: list[str], episodes: int = 50, seed: int = 0,
                      num_envs: int = 50, max_steps: int | None = None, video_path: str | Path | None = None,
                      env_kwargs: dict | None = None, task_key: str = "task",
                      device: str | torch.device | None = None) -> dict:
    """``evaluate_chunked_policy`` on a multi-task env once per task: ``env_kwargs[task_key]`` = each of ``tasks``
    in turn (``sims.metaworld.multitask``'s ``task``), ``episodes`` episodes each on the same seeds ``seed``..;
    task t's video of episode 0 goes to ``<video_path stem>_<t><suffix>`` when ``video_path`` is given. Returns
    the means over tasks of success_rate, mean_max_reward, mean_return and mean_length, ``episodes`` (in all),
    and ``success_rate/<t>`` for each task. ``device``: as ``evaluate_chunked_policy``'s (moved once for all
    tasks)."""
    if not tasks:
        raise ValueError("evaluate_per_task needs at least one task (task.eval.tasks)")
    per_task = {}
    with flying_on(policy, device):
        for t in tasks:
            video = Path(video_path).with_name(f"{Path(video_path).stem}_{t}{Path(video_path).suffix}") \
                if video_path else None
            per_task[t] = evaluate_chunked_policy(policy, env, episodes, seed=seed, num_envs=num_envs,
                                                  max_steps=max_steps, video_path=video,
                                                  env_kwargs={**(env_kwargs or {}), task_key: t})
    means = {k: float(np.mean([m[k] for m in per_task.values()]))
             for k in ("success_rate", "mean_max_reward", "mean_return", "mean_length")}
    return {**means, "episodes": episodes * len(tasks),
            **{f"success_rate/{t}": m["success_rate"] for t, m in per_task.items()}}


def _attempt_seed(start_seed: int, attempt: int) -> int:
    return start_seed if attempt == 0 else int(np.random.SeedSequence([start_seed, attempt]).generate_state(1)[0])


def collect_successes(policy: ChunkedPolicy, env: str | EnvFactory, starts: int, seed: int = 0, attempts: int = 1,
                      num_envs: int = 50, max_steps: int | None = None, env_kwargs: dict | None = None,
                      keep_failures: bool = False, device: str | torch.device | None = None
                      ) -> tuple[list[dict], dict]:
    """The policy's own successful episodes, for self-imitation (filtered behaviour cloning): each of ``starts``
    starts (reset seeds ``seed``, ``seed + 1``, ...) is played up to ``attempts`` times, each time with fresh
    noise (attempt 0 of start s draws it as ``evaluate_chunked_policy`` does for the episode reset with s, from a
    generator seeded with s, so it is that evaluation's episode; attempt a > 0 from ``SeedSequence([s, a])``), and
    its first success is kept; ``keep_failures`` keeps each start's first attempt instead. State observations only.
    Returns (episodes [{"obs" (T, obs_dim), "action" (T, action_dim), "reward" (T,)}] in start order,
    {"starts", "kept", "successes_per_attempt": [(tried, succeeded), ...]}). ``device``: as
    ``evaluate_chunked_policy``'s."""
    if starts < 1 or attempts < 1:
        raise ValueError(f"starts and attempts must be >= 1, got {starts} and {attempts}")
    with flying_on(policy, device):
        return _collect(policy, _factory(env, env_kwargs), starts, seed, attempts, num_envs, max_steps,
                        keep_failures)


def _collect(policy, make: EnvFactory, starts: int, seed: int, attempts: int, num_envs: int, max_steps: int | None,
             keep_failures: bool) -> tuple[list[dict], dict]:
    """``collect_successes``' attempts, the policy where it flies."""
    kept: dict[int, dict] = {}
    pending, per_attempt = list(range(seed, seed + starts)), []
    for a in range(attempts if not keep_failures else 1):
        succeeded = 0
        for first in range(0, len(pending), num_envs):
            batch = pending[first:first + num_envs]
            out = _play_batch(policy, make, batch, [_attempt_seed(s, a) for s in batch], lambda o: o, max_steps,
                              record=True)
            if isinstance(out["episodes"][0]["obs"], dict):
                raise ValueError("collect_successes records state observations only; this env returns dicts")
            for s, ok, ep in zip(batch, out["success"], out["episodes"]):
                if ok or keep_failures:
                    kept[s] = ep
                succeeded += int(ok)
        per_attempt.append((len(pending), succeeded))
        pending = [s for s in pending if s not in kept]
    return [kept[s] for s in sorted(kept)], {"starts": starts, "kept": len(kept), "successes_per_attempt": per_attempt}


class _SeededNoise:
    """A chunked policy whose initial noise comes from ``generator`` (the Policy protocol's act(obs))."""

    def __init__(self, policy: ChunkedPolicy, generator: torch.Generator):
        self.policy, self.generator = policy, generator

    def reset(self, mask=None) -> None:
        self.policy.reset()

    def act(self, obs):
        return self.policy.act(obs, noise=draw_noise(self.policy, len(obs), self.generator))


def evaluate_flights(policy: ChunkedPolicy | Policy, flight_task: dict, robot: dict, episodes: int = 64, seed: int = 0,
                     success_rmse: float = 0.25, device: str | torch.device | None = None) -> dict[str, float]:
    """Fly ``policy`` (a chunked policy, or any robo policy such as the demos' teacher) on ``episodes``
    quadrotors of the batched task ``flight_task`` (a task config node, e.g. figure_eight) with ``robot`` for
    the task's episode length; starts and the policy's noise are seeded by ``seed``. Returns
    ``robo.evaluate.flight_metrics`` (errors in m) with ``success_rate`` replaced by the tracking success:
    the fraction of flights that do not crash and whose RMSE over the second half of the flight is below
    ``success_rmse`` m (``hover_success_rate`` keeps the final error < 10 cm one), plus ``crash_rate``
    and ``episodes``. ``device``: where the policy flies (``flying_on``; None: where its weights are); the task
    is built there too, so the flight stays on it (the noise is drawn on the CPU and copied over)."""
    if not (np.isfinite(success_rmse) and success_rmse > 0):
        raise ValueError(f"success_rmse must be a positive number of metres, got {success_rmse}")
    pilot = _SeededNoise(policy, torch.Generator().manual_seed(seed)) if hasattr(policy, "noise_shape") else policy
    with flying_on(policy, device) as on:
        task = make_task(flight_task, robot, {"backend": "batched"}, episodes, seed=seed, device=on)
        flights = rollout(pilot, task, task.config.episode_seconds)
    metrics = flight_metrics(flights)
    return {**metrics, "hover_success_rate": metrics["success_rate"],
            "success_rate": float((flights.flight_rmse() < success_rmse).mean()),
            "crash_rate": metrics["crashes"] / episodes, "episodes": episodes}


def write_video(path: str | Path, frames: list[np.ndarray], fps: float = 10.0) -> Path:
    """frames: list of (H, W, 3) uint8 RGB -> mp4 (written beside, then renamed into place)."""
    import cv2

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    for f in frames:
        writer.write(cv2.cvtColor(np.ascontiguousarray(f), cv2.COLOR_RGB2BGR))
    writer.release()
    tmp.replace(path)
    return path
