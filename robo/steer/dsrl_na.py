"""DSRL-NA ("noise aliasing", Wagenmaker et al. 2025): steer a frozen chunked policy with a
Q-function on *real actions*, distilled into a latent-noise Q, so that transitions which carry
actions but no noise (demonstrations, human interventions, another policy's data) train the
steering actor too.

Per decision (one executed chunk) the replay buffer holds the raw observation window
``window`` (n_obs_steps * obs_dim,), the executed chunk ``action`` (n_action_steps * action_dim,)
in [-1, 1] (the env's action bounds), the summed reward, the next window and ``terminated``.
Each of ``utd`` updates per decision, with ``decode(s, w)`` the frozen base policy's executed
chunk for noise ``noise_bound * w`` (no gradient through it):

- Q^A(s, a) <- r + gamma (1 - terminated) min_j Q^A_targ,j(s', decode(s', w')), w' ~ pi_W(s');
- Q^W(s, w) <- min_j Q^A_j(s, decode(s, w)), w uniform in the noise box [-1, 1]^D: Q^W learns
  what every noise *does*, not only the noises the agent tried;
- pi_W (tanh-Gaussian, state-independent log std): maximize Q^W(s, w) - alpha log pi_W(w | s),
  alpha tuned towards ``target_entropy`` (SAC).

Critics are MLPs with LayerNorm (as DSRL's). The deterministic actor is exported as a robo
``SteeredPolicy`` (base + ``MLPActor``), like DSRL-SAC's.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from policies.steered import SteeredConfig, SteeredPolicy
from policies.steered.modeling_steered import check_base, make_noise_actor

from .critics import layer_norm_mlp
from .envs import LatentNoiseEnv, executed_actions


@dataclass
class DSRLNAConfig:
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    lr: float = 3e-4
    gamma: float = 0.99           # per decision (one chunk)
    tau: float = 0.005            # Polyak rate of the action-critic targets
    batch_size: int = 256
    buffer_size: int = 200_000    # decisions
    learning_starts: int = 200    # decisions with the base policy's own noise before updates
    utd: int = 4                  # updates per decision
    target_entropy: float = 0.0   # of the tanh-Gaussian noise actor (nats)

    def __post_init__(self) -> None:
        self.hidden_dims = [int(h) for h in self.hidden_dims]
        for name in ("batch_size", "buffer_size", "utd"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"dsrl_na.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"dsrl_na.gamma must lie in (0, 1], got {self.gamma}")


def critic(in_dim: int, hidden: list[int]) -> nn.Module:
    """in_dim -> [Linear -> LayerNorm -> ReLU] * len(hidden) -> 1."""
    return layer_norm_mlp(in_dim, hidden)


class TwinQ(nn.Module):
    """Two critics over concat(x, y); ``forward -> (B, 2)``."""

    def __init__(self, in_dim: int, hidden: list[int]):
        super().__init__()
        self.q1, self.q2 = critic(in_dim, hidden), critic(in_dim, hidden)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        xy = torch.cat([x, y], dim=-1)
        return torch.cat([self.q1(xy), self.q2(xy)], dim=-1)


class ReplayBuffer:
    """Decision-level transitions in a ring buffer (numpy, float32)."""

    def __init__(self, size: int, window_dim: int, action_dim: int):
        self.size, self.n, self.i = size, 0, 0
        self.data = {"window": np.zeros((size, window_dim), np.float32),
                     "action": np.zeros((size, action_dim), np.float32), "reward": np.zeros(size, np.float32),
                     "next_window": np.zeros((size, window_dim), np.float32),
                     "terminated": np.zeros(size, np.float32)}

    def add(self, **batch: np.ndarray) -> None:
        """Arrays with a leading batch axis for every key of ``data``."""
        if set(batch) != set(self.data):
            raise KeyError(f"transitions need exactly {sorted(self.data)}, got {sorted(batch)}")
        rows = len(batch["window"])
        for k, v in batch.items():
            v = np.asarray(v, np.float32).reshape(rows, *self.data[k].shape[1:])
            if not np.all(np.isfinite(v)):
                raise ValueError(f"transition field {k!r} contains NaN or inf")
            idx = (self.i + np.arange(rows)) % self.size
            self.data[k][idx] = v
        self.i = (self.i + rows) % self.size
        self.n = min(self.n + rows, self.size)

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        idx = rng.integers(0, self.n, batch_size)
        return {k: torch.as_tensor(v[idx]) for k, v in self.data.items()}


class DSRLNA:
    """DSRL-NA over ``env`` (a ``LatentNoiseEnv``); ``learn(decisions)`` acts and updates."""

    def __init__(self, env: LatentNoiseEnv, config: DSRLNAConfig | None = None, seed: int = 0):
        if not isinstance(env, LatentNoiseEnv):
            raise TypeError(f"DSRL-NA steers through a LatentNoiseEnv, got {type(env).__name__}")
        self.env, self.c, self.base = env, config or DSRLNAConfig(), env.policy
        check_base(self.base)
        torch.manual_seed(seed)  # network initialization
        self.rng = np.random.default_rng(seed)  # episode seeds, warm-up noise, minibatches
        self.gen = torch.Generator().manual_seed(seed)  # actor sampling, distillation noise
        self.window_dim = env.observation_space.shape[0]
        self.noise_dim = env.action_space.shape[0]
        self.chunk_dim = env.n_action_steps * env.env_action_dim
        low, high = env.env.action_space.low, env.env.action_space.high
        self.a_center = torch.as_tensor((low + high) / 2, dtype=torch.float32)
        self.a_scale = torch.as_tensor((high - low) / 2, dtype=torch.float32)
        center, scale = env.window_normalization()
        self.w_center, self.w_scale = (torch.as_tensor(x, dtype=torch.float32) for x in (center, scale))
        h = self.c.hidden_dims
        self.q_action = TwinQ(self.window_dim + self.chunk_dim, h)
        self.q_action_target = copy.deepcopy(self.q_action).requires_grad_(False)
        self.q_noise = TwinQ(self.window_dim + self.noise_dim, h)
        self.steered_config = SteeredConfig(obs_dim=self.base.obs_dim, action_dim=self.base.action_dim,
                                            n_obs_steps=self.base.n_obs_steps, noise_shape=list(self.base.noise_shape),
                                            noise_bound=env.noise_bound, hidden_dims=h)
        self.actor = make_noise_actor(self.steered_config)  # raw window -> tanh(mean) in [-1, 1]^D
        self.actor.obs_mean.copy_(self.w_center)
        self.actor.obs_std.copy_(self.w_scale)
        self.log_std = nn.Parameter(torch.zeros(self.noise_dim))
        self.log_alpha = nn.Parameter(torch.zeros(()))
        lr = self.c.lr
        self.opt_qa = torch.optim.Adam(self.q_action.parameters(), lr)
        self.opt_qw = torch.optim.Adam(self.q_noise.parameters(), lr)
        self.opt_pi = torch.optim.Adam([*self.actor.parameters(), self.log_std], lr)
        self.opt_alpha = torch.optim.Adam([self.log_alpha], lr)
        self.buffer = ReplayBuffer(self.c.buffer_size, self.window_dim, self.chunk_dim)
        self.decisions = 0
        self._obs: np.ndarray | None = None
        self.last_losses: dict[str, float] = {}

    # base policy -----------------------------------------------------------------------------
    def _norm_window(self, window: torch.Tensor) -> torch.Tensor:
        return (window - self.w_center) / self.w_scale

    def raw_window(self, agent_obs: np.ndarray) -> np.ndarray:
        """The env's normalized observation -> the raw window (n_obs_steps * obs_dim,)."""
        return np.asarray(agent_obs, np.float32) * self.w_scale.numpy() + self.w_center.numpy()

    def normalize_actions(self, actions: np.ndarray) -> np.ndarray:
        """(n, action_dim) env actions, n <= n_action_steps -> (chunk_dim,) in [-1, 1]; a chunk cut
        short by the episode's end repeats its last action."""
        a = np.asarray(actions, np.float32)
        a = np.concatenate([a, np.repeat(a[-1:], self.env.n_action_steps - len(a), axis=0)])
        return ((a - self.a_center.numpy()) / self.a_scale.numpy()).reshape(-1)

    @torch.no_grad()
    def decode(self, window: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """raw windows (B, window_dim), w (B, D) in [-1, 1] -> executed chunks (B, chunk_dim) in [-1, 1]."""
        B = window.shape[0]
        hist = window.reshape(B, self.base.n_obs_steps, self.base.obs_dim)
        noise = self.env.noise_bound * w.reshape(B, *self.base.noise_shape)
        executed = executed_actions(self.base, hist, noise, self.env.n_action_steps)
        return ((executed - self.a_center) / self.a_scale).reshape(B, -1)

    # actor -----------------------------------------------------------------------------------
    def _sample(self, window: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """raw windows (B, W) -> w (B, D) in (-1, 1) and log pi(w | s) (B,) (tanh-corrected)."""
        mean = self.actor.net[:-1]((window - self.actor.obs_mean) / self.actor.obs_std)
        std = self.log_std.clamp(-5.0, 2.0).exp()
        u = mean + std * torch.randn(mean.shape, generator=self.gen)
        w = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / std) ** 2 - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2 * (math.log(2.0) - u - F.softplus(-2 * u))).sum(-1)
        return w, logp

    @torch.no_grad()
    def predict(self, agent_obs: np.ndarray, deterministic: bool = True) -> tuple[np.ndarray, None]:
        """The env's observation (W,) -> (noise action (D,) in [-1, 1], None), as SB3's ``predict``."""
        window = torch.as_tensor(self.raw_window(agent_obs))[None]
        w = self.actor(window) if deterministic else self._sample(window)[0]
        return w[0].numpy(), None

    def steered_policy(self) -> SteeredPolicy:
        return SteeredPolicy(self.base, copy.deepcopy(self.steered_config), copy.deepcopy(self.actor))

    # data ------------------------------------------------------------------------------------
    def add_transitions(self, window: np.ndarray, action: np.ndarray, reward: np.ndarray, next_window: np.ndarray,
                        terminated: np.ndarray) -> None:
        """Off-policy decisions without noise: raw windows (N, W), chunks (N, chunk_dim) in [-1, 1]
        (see ``normalize_actions``), rewards (N,), next windows (N, W), terminated (N,)."""
        self.buffer.add(window=window, action=action, reward=reward, next_window=next_window, terminated=terminated)

    def _act_and_store(self, warmup: bool) -> dict:
        if self._obs is None:
            self._obs, _ = self.env.reset(seed=int(self.rng.integers(2**31)))
        if warmup:  # the base policy's own noise distribution
            w = np.clip(self.rng.standard_normal(self.noise_dim) / self.env.noise_bound, -1, 1).astype(np.float32)
        else:
            w = self.predict(self._obs, deterministic=False)[0]
        window = self.raw_window(self._obs)
        obs, reward, terminated, truncated, info = self.env.step(w)
        self.buffer.add(window=window[None], action=self.normalize_actions(info["actions"])[None],
                        reward=np.array([reward]), next_window=self.raw_window(obs)[None],
                        terminated=np.array([float(terminated)]))
        self._obs = None if (terminated or truncated) else obs
        self.decisions += 1
        return info

    # updates ---------------------------------------------------------------------------------
    def update(self) -> dict[str, float]:
        c = self.c
        b = self.buffer.sample(c.batch_size, self.rng)
        s, s2 = b["window"], b["next_window"]
        sn, s2n = self._norm_window(s), self._norm_window(s2)
        with torch.no_grad():
            w2, _ = self._sample(s2)
            q_next = self.q_action_target(s2n, self.decode(s2, w2)).min(-1).values
            y = b["reward"] + c.gamma * (1 - b["terminated"]) * q_next
        qa_loss = F.mse_loss(self.q_action(sn, b["action"]), y[:, None].expand(-1, 2))
        self.opt_qa.zero_grad()
        qa_loss.backward()
        self.opt_qa.step()
        # distil Q^A into the noise space, over the whole noise box
        w = torch.rand(c.batch_size, self.noise_dim, generator=self.gen) * 2 - 1
        with torch.no_grad():
            target = self.q_action(sn, self.decode(s, w)).min(-1).values
        qw_loss = F.mse_loss(self.q_noise(sn, w), target[:, None].expand(-1, 2))
        self.opt_qw.zero_grad()
        qw_loss.backward()
        self.opt_qw.step()
        # actor and temperature
        w_pi, logp = self._sample(s)
        alpha = self.log_alpha.exp().detach()
        pi_loss = (alpha * logp - self.q_noise(sn, w_pi).min(-1).values).mean()
        self.opt_pi.zero_grad()
        pi_loss.backward()
        self.opt_pi.step()
        alpha_loss = -(self.log_alpha * (logp.detach() + c.target_entropy)).mean()
        self.opt_alpha.zero_grad()
        alpha_loss.backward()
        self.opt_alpha.step()
        with torch.no_grad():
            for p, tp in zip(self.q_action.parameters(), self.q_action_target.parameters()):
                tp.lerp_(p, c.tau)
        self.last_losses = {"q_action": qa_loss.item(), "q_noise": qw_loss.item(), "actor": pi_loss.item(),
                            "alpha": float(alpha)}
        return self.last_losses

    # checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue bit-for-bit: networks, optimizers, buffer, counters, RNG."""
        modules = {"q_action": self.q_action, "q_action_target": self.q_action_target, "q_noise": self.q_noise,
                   "actor": self.actor}
        opts = {"opt_qa": self.opt_qa, "opt_qw": self.opt_qw, "opt_pi": self.opt_pi, "opt_alpha": self.opt_alpha}
        return {**{k: m.state_dict() for k, m in modules.items()}, **{k: o.state_dict() for k, o in opts.items()},
                "log_std": self.log_std.detach().clone(), "log_alpha": self.log_alpha.detach().clone(),
                "buffer": {"data": self.buffer.data, "n": self.buffer.n, "i": self.buffer.i},
                "decisions": self.decisions, "rng": self.rng.bit_generator.state, "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        for k in ("q_action", "q_action_target", "q_noise", "actor", "opt_qa", "opt_qw", "opt_pi", "opt_alpha"):
            getattr(self, k).load_state_dict(state[k])
        with torch.no_grad():
            self.log_std.copy_(state["log_std"])
            self.log_alpha.copy_(state["log_alpha"])
        buf = state["buffer"]
        if buf["data"]["window"].shape != self.buffer.data["window"].shape:
            raise ValueError("the checkpoint's replay buffer has a different size or window; same config needed")
        self.buffer.data, self.buffer.n, self.buffer.i = buf["data"], int(buf["n"]), int(buf["i"])
        self.decisions = int(state["decisions"])
        self.rng.bit_generator.state = state["rng"]
        self.gen.set_state(state["gen"])
        self._obs = None

    def learn(self, decisions: int) -> None:
        """Act ``decisions`` times (warm-up with base noise first), updating ``utd`` times after each."""
        for _ in range(int(decisions)):
            warmup = self.decisions < self.c.learning_starts
            self._act_and_store(warmup)
            if not warmup and self.buffer.n >= self.c.batch_size:
                for _ in range(self.c.utd):
                    self.update()
