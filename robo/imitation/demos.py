"""Demonstrations recorded on demand from scripted experts and teacher policies (nothing is downloaded)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from .data import Episode


def pusht_demos(num_episodes: int, seed: int = 0, successful_only: bool = True,
                max_attempts_factor: int = 3, noise_std: float | None = None,
                dart_std: float = 0.0) -> list[Episode]:
    """Push-T state demos from ``sims.pusht.expert.PushTExpert``: [{"obs": (T, 5), "action": (T, 2),
    "reward": (T,)}]. Attempt k is reset with seed ``seed * 1_000_003 + k``; failures are skipped
    when ``successful_only`` (up to ``max_attempts_factor * num_episodes`` attempts).
    ``noise_std`` (m) overrides the expert's Gaussian action noise; the noisy actions are both
    executed and recorded, so a larger value gives noisy demos (a weak base for steering).
    ``dart_std`` (m) > 0 adds N(0, dart_std^2) to the executed pusher target only and keeps the
    expert's action as the label (DART, as ``quadrotor_demos`` does): the demos then show the expert
    recovering from the drift a learner makes."""
    import sims  # noqa: F401  (registers robo/PushT-v0)
    from sims.pusht.expert import ExpertConfig, PushTExpert

    if noise_std is not None and not (np.isfinite(noise_std) and noise_std >= 0):
        raise ValueError(f"noise_std must be a finite number >= 0 (m), got {noise_std}")
    if not (np.isfinite(dart_std) and dart_std >= 0):
        raise ValueError(f"dart_std must be a finite number >= 0 (m), got {dart_std}")
    env = gym.make("robo/PushT-v0", obs_type="state", render_mode=None)
    config = ExpertConfig() if noise_std is None else ExpertConfig(noise_std=float(noise_std))
    expert = PushTExpert(config, seed=seed)
    dart = np.random.default_rng([seed, 1])
    half = env.unwrapped.cfg.half_size
    episodes: list[Episode] = []
    for k in range(max_attempts_factor * num_episodes):
        if len(episodes) == num_episodes:
            break
        obs, _ = env.reset(seed=seed * 1_000_003 + k)
        expert.reset()
        rows: dict[str, list] = {"obs": [], "action": [], "reward": []}
        done, info = False, {}
        while not done:
            action = expert.act(obs)
            rows["obs"].append(obs)
            rows["action"].append(action)
            if dart_std > 0:
                action = np.clip(action + dart.normal(0.0, dart_std, 2), -half, half).astype(np.float32)
            obs, reward, term, trunc, info = env.step(action)
            rows["reward"].append(reward)
            done = term or trunc
        if info.get("is_success", False) or not successful_only:
            episodes.append({key: np.asarray(v, np.float32) for key, v in rows.items()})
    env.close()
    if len(episodes) < num_episodes:
        raise RuntimeError(f"the push-T expert succeeded in only {len(episodes)} of "
                           f"{max_attempts_factor * num_episodes} attempts; {num_episodes} demos were asked for")
    return episodes


class _NoisyExecution:
    """Executes ``teacher``'s action plus N(0, std^2) noise and keeps the clean actions, clipped to [-1, 1], as
    labels: DART (Laskey et al. 2017), so the demos visit the states a learner drifts into and show how the teacher
    recovers from them. The executed action goes to the task as it is: the task's step clips the command it applies,
    and under ``raw_motor_state`` the observation reports the action as given, as L2F reports a policy's output.
    The labels are clipped because they are the commands applied (an unclipped RAPTOR's 1.6 flies as 1.0) and the
    students act in [-1, 1]."""

    def __init__(self, teacher, std: float, seed: int):
        self.teacher, self.std = teacher, float(std)
        self.gen = torch.Generator().manual_seed(seed)
        self.labels: list[torch.Tensor] = []

    def reset(self, mask=None) -> None:
        self.teacher.reset(mask)

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        clean = torch.as_tensor(self.teacher.act(obs), dtype=torch.float32)
        self.labels.append(clean.clamp(-1.0, 1.0))
        return clean + self.std * torch.randn(clean.shape, generator=self.gen)


@torch.no_grad()
def quadrotor_demos(teacher, num_episodes: int, task: dict | str = "hover", robot: dict | str = "crazyflie",
                    action_noise: float = 0.0, seed: int = 0, seconds: float | None = None) -> list[Episode]:
    """Fly ``teacher`` (any robo policy on the 22-float observation) on ``num_episodes`` quadrotors at
    once in the batched sim: [{"obs": (T, 22), "action": (T, 4) the teacher's clean normalized motor
    commands, "reward": (T,)}]. With ``action_noise`` > 0 the executed actions carry that much
    Gaussian noise (DART). Flights that terminate early are dropped.

    The teacher flies with its own previous-action convention where ``task`` says ``previous_action: auto``
    (``robo.evaluate.previous_action_for``: L2F's ``raw_motor_state`` for RAPTOR), and the demos record what the
    task reports to robo's own policies, the students' convention (``clipped_hover`` under ``auto``;
    ``robo.evaluate.clipped_hover_observations``), which is what the students are flown with."""
    from robo.datasets.record import fly_policy
    from robo.evaluate import clipped_hover_observations, previous_action_for
    from robo.factory import make_task

    if action_noise < 0:
        raise ValueError(f"action_noise must be >= 0, got {action_noise}")
    task = {"name": task} if isinstance(task, str) else dict(task)
    robot = {"preset": robot} if isinstance(robot, str) else dict(robot)
    env_task = make_task(task, robot, {"backend": "batched"}, num_episodes, seed=seed)
    pilot = _NoisyExecution(teacher, action_noise, seed)
    recorded = env_task.previous_action_mode  # the students': what the task reports to robo's own policies
    with previous_action_for(teacher, env_task) as flown:
        obs, _, rew, lengths = fly_policy(pilot, env_task, float(seconds or env_task.config.episode_seconds))
    if flown != recorded:  # auto: a RAPTOR-compatible teacher flew raw_motor_state, the students fly clipped_hover
        hover = (2 * env_task.sim.params.hover_command() - 1).cpu().numpy()
        obs = clipped_hover_observations(obs, hover, env_task.config.action_history)
    act = torch.stack(pilot.labels).numpy()
    return [{"obs": obs[:, b], "action": act[:, b], "reward": rew[:, b]}
            for b in range(num_episodes) if lengths[b] == len(obs)]


def teacher_flights(num_episodes: int, seed: int = 0, teacher: str = "raptor", task: dict | str = "figure_eight",
                    robot: dict | str = "crazyflie", action_noise: float = 0.1,
                    seconds: float | None = None) -> list[Episode]:
    """The demo generator of imitation task ``quadrotor_tracking``: ``teacher`` (``"raptor"``, RAPTOR's
    released policy, or a robo checkpoint folder) flies ``num_episodes`` quadrotors on ``task`` with
    DART action noise ``action_noise`` (``quadrotor_demos``: obs (T, 22), clean actions (T, 4)). RAPTOR flies as
    ``robo eval`` flies it (``robo.evaluate.flown_policy``: its unclipped output under L2F's convention)."""
    from robo.evaluate import flown_policy

    setting = task.get("previous_action", "auto") if isinstance(task, dict) else "auto"
    return quadrotor_demos(flown_policy(teacher, setting), num_episodes, task, robot, action_noise, seed, seconds)
