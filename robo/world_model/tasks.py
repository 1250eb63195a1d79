"""The simulated tasks world models are learned for: real rollouts (data and ground truth),
success tests on observations, and quality ladders of policies. Wires ``sims`` to the models.

``make_task("hover" | "pusht" | "obstacle_reach")`` -> ``ImagineTask``. Episodes are dicts of per-step arrays
``obs (T, D), action (T, A), next_obs (T, D), reward (T,), terminated (T,)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import gymnasium as gym
import numpy as np
import torch

from policies.world_model import EnsembleConfig
from sims.envs import make_batched_task
from sims.envs.quadrotor_env import ACTION_SPACE as QUAD_ACTION_SPACE
from sims.pusht import ENV_ID as PUSHT_ID
from sims.pusht import PushTConfig, coverage
from sims.toy import ENV_ID as TOY_ID
from sims.toy.obstacle_reach import GOAL as TOY_GOAL
from sims.toy.obstacle_reach import SUCCESS_RADIUS as TOY_SUCCESS_RADIUS

from .policies import NoisyPolicy, PushTExpertPolicy, ToyExpertPolicy, mix_random_actions

Episode = dict[str, np.ndarray]


@dataclass
class ImagineTask:
    """A task as the world model sees it.

    ``success_fn(obs (B, D)) -> (B,) bool``; ``success_at``: ``"any"`` (success ends the episode,
    push-T) or ``"final"`` (judged on the last observation, quadrotor hover).
    ``collect(policy, episodes, seed) -> (list of Episode, success (episodes,) bool)`` runs the sim.
    ``ladder(levels, seed) -> list of (name, policy)``: policies of decreasing quality.
    ``behaviour(seed)``: a policy of mixed quality for model-training data.
    ``make_env()``: one simulator episode as a plain ``gym.Env`` (for chunk-wrapping trainers such
    as DSRL); None where the task has only a batched sim.
    ``ensemble``: ``EnsembleConfig`` fields the task's dynamics model needs beyond its dims: for
    push-T, the block's frame (``frame_pose_dims`` ...) and ``nll_beta`` (see ``EnsembleConfig``).
    ``model_size``: the default behaviour ``data_episodes`` and ``fit_steps`` of the ensemble.
    """

    name: str
    obs_dim: int
    action_dim: int
    action_space: gym.spaces.Box
    observation_space: gym.spaces.Box | None
    episode_steps: int
    angle_dims: list[int]
    success_fn: Callable[[np.ndarray], np.ndarray]
    success_at: str
    collect: Callable
    ladder: Callable
    behaviour: Callable
    default_levels: list[float]
    make_env: Callable[[], gym.Env] | None = None
    ensemble: dict = field(default_factory=dict)
    # what `robo imagine` fits the ensemble with when model.data_episodes / model.fit_steps are null
    model_size: dict = field(default_factory=lambda: {"data_episodes": 64, "fit_steps": 2000})


def ensemble_config(task: ImagineTask, members: int = 5, hidden_dims: list[int] | None = None,
                    object_frame: bool = True) -> EnsembleConfig:
    """The dynamics ensemble's config for ``task``: its dims, angles, ``task.ensemble`` fields (without
    the body frame unless ``object_frame``)."""
    extra = {k: v for k, v in task.ensemble.items() if object_frame or not k.startswith("frame_")}
    return EnsembleConfig(obs_dim=task.obs_dim, action_dim=task.action_dim, num_members=int(members),
                          hidden_dims=list(hidden_dims or [200, 200, 200]), angle_dims=task.angle_dims, **extra)


def transitions(episodes: list[Episode]) -> dict[str, np.ndarray]:
    """Concatenate episodes into one transition dict (obs, action, next_obs, reward, terminated, and
    prev_obs: the step before, the first obs itself at each episode's start)."""
    if not episodes:
        raise ValueError("no episodes to take transitions from")
    keys = ("obs", "action", "next_obs", "reward", "terminated")
    out = {k: np.concatenate([e[k] for e in episodes]).astype(np.float32) for k in keys}
    out["prev_obs"] = np.concatenate([previous(e["obs"]) for e in episodes]).astype(np.float32)
    return out


def previous(obs: np.ndarray) -> np.ndarray:
    """(T, D) observations of one episode -> (T, D) each one's predecessor (the first: itself)."""
    return np.concatenate([obs[:1], obs[:-1]])


def from_demos(demos: list[Episode]) -> list[Episode]:
    """Imitation demos ``{"obs" (T, D), "action" (T, A), "reward" (T,)}`` as transition episodes for a
    dynamics model: step t's next observation is obs[t + 1], so each demo's last step (whose next
    observation was not recorded) is left out; ``terminated`` is 0. A world model fitted on the data a
    policy was imitated from costs no new env steps."""
    out = []
    for i, d in enumerate(demos):
        if "reward" not in d:
            raise ValueError(f"demo {i} has no rewards; the world model learns the reward too")
        T = len(d["obs"]) - 1
        if T < 1:
            continue
        out.append({"obs": d["obs"][:T], "action": d["action"][:T], "next_obs": d["obs"][1:],
                    "reward": np.asarray(d["reward"][:T]), "terminated": np.zeros(T, np.float32)})
    return out


# Quadrotor hover ---------------------------------------------------------------------------
HOVER_RADIUS = 0.10  # m, as robo eval's success_radius


def hover_success(obs: np.ndarray) -> np.ndarray:
    return np.linalg.norm(np.asarray(obs)[:, :3], axis=1) < HOVER_RADIUS


@torch.no_grad()
def collect_hover(policy, episodes: int, seed: int = 0, seconds: float = 5.0) -> tuple[list[Episode], np.ndarray]:
    """Fly ``episodes`` quadrotors (one batch) for ``seconds``; crashed envs stop recording."""
    task = make_batched_task("hover", "crazyflie", episodes)
    task.seed(seed)
    obs = task.reset()
    policy.reset()
    steps = int(round(seconds / task.dt))
    alive = np.ones(episodes, bool)
    rec: dict[str, list] = {k: [] for k in ("obs", "action", "next_obs", "reward", "terminated", "alive")}
    for _ in range(steps):
        alive_t = torch.as_tensor(alive)
        obs = torch.where(alive_t[:, None], obs, torch.zeros_like(obs))  # crashed envs are frozen, as in rollout
        a = torch.as_tensor(np.asarray(policy.act(obs.numpy())), dtype=torch.float32)
        frozen = task.state.clone()
        r = task.step(a)
        if not alive.all():
            task.sim.state[~alive_t] = frozen[~alive_t]
        term = r.terminated.numpy() & alive
        for k, v in (("obs", obs.numpy()), ("action", a.numpy()), ("next_obs", r.obs.numpy()),
                     ("reward", r.reward.numpy()), ("terminated", term), ("alive", alive.copy())):
            rec[k].append(v)
        alive &= ~term
        obs = r.obs
    arr = {k: np.stack(v, 1) for k, v in rec.items()}  # (B, T, ...)
    eps = [{k: arr[k][b][arr["alive"][b]] for k in rec if k != "alive"} for b in range(episodes)]
    success = alive & hover_success(obs.numpy())
    return eps, success


def hover_ladder(levels: list[float], seed: int = 0) -> list[tuple[str, NoisyPolicy]]:
    from policies.foundation import load_raptor

    return [(f"raptor+noise{s:g}", NoisyPolicy(load_raptor(), s, seed=seed + i)) for i, s in enumerate(levels)]


class _MixedNoise(NoisyPolicy):
    """Per-env noise std drawn uniformly from [0, max_std] at every full reset."""

    def __init__(self, policy, max_std: float, seed: int = 0):
        super().__init__(policy, max_std, seed=seed)
        self.max_std = max_std

    def act(self, obs):
        if np.ndim(self.std) == 0 or len(self.std) != len(obs):
            self.std = self.rng.uniform(0, self.max_std, (len(obs), 1))
        return super().act(obs)

    def reset(self, mask=None):
        super().reset(mask)
        if mask is None:
            self.std = 0.0


def hover_behaviour(seed: int = 0, max_std: float = 0.8):
    from policies.foundation import load_raptor

    return _MixedNoise(load_raptor(), max_std, seed)


# Push-T ------------------------------------------------------------------------------------
PUSHT = PushTConfig()
GOAL = np.array([PUSHT.goal_x, PUSHT.goal_y, PUSHT.goal_yaw])


def pusht_success(obs: np.ndarray) -> np.ndarray:
    obs = np.asarray(obs, dtype=np.float64)
    return np.array([coverage(o[2:5], GOAL) >= PUSHT.success_threshold for o in obs], bool)


def collect_gym(make_env: Callable[[], gym.Env], max_episode_steps: int, policy, episodes: int, seed: int = 0,
                max_steps: int | None = None, num_envs: int = 16) -> tuple[list[Episode], np.ndarray]:
    """Run ``episodes`` episodes of single gym envs from ``make_env``, ``num_envs`` at a time (the
    batched ``policy`` acts for all); episode i resets with seed ``seed + i``."""
    limit = max_steps or max_episode_steps
    out, success = [], []
    for first in range(0, episodes, num_envs):
        n = min(num_envs, episodes - first)
        envs = [make_env().unwrapped for _ in range(n)]
        obs = np.stack([e.reset(seed=seed + first + i)[0] for i, e in enumerate(envs)])
        policy.reset()
        rec = [{k: [] for k in ("obs", "action", "next_obs", "reward", "terminated")} for _ in range(n)]
        done, ok = np.zeros(n, bool), np.zeros(n, bool)
        for _ in range(limit):
            if done.all():
                break
            actions = np.asarray(policy.act(obs), dtype=np.float32)
            for i in np.flatnonzero(~done):
                o, r, term, _, info = envs[i].step(actions[i])
                for k, v in (("obs", obs[i].copy()), ("action", actions[i]), ("next_obs", o), ("reward", r),
                             ("terminated", term)):
                    rec[i][k].append(v)
                obs[i] = o
                if term:
                    done[i], ok[i] = True, bool(info["is_success"])
        out += [{k: np.asarray(v, np.float32) for k, v in r.items()} for r in rec]
        success += list(ok)
    return out, np.asarray(success, bool)


def pusht_env_kwargs(env_kwargs: dict | None = None) -> dict:
    """``gym.make`` keywords for the state push-T env (the world model learns states), checked."""
    kw = {"obs_type": "state", "render_mode": None, **(env_kwargs or {})}
    if kw["obs_type"] != "state":
        raise ValueError(f"the push-T world model learns states: obs_type={kw['obs_type']!r}, use task=pusht")
    return kw


def pusht_ladder(levels: list[float], seed: int = 0) -> list[tuple[str, PushTExpertPolicy]]:
    return [(f"expert+random{p:g}", PushTExpertPolicy(p, seed=seed + i)) for i, p in enumerate(levels)]


class _MixedExpert(PushTExpertPolicy):
    """Random-action probability drawn per env from [0, max_prob] (redrawn at every full reset)."""

    def __init__(self, max_prob: float, seed: int = 0):
        super().__init__(0.0, seed=seed)
        self.max_prob = max_prob
        self.probs = None

    def act(self, obs):
        if self.probs is None or len(self.probs) != len(obs):
            self.probs = self.rng.uniform(0, self.max_prob, len(obs))
        self.random_prob = 0.0
        return mix_random_actions(super().act(obs), self.probs, -self.half_size, self.half_size, self.rng)

    def reset(self, mask=None):
        super().reset(mask)
        if mask is None:
            self.probs = None


# Obstacle reach (toy) -----------------------------------------------------------------------
def toy_success(obs: np.ndarray) -> np.ndarray:
    return np.linalg.norm(np.asarray(obs)[:, :2] - TOY_GOAL, axis=1) < TOY_SUCCESS_RADIUS


def make_toy_env(**env_kwargs) -> gym.Env:
    """The obstacle-reach env; ``env_kwargs`` go to ``ObstacleReachEnv`` (e.g. ``start_spread=(0.9, 0.3)``)."""
    return gym.make(TOY_ID, **env_kwargs)


def toy_ladder(levels: list[float], seed: int = 0) -> list[tuple[str, ToyExpertPolicy]]:
    return [(f"expert+random{p:g}", ToyExpertPolicy(p, seed=seed + i)) for i, p in enumerate(levels)]


def make_task(name: str, env_kwargs: dict | None = None) -> ImagineTask:
    """The world-model task ``name``; ``env_kwargs`` (the task config's) configure a gym-backed task's
    simulator, e.g. obstacle_reach's ``{"start_spread": (0.9, 0.3)}``: starts wider than the demos'."""
    if env_kwargs and name == "hover":
        raise ValueError(f"task 'hover' runs the batched quadrotor sim and takes no env_kwargs (got {env_kwargs})")
    if name == "hover":
        return ImagineTask("hover", 22, 4, QUAD_ACTION_SPACE, None, 500, [], hover_success, "final", collect_hover,
                           hover_ladder, hover_behaviour, [0.0, 0.12, 0.16, 0.2, 0.24, 0.28, 0.32, 0.4])
    if name == "pusht":
        make_env = partial(gym.make, PUSHT_ID, **pusht_env_kwargs(env_kwargs))  # a bad obs_type fails here
        h = PUSHT.half_size
        space = gym.spaces.Box(-h, h, (2,), np.float32)
        obs_space = gym.spaces.Box(np.array([-h, -h, -h, -h, -np.pi], np.float32),
                                   np.array([h, h, h, h, np.pi], np.float32), dtype=np.float32)
        return ImagineTask("pusht", 5, 2, space, obs_space, PUSHT.max_episode_steps, [4], pusht_success, "any",
                           partial(collect_gym, make_env, PUSHT.max_episode_steps), pusht_ladder,
                           lambda seed=0: _MixedExpert(0.8, seed), [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8], make_env,
                           # the block (x, y, yaw) is the body; the pusher and its target are points
                           {"frame_pose_dims": [2, 3, 4], "frame_point_dims": [0, 1], "frame_action_is_point": True,
                            "nll_beta": 1.0, "use_prev_change": True},
                           model_size={"data_episodes": 600, "fit_steps": 8000})  # the benchmark's (Spearman 0.97)
    if name == "obstacle_reach":
        make_env = partial(make_toy_env, **(env_kwargs or {}))
        env = make_env()
        steps = env.unwrapped.max_steps
        return ImagineTask("obstacle_reach", 2, 2, env.action_space, env.observation_space, steps, [], toy_success,
                           "any", partial(collect_gym, make_env, steps), toy_ladder,
                           lambda seed=0: ToyExpertPolicy(0.5, seed=seed), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
                           make_env)
    raise ValueError(f"unknown task {name!r}; choose 'hover', 'pusht' or 'obstacle_reach'")


def make_real_vec_env(task: ImagineTask, num_envs: int, seed: int | None = None):
    """The simulator as a SAME_STEP-autoreset VectorEnv (what ``MixedVectorEnv`` pairs with imagination)."""
    if task.name == "hover":
        from sims.envs import QuadrotorVectorEnv

        env = QuadrotorVectorEnv(num_envs, task="hover")
    else:
        from gymnasium.vector import AutoresetMode, SyncVectorEnv

        env = SyncVectorEnv([task.make_env] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=seed)
    return env
