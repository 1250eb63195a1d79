"""SB3's SAC and TD3 without the per-step numpy and Python overhead: ``FastSAC`` and ``FastTD3`` (issue 68).

Both are SB3 algorithms (``SAC`` / ``TD3`` subclasses: the same constructor and hyperparameter names, ``learn``,
``save`` / ``load``, callbacks, and SB3's ``SACPolicy`` / ``TD3Policy`` networks, so robo exports the same
``MLPPolicy`` actor), changed in three places:

- replay: a ``TensorReplayBuffer``, preallocated torch tensors on the model's device; nothing goes through numpy;
- rollouts: ``collect_rollouts`` steps the torch batched task behind the env (``BatchedQuadrotorTask``) directly,
  with same-step autoreset. A task on the model's device (``robo train`` builds it there) is stepped in place, with
  no copies; one elsewhere (e.g. a CPU env for a CUDA model) gets the actions and gives back its results by one copy
  each per step. The current observation stays a tensor between rollouts: SB3's numpy ``_last_obs`` is made from it
  only when the model is saved. A done env's transition stores its episode's last observation as next observation,
  and a truncation (time limit, not a termination) is stored as a timeout, so its target bootstraps: what SB3's
  ``_store_transition`` does with ``terminal_observation`` and ``TimeLimit.truncated``;
- updates: each gradient step is one fused loss (SAC: critic + actor + entropy coefficient; TD3: critic, plus
  actor on every ``policy_delay``-th step), one backward, and one Adam call over the parameters of all the
  optimizers (``robo.rl.fused_update.JointAdam``); a ``train`` call draws its ``gradient_steps`` minibatches in
  one gather and reads its losses back once.

One difference from SB3's update: the actor's loss is taken against the critic of the start of the gradient step
(SB3 steps the critic first and then scores the actor against the stepped critic), so both losses share one
backward; the actor lags the critic by one gradient step. ``torch.compile`` of the loss did not pay on a 2-core
CPU (docs/guide/quadrotor.md) and is not used.

Callbacks see SB3's local names, with tensors: ``new_obs`` (n_envs, obs_dim), ``rewards``, ``dones`` (n_envs,),
and ``infos`` the task's batched info dict (``position_error`` (n_envs,) m, ``level`` (n_envs,)) instead of a
per-env list. Not supported (the constructor says so): gSDE, ``optimize_memory_usage``, n-step returns, another
replay buffer class, and ``VecNormalize`` (use ``algo=sac`` / ``td3`` with ``normalize_observations``).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod

import numpy as np
import torch
import torch.nn.functional as F
from stable_baselines3 import SAC, TD3
from stable_baselines3.common.noise import ActionNoise, NormalActionNoise, VectorizedActionNoise
from stable_baselines3.common.type_aliases import RolloutReturn, TrainFrequencyUnit
from stable_baselines3.common.utils import polyak_update
from stable_baselines3.common.vec_env import VecEnv

from robo.device import same_device
from robo.rl.fused_update import JointAdam, Networks, check_plain_critic, features, min_q, run, sac_sample
from robo.rl.tensor_replay import TensorReplayBuffer
from sims.envs.quadrotor_env import autoreset_step
from sims.envs.task import BatchedQuadrotorTask


def batched_task(env: VecEnv) -> BatchedQuadrotorTask:
    """The torch batched task behind ``env``: ``SB3VecEnvAdapter(QuadrotorVectorEnv(...))``, wrapped or not."""
    task = getattr(getattr(env.unwrapped, "venv", None), "core", None)
    if not isinstance(task, BatchedQuadrotorTask):
        raise ValueError(f"the fast algorithms step a torch batched task: give them SB3VecEnvAdapter(QuadrotorVectorEnv"
                         f"(...)), optionally VecMonitor-wrapped, not {type(env.unwrapped).__name__}")
    return task


def _noise(noise: ActionNoise, n: int, device: torch.device) -> torch.Tensor:
    """(n, A) exploration noise: Gaussian noise drawn by torch, any other kind from SB3's numpy noise."""
    noises = noise.noises if isinstance(noise, VectorizedActionNoise) else [noise] * n
    if all(type(x) is NormalActionNoise for x in noises):
        mu = torch.as_tensor(np.stack([x._mu for x in noises]), dtype=torch.float32, device=device)
        sigma = torch.as_tensor(np.stack([x._sigma for x in noises]), dtype=torch.float32, device=device)
        return mu + sigma * torch.randn(mu.shape, device=device)
    return torch.as_tensor(noise(), dtype=torch.float32, device=device).reshape(n, -1)


class _FastOffPolicy(ABC):
    """What ``FastSAC`` and ``FastTD3`` share: the tensor replay buffer, the checks, and tensor rollouts."""

    FAST_STATE = ("_rollout_obs", "_rollout_obs_source", "_episode_return", "_episode_length")
    sb3_name: str  # the SB3 algorithm this one is

    def _setup_model(self) -> None:
        name = type(self).__name__
        for unsupported, what in ((self.use_sde, "use_sde"), (self.optimize_memory_usage, "optimize_memory_usage"),
                                  (self.n_steps > 1, "n_steps > 1")):
            if unsupported:
                raise ValueError(f"{name} does not support {what}; use SB3's {self.sb3_name}")
        if self.replay_buffer_class not in (None, TensorReplayBuffer):
            raise ValueError(f"{name} keeps its replay buffer on the device (TensorReplayBuffer), not "
                             f"{self.replay_buffer_class.__name__}")
        self.replay_buffer_class = TensorReplayBuffer
        self._rollout_obs = self._rollout_obs_source = None
        if self.env is not None:  # None for a model loaded without an env; collect_rollouts checks again
            self._check_env(self.env)
        super()._setup_model()
        check_plain_critic(self.critic)
        Networks.of(self.policy)  # refuses networks that are not plain MLPs
        if not np.allclose(self.action_space.low, -1) or not np.allclose(self.action_space.high, 1):
            raise ValueError(f"{name} takes actions in [-1, 1], not [{self.action_space.low}, "
                             f"{self.action_space.high}]")

    def _check_env(self, env: VecEnv) -> BatchedQuadrotorTask:
        """The torch batched task behind ``env``; refuses VecNormalize (it normalizes numpy observations)."""
        if self._vec_normalize_env is not None:
            raise ValueError(f"{type(self).__name__} does not normalize observations (VecNormalize); "
                             "set algo.normalize_observations=false or use algo=sac / td3")
        return batched_task(env)

    def _excluded_save_params(self) -> list[str]:
        return super()._excluded_save_params() + list(self.FAST_STATE)

    @abstractmethod
    def _policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, A) exploration action of the current actor at obs (B, obs_dim), before action noise."""

    def _start_rollout(self, n: int) -> torch.Tensor:
        """The current observation as a tensor; fresh episode statistics whenever SB3 reset the env."""
        if self._rollout_obs is None or self._rollout_obs_source is not self._last_obs:
            self._rollout_obs = torch.as_tensor(self._last_obs, device=self.device)
            self._episode_return = torch.zeros(n, device=self.device)
            self._episode_length = torch.zeros(n, dtype=torch.long, device=self.device)
        return self._rollout_obs

    def _end_rollout(self, obs: torch.Tensor) -> None:
        # SB3's _last_obs holds the tensor (no host copy per rollout); save() turns it into SB3's numpy array
        self._rollout_obs = self._last_obs = self._rollout_obs_source = obs

    def save(self, path, exclude=None, include=None) -> None:
        """SB3's ``save``; the current observation goes into the file as SB3 keeps it (numpy, device-free)."""
        if isinstance(self._last_obs, torch.Tensor):
            self._last_obs = self._rollout_obs_source = self._last_obs.cpu().numpy()
        super().save(path, exclude, include)

    def _step(self, task: BatchedQuadrotorTask, actions: torch.Tensor) -> tuple:
        """``autoreset_step`` of ``task``, its tensors on the model's device: in place when the task is there,
        else with the actions copied to the task and its results copied back (infos stay on the task's device)."""
        if same_device(task.device, self.device):
            return autoreset_step(task, actions)
        result = autoreset_step(task, actions.to(task.device))
        return tuple(x.to(self.device) if isinstance(x, torch.Tensor) else x for x in result)

    def collect_rollouts(self, env: VecEnv, callback, train_freq, replay_buffer: TensorReplayBuffer,
                         action_noise: ActionNoise | None = None, learning_starts: int = 0,
                         log_interval: int | None = None) -> RolloutReturn:
        """SB3's ``collect_rollouts`` (``train_freq`` vectorized steps, callbacks after each) on tensors."""
        if train_freq.unit != TrainFrequencyUnit.STEP:
            raise ValueError(f"{type(self).__name__} collects vectorized steps; give train_freq in steps")
        task, n = self._check_env(env), env.num_envs
        self.policy.set_training_mode(False)
        obs = self._start_rollout(n)
        callback.on_rollout_start()
        steps = episodes = 0
        while steps < train_freq.frequency:
            with torch.no_grad():
                if self.num_timesteps < learning_starts:
                    actions = torch.rand(n, self.action_space.shape[0], device=self.device) * 2 - 1
                else:
                    actions = self._policy_action(obs)
                if action_noise is not None:
                    actions = (actions + _noise(action_noise, n, self.device)).clamp(-1, 1)
            new_obs, final_obs, rewards, terminated, truncated, infos = self._step(task, actions)
            dones = terminated | truncated
            self.num_timesteps += n
            steps += 1
            callback.update_locals(locals())
            if not callback.on_step():
                self._end_rollout(new_obs)
                return RolloutReturn(steps * n, episodes, continue_training=False)
            replay_buffer.add_batch(obs, final_obs, actions, rewards, dones, truncated & ~terminated)
            self._update_current_progress_remaining(self.num_timesteps, self._total_timesteps)
            self._on_step()
            self._episode_return += rewards
            self._episode_length += 1
            if bool(dones.any()):
                episodes += self._end_episodes(dones.nonzero().flatten(), action_noise, log_interval)
            obs = new_obs
        self._end_rollout(obs)
        callback.on_rollout_end()
        return RolloutReturn(steps * n, episodes, continue_training=True)

    def _end_episodes(self, done: torch.Tensor, action_noise: ActionNoise | None, log_interval: int | None) -> int:
        """Book the episodes of envs ``done`` (indices) as SB3's Monitor would: returns, lengths, log dumps."""
        t = round(time.time_ns() / 1e9 - self.start_time / 1e9, 6)
        for r, length in zip(self._episode_return[done].tolist(), self._episode_length[done].tolist()):
            self.ep_info_buffer.append({"r": round(r, 6), "l": length, "t": t})
        self._episode_return[done] = 0.0
        self._episode_length[done] = 0
        indices = done.tolist()
        if action_noise is not None:
            action_noise.reset(**({"indices": indices} if isinstance(action_noise, VectorizedActionNoise) else {}))
        before, self._episode_num = self._episode_num, self._episode_num + len(indices)
        if log_interval is not None and self._episode_num // log_interval > before // log_interval:
            self.dump_logs()
        return len(indices)

    def _polyak(self, sources: list[torch.Tensor], targets: list[torch.Tensor]) -> None:
        with torch.no_grad():
            torch._foreach_lerp_(targets, sources, self.tau)


class FastSAC(_FastOffPolicy, SAC):
    """``stable_baselines3.SAC`` (same arguments) with tensor rollouts, device replay and fused updates."""

    sb3_name = "SAC"

    def _policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        return sac_sample(Networks.of(self.policy, actor_only=True), features(self.actor, obs))[0]

    def _losses(self, obs, actions, next_obs, dones, rewards, nets: Networks | None = None):
        """(critic + actor + entropy-coefficient loss, [critic loss, actor loss, ent_coef, ent_coef loss]) of one
        minibatch: obs, next_obs (B, obs_dim), actions (B, A), dones, rewards (B, 1)."""
        nets = nets or Networks.of(self.policy)
        pi, log_prob = sac_sample(nets, features(self.actor, obs))
        log_prob = log_prob[:, None]
        if self.ent_coef_optimizer is not None:
            ent_coef = self.log_ent_coef.detach().exp()
            ent_coef_loss = -(self.log_ent_coef * (log_prob.detach() + self.target_entropy)).mean()
        else:
            ent_coef, ent_coef_loss = self.ent_coef_tensor, torch.zeros((), device=obs.device)
        with torch.no_grad():
            next_pi, next_log_prob = sac_sample(nets, features(self.actor, next_obs))
            next_q = min_q(nets.targets, features(self.critic_target, next_obs), next_pi)
            target = rewards + (1 - dones) * self.gamma * (next_q - ent_coef * next_log_prob[:, None])
        critic_features = features(self.critic, obs)
        x = torch.cat([critic_features, actions], 1)
        critic_loss = 0.5 * sum(F.mse_loss(run(q, x), target) for q in nets.critics)
        actor_loss = (ent_coef * log_prob - min_q(nets.critics, critic_features, pi, frozen=True)).mean()
        stats = torch.stack([critic_loss, actor_loss, ent_coef.reshape(()), ent_coef_loss])
        return critic_loss + actor_loss + ent_coef_loss, stats

    def train(self, gradient_steps: int, batch_size: int = 64) -> None:
        self.policy.set_training_mode(True)
        optimizers = [self.actor.optimizer, self.critic.optimizer, self.ent_coef_optimizer]
        self._update_learning_rate([o for o in optimizers if o is not None])
        joint = JointAdam(optimizers)
        critic, target = list(self.critic.parameters()), list(self.critic_target.parameters())
        data, nets = self.replay_buffer.sample_batches(gradient_steps, batch_size), Networks.of(self.policy)
        stats = []
        for i in range(gradient_steps):
            loss, s = self._losses(*(x[i] for x in data[:5]), nets=nets)
            joint.zero_grad()
            loss.backward()
            joint.step()
            if i % self.target_update_interval == 0:
                self._polyak(critic, target)
                polyak_update(self.batch_norm_stats, self.batch_norm_stats_target, 1.0)
            stats.append(s.detach())
        self._n_updates += gradient_steps
        critic_loss, actor_loss, ent_coef, ent_coef_loss = torch.stack(stats).mean(0).tolist()
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/ent_coef", ent_coef)
        self.logger.record("train/actor_loss", actor_loss)
        self.logger.record("train/critic_loss", critic_loss)
        if self.ent_coef_optimizer is not None:
            self.logger.record("train/ent_coef_loss", ent_coef_loss)


class FastTD3(_FastOffPolicy, TD3):
    """``stable_baselines3.TD3`` (same arguments) with tensor rollouts, device replay and fused updates."""

    sb3_name = "TD3"

    def _policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        return run(Networks.of(self.policy, actor_only=True).actor, features(self.actor, obs))

    def _losses(self, obs, actions, next_obs, dones, rewards, with_actor: bool, nets: Networks | None = None):
        """(critic [+ actor] loss, critic loss, actor loss or None) of one minibatch (shapes as ``FastSAC``)."""
        nets = nets or Networks.of(self.policy)
        with torch.no_grad():
            noise = (torch.randn_like(actions) * self.target_policy_noise).clamp(-self.target_noise_clip,
                                                                                 self.target_noise_clip)
            next_actions = (run(nets.actor_target, features(self.actor_target, next_obs)) + noise).clamp(-1, 1)
            next_q = min_q(nets.targets, features(self.critic_target, next_obs), next_actions)
            target = rewards + (1 - dones) * self.gamma * next_q
        critic_features = features(self.critic, obs)
        x = torch.cat([critic_features, actions], 1)
        critic_loss = sum(F.mse_loss(run(q, x), target) for q in nets.critics)
        if not with_actor:
            return critic_loss, critic_loss, None
        pi = run(nets.actor, features(self.actor, obs))
        actor_loss = -min_q(nets.critics[:1], critic_features, pi, frozen=True).mean()  # SB3: q1_forward
        return critic_loss + actor_loss, critic_loss, actor_loss

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate([self.actor.optimizer, self.critic.optimizer])
        joint = JointAdam([self.actor.optimizer, self.critic.optimizer])
        critic, critic_target = list(self.critic.parameters()), list(self.critic_target.parameters())
        actor, actor_target = list(self.actor.parameters()), list(self.actor_target.parameters())
        data, nets = self.replay_buffer.sample_batches(gradient_steps, batch_size), Networks.of(self.policy)
        critic_losses, actor_losses = [], []
        for i in range(gradient_steps):
            self._n_updates += 1
            delayed = self._n_updates % self.policy_delay == 0
            loss, critic_loss, actor_loss = self._losses(*(x[i] for x in data[:5]), with_actor=delayed, nets=nets)
            joint.zero_grad()
            loss.backward()
            joint.step()
            critic_losses.append(critic_loss.detach())
            if delayed:
                actor_losses.append(actor_loss.detach())
                self._polyak(critic, critic_target)
                self._polyak(actor, actor_target)
                polyak_update(self.critic_batch_norm_stats, self.critic_batch_norm_stats_target, 1.0)
                polyak_update(self.actor_batch_norm_stats, self.actor_batch_norm_stats_target, 1.0)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        if actor_losses:
            self.logger.record("train/actor_loss", torch.stack(actor_losses).mean().item())
        self.logger.record("train/critic_loss", torch.stack(critic_losses).mean().item())


FAST_ALGORITHMS = {"sac_fast": FastSAC, "td3_fast": FastTD3}
BASE_ALGORITHM = {"sac_fast": "sac", "td3_fast": "td3"}
"""robo's algo names of the fast algorithms, and the SB3 algorithm each one is (policy classes, checks)."""
