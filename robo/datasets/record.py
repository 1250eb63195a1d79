"""Record demonstrations as LeRobot datasets: the push-T expert, or a quadrotor policy tracking.

    record_pusht("data/pusht", episodes=200, obs="state")            # or obs="image" [video=True: mp4, not PNG]
    record_quadrotor("data/quad", task="figure_eight", episodes=64)  # RAPTOR by default

Both write atomically (see ``DatasetWriter``) and return a summary dict.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from .writer import DatasetWriter

PUSHT_STATE_NAMES = ["agent_x", "agent_y", "block_x", "block_y", "block_yaw"]
PUSHT_TASK = "Push the T-shaped block onto the green target T."
QUAD_OBS_NAMES = (["pos_err_x", "pos_err_y", "pos_err_z"] + [f"rot_{i}{j}" for i in range(3) for j in range(3)]
                  + ["vel_err_x", "vel_err_y", "vel_err_z", "omega_x", "omega_y", "omega_z"]
                  + ["prev_motor_fr", "prev_motor_br", "prev_motor_bl", "prev_motor_fl"])
QUAD_ACTION_NAMES = ["motor_fr", "motor_br", "motor_bl", "motor_fl"]


def _vec(dim: int, names: list[str] | None = None) -> dict:
    return {"dtype": "float32", "shape": [dim], "names": names}


def pusht_features(obs: str, image_size: int = 96, video: bool = False) -> dict:
    """Dataset features of push-T demos: state (5,), or agent position (2,) + top-view image (PNG frames, or an
    mp4 video with ``video``: lossy, as LeRobot records cameras)."""
    action = _vec(2, ["target_x", "target_y"])
    if video and obs != "image":
        raise ValueError(f"video=true stores the top-view image as mp4; use it with obs=image, not obs={obs!r}")
    if obs == "state":
        return {"observation.state": _vec(5, PUSHT_STATE_NAMES), "action": action}
    if obs == "image":
        return {"observation.state": _vec(2, PUSHT_STATE_NAMES[:2]),
                "observation.environment_state": _vec(5, PUSHT_STATE_NAMES),
                "observation.image": {"dtype": "video" if video else "image", "shape": [image_size, image_size, 3],
                                      "names": ["height", "width", "channels"]},
                "action": action}
    raise ValueError(f"obs={obs!r}; choose 'state' or 'image'")


def add_episode(writer: DatasetWriter, ep: dict, task: str, obs: str = "state") -> None:
    """One episode {"obs" (T, D), "action" (T, A), "reward" (T,)[, "image" (T, 3, H, W), "state" (T, S)]} ->
    ``writer``, saved under the language ``task``; with ``obs="image"`` the image and the full state go along."""
    for t in range(len(ep["action"])):
        frame = {"observation.state": ep["obs"][t], "action": ep["action"][t],
                 "next.reward": ep["reward"][t], "next.done": t == len(ep["action"]) - 1}
        if obs == "image":
            frame["observation.image"] = ep["image"][t].transpose(1, 2, 0)
            frame["observation.environment_state"] = ep["state"][t]
        writer.add_frame(frame)
    writer.save_episode(task)


def record_pusht(out: str | Path, episodes: int, obs: str = "state", seed: int = 0, keep_failures: bool = False,
                 overwrite: bool = False, progress: bool = True, expert: dict | None = None,
                 env: dict | None = None, video: bool = False, sim: str = "pusht") -> dict:
    """Run the scripted expert for ``episodes`` kept episodes and write them to ``out``. ``sim``: ``"pusht"``,
    robo's MuJoCo push-T (``env``: ``PushTConfig`` overrides); ``"pusht_matched"``, the same matched to
    gym-pusht (the adapted expert); ``"gym_pusht"``, gym-pusht itself (the adapted expert, its 10 Hz control,
    its 96 px image and its success: coverage > 0.95)."""
    from sims.pusht import PushTConfig

    if sim == "gym_pusht":
        from sims.pusht.gym_pusht_demos import iter_demos

        demos = iter_demos(episodes, seed, obs, keep_failures, expert=expert)
        fps, image_size, succeeded = 10.0, 96, lambda coverage: coverage > 0.95
    elif sim in ("pusht", "pusht_matched"):
        if sim == "pusht":
            from sims.pusht.demos import iter_demos
        else:
            from sims.pusht.matched import GYM_PUSHT_MATCHED, iter_demos

            env = {**GYM_PUSHT_MATCHED, **(env or {})}
        cfg = PushTConfig.from_dict(env)
        demos = iter_demos(episodes, seed, obs, keep_failures, expert=expert, env=env)
        fps, image_size, succeeded = cfg.control_hz, cfg.image_size, lambda coverage: coverage >= cfg.success_threshold
    else:
        raise ValueError(f"sim={sim!r}; choose 'pusht', 'pusht_matched' or 'gym_pusht'")
    features = pusht_features(obs, image_size, video)
    t0 = time.time()
    last_attempt, frames, successes = -1, 0, 0
    with DatasetWriter(out, fps, features, robot_type="pusht_disc", overwrite=overwrite) as w:
        bar = tqdm(total=episodes, desc="record pusht", disable=not progress, leave=False)
        for ep, attempt in demos:
            add_episode(w, ep, PUSHT_TASK, obs)
            frames += len(ep["action"])
            successes += bool(succeeded(ep["coverage"][-1]))
            last_attempt = attempt
            bar.update(1)
        bar.close()
    return {"dataset": str(out), "episodes": episodes, "frames": frames, "attempts": last_attempt + 1,
            "expert_success_rate": successes / (last_attempt + 1) if not keep_failures else successes / episodes,
            "mean_episode_length": frames / episodes, "seconds": time.time() - t0}


def record_pusht_rollouts(out: str | Path, policy_path: str | Path, starts: int, seed: int = 0, attempts: int = 1,
                          keep_failures: bool = False, overwrite: bool = False, env: dict | None = None) -> dict:
    """A push-T policy's own episodes (state observations) -> a LeRobot dataset at ``out``: each of ``starts``
    starts (reset seeds ``seed``..) is played up to ``attempts`` times and its first success kept
    (``robo.imitation.evaluate.collect_successes``), the data of self-imitation: train on the demos plus these
    with ``robo train ... extra_dataset=<out> init_from=<policy>``. Actions are the pusher targets executed."""
    from policies.registry import load_policy
    from robo.imitation.evaluate import collect_successes
    from sims.pusht import PushTConfig

    policy = load_policy(policy_path)
    t0 = time.time()
    env_kwargs = {"obs_type": "state", "render_mode": None, "config": env}
    episodes, stats = collect_successes(policy, "robo/PushT-v0", starts, seed, attempts, env_kwargs=env_kwargs,
                                        keep_failures=keep_failures)
    if not episodes:
        raise RuntimeError(f"the policy {policy_path} succeeded from none of {starts} starts in {attempts} attempts")
    with DatasetWriter(out, PushTConfig.from_dict(env).control_hz, pusht_features("state"),
                       robot_type="pusht_disc", overwrite=overwrite) as w:
        for ep in episodes:
            add_episode(w, ep, PUSHT_TASK)
    frames = sum(len(ep["action"]) for ep in episodes)
    return {"dataset": str(out), "episodes": len(episodes), "frames": frames, **stats,
            "mean_episode_length": frames / len(episodes), "seconds": time.time() - t0}


@torch.no_grad()
def fly_policy(policy, task, seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fly ``policy`` in a batched quadrotor ``task`` from a reset, without auto-reset.

    returns obs (T, B, obs_dim), actions (T, B, 4), rewards (T, B) float32 and
    lengths (B,): the steps before each env terminated (T if it never did).
    """
    steps = int(round(seconds / task.dt))
    obs = task.reset()
    policy.reset()
    B = task.num_envs
    alive = torch.ones(B, dtype=torch.bool)
    lengths = np.full(B, steps)
    all_obs, all_act, all_rew = [], [], []
    for k in range(steps):
        action = torch.as_tensor(policy.act(obs), dtype=torch.float32)
        result = task.step(action)
        all_obs.append(obs.clone())
        all_act.append(action.clone())
        all_rew.append(result.reward.clone())
        newly = result.terminated & alive
        lengths[newly.numpy()] = k + 1
        alive &= ~result.terminated
        obs = result.obs
    return (torch.stack(all_obs).numpy(), torch.stack(all_act).numpy(), torch.stack(all_rew).numpy(),
            lengths)


def record_quadrotor(out: str | Path, task: str | dict = "figure_eight", robot: str | dict = "crazyflie",
                     episodes: int = 64, seconds: float | None = None, seed: int = 0, policy: dict | None = None,
                     keep_failures: bool = False, overwrite: bool = False, progress: bool = True,
                     sim: dict | None = None) -> dict:
    """Fly ``policy`` (default RAPTOR) on ``episodes`` quadrotors at once and record them.

    Observations (22,), actions (4,) normalized motor commands; fps = 1 / sim dt. Episodes that
    terminate (crash, leave the bounds) are dropped unless ``keep_failures`` (then cut there).
    """
    from robo.factory import make_policy, make_task

    t0 = time.time()
    torch.manual_seed(seed)
    task = {"name": task} if isinstance(task, str) else dict(task)
    robot = {"preset": robot} if isinstance(robot, str) else dict(robot)
    env_task = make_task(task, robot, sim or {"backend": "batched"}, episodes, seed=seed)
    name = task["name"]
    seconds = float(seconds or env_task.config.episode_seconds)
    pol = make_policy(policy or {"kind": "raptor", "path": None})
    obs, act, rew, lengths = fly_policy(pol, env_task, seconds)
    steps = obs.shape[0]
    features = {"observation.state": _vec(obs.shape[-1], QUAD_OBS_NAMES if obs.shape[-1] == 22 else None),
                "action": _vec(4, QUAD_ACTION_NAMES)}
    kept = [b for b in range(episodes) if keep_failures or lengths[b] == steps]
    if not kept:
        raise RuntimeError(f"all {episodes} flights terminated early; nothing to record "
                           "(keep_failures=True keeps them)")
    with DatasetWriter(out, 1.0 / env_task.dt, features, robot_type=str(robot["preset"]), overwrite=overwrite) as w:
        for b in tqdm(kept, desc=f"record {name}", disable=not progress, leave=False):
            for t in range(lengths[b]):
                w.add_frame({"observation.state": obs[t, b], "action": act[t, b], "next.reward": rew[t, b],
                             "next.done": t == lengths[b] - 1})
            w.save_episode(f"quadrotor {name}")
    return {"dataset": str(out), "episodes": len(kept), "flown": episodes, "frames": int(lengths[kept].sum()),
            "success_rate": float(np.mean(lengths == steps)), "seconds": time.time() - t0}
