"""SAC for a population of independent policies in one process: ``N`` members, each with its own actor, twin
critics, targets, entropy coefficient, optimizer state, replay and envs, updated together by one batched call per
layer (``torch.baddbmm`` over the stacked weights) and one Adam call.

The members do not share anything that learns: the population's loss is the sum of the members' losses, so each
member's gradient is its own loss's, and Adam (elementwise, no gradient clipping) moves each member as its own
optimizer would. Member ``m``'s envs are rows ``m * E .. (m + 1) * E - 1`` of one batched task.

The update is FastSAC's (``robo.rl.fast_off_policy``, SB3's SAC without per-call overhead) written for stacked
weights: SB3's MLPs (``net_arch`` pi and qf, ReLU), the squashed Gaussian actor (log std clamped to [-20, 2]),
twin critics with Polyak targets every gradient step, the entropy coefficient learned toward ``-action_dim``
from 1, the actor's loss against the critics of the start of the gradient step, a linear learning-rate decay to 0
at ``total_steps``, uniform random actions for the first ``learning_starts`` env steps of each member, and
``gradient_steps`` updates after each vectorized env step. Layers are initialized as ``torch.nn.Linear`` is
(uniform within 1/sqrt(fan in)), from each member's own seed.

Shapes: observations (N, E, obs_dim) (the actor reads the first ``actor_obs_dim`` floats), actions (N, E, A) in
[-1, 1], rewards and flags (N, E).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from policies.mlp import INTEGRAL_DIM, MLPActor, MLPConfig, MLPPolicy
from robo.rl.fused_update import SQUASH_EPS, LOG_SQRT_2PI
from stable_baselines3.sac.policies import LOG_STD_MAX, LOG_STD_MIN

StackedLayers = list[tuple[torch.Tensor, torch.Tensor]]
"""An MLP for every member: per Linear layer, weight (N, in, out) and bias (N, 1, out); ReLU between layers."""


@dataclass
class PopulationSACConfig:
    """SAC's settings, as ``configs/algo/sac.yaml`` names them (``kwargs``), for every member."""

    obs_dim: int                      # what the critics read: the task's observation
    actor_obs_dim: int                # its first floats, what the actor reads
    action_dim: int = 4
    pi: list[int] = field(default_factory=lambda: [64, 64])
    qf: list[int] = field(default_factory=lambda: [64, 64])
    learning_rate: float = 1e-3
    lr_schedule: str = "linear"       # constant | linear (to 0 at total_steps)
    buffer_size: int = 1_000_000      # transitions per member
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    learning_starts: int = 1000       # env steps per member
    gradient_steps: int = 4
    hover_action: float | list[float] | None = None  # the actor's output starts here (bias atanh), as init_at_hover
                                                      # does: one for all members, or one each

    def __post_init__(self):
        if self.lr_schedule not in ("constant", "linear"):
            raise ValueError(f"algo.lr_schedule={self.lr_schedule!r}; choose 'constant' or 'linear'")


def stacked_linear(sizes: list[int], generators: list[torch.Generator]) -> StackedLayers:
    """Layers ``sizes[0] -> ... -> sizes[-1]`` for each member, initialized as ``torch.nn.Linear`` (weights and
    biases uniform in +-1/sqrt(fan in)) from the member's generator."""
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / math.sqrt(fan_in)
        w = torch.stack([(torch.rand(fan_in, fan_out, generator=g) * 2 - 1) * bound for g in generators])
        b = torch.stack([(torch.rand(1, fan_out, generator=g) * 2 - 1) * bound for g in generators])
        layers.append((w.requires_grad_(), b.requires_grad_()))
    return layers


def run_stacked(layers: StackedLayers, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
    """The members' MLPs at x (N, B, in) -> (N, B, out): ReLU after every layer but the last. ``frozen``: the
    weights detached (gradients reach x only)."""
    last = len(layers) - 1
    for i, (w, b) in enumerate(layers):
        x = torch.baddbmm(b.detach(), x, w.detach()) if frozen else torch.baddbmm(b, x, w)
        if i < last:
            x = torch.relu_(x)  # in place: baddbmm's backward does not need its output (a tenth faster at N = 64)
    return x


def _params(layers: StackedLayers) -> list[torch.Tensor]:
    return [p for layer in layers for p in layer]


class PopulationSAC:
    """``n`` SAC learners; ``seeds`` (n,) give each member's initial weights and its sampling noise."""

    def __init__(self, config: PopulationSACConfig, seeds: list[int], device: str | torch.device = "cpu"):
        self.config, self.n, self.device = config, len(seeds), torch.device(device)
        c, gens = config, [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.actor = stacked_linear([c.actor_obs_dim, *c.pi], gens)
        self.head = stacked_linear([c.pi[-1], 2 * c.action_dim], gens)[0]  # mu, then log std (SB3's two Linear)
        if c.hover_action is not None:
            hover = torch.as_tensor(c.hover_action, dtype=torch.float32).clamp(-0.999, 0.999).expand(self.n)
            with torch.no_grad():
                self.head[1][..., :c.action_dim] = torch.atanh(hover)[:, None, None]
        # the twin critics of every member stacked as 2n: critic k of member m is row k * n + m
        q_gens = [g for _ in range(2) for g in gens]
        self.critics = stacked_linear([c.obs_dim + c.action_dim, *c.qf, 1], q_gens[:self.n])
        second = stacked_linear([c.obs_dim + c.action_dim, *c.qf, 1], q_gens[self.n:])
        self.critics = [(torch.cat([w1, w2]).detach().requires_grad_(), torch.cat([b1, b2]).detach().requires_grad_())
                        for (w1, b1), (w2, b2) in zip(self.critics, second)]
        self.targets = [(w.detach().clone(), b.detach().clone()) for w, b in self.critics]
        self.log_ent_coef = torch.zeros(self.n, requires_grad=True)
        self.target_entropy = -float(c.action_dim)
        self._to(self.device)
        self.optimizer = torch.optim.Adam(self.parameters(), lr=c.learning_rate)
        self.noise = torch.Generator(device=self.device).manual_seed(int(seeds[0]) * 7919 + self.n)
        self.updates = 0

    def _to(self, device: torch.device) -> None:
        move = lambda t: t.detach().to(device).requires_grad_(t.requires_grad)  # noqa: E731
        self.actor = [(move(w), move(b)) for w, b in self.actor]
        self.head = (move(self.head[0]), move(self.head[1]))
        self.critics = [(move(w), move(b)) for w, b in self.critics]
        self.targets = [(w.to(device), b.to(device)) for w, b in self.targets]
        self.log_ent_coef = move(self.log_ent_coef)

    def parameters(self) -> list[torch.Tensor]:
        return [*_params(self.actor), *self.head, *_params(self.critics), self.log_ent_coef]

    # Acting ------------------------------------------------------------------------------------------------
    def _mean_log_std(self, obs: torch.Tensor, members: slice = slice(None)) -> tuple[torch.Tensor, torch.Tensor]:
        actor = [(w[members], b[members]) for w, b in self.actor]
        latent = torch.relu(run_stacked(actor, obs[..., :self.config.actor_obs_dim]))
        out = torch.baddbmm(self.head[1][members], latent, self.head[0][members])
        a = self.config.action_dim
        return out[..., :a], out[..., a:].clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Exploring actions (N, B, A) and their log probabilities (N, B, 1) at obs (N, B, obs_dim)."""
        mean, log_std = self._mean_log_std(obs)
        noise = torch.randn(mean.shape, generator=self.noise, device=mean.device)
        action = torch.tanh(mean + log_std.exp() * noise)
        log_prob = (-0.5 * noise.square() - log_std - LOG_SQRT_2PI).sum(-1, keepdim=True)
        return action, log_prob - torch.log(1 - action.square() + SQUASH_EPS).sum(-1, keepdim=True)

    @torch.no_grad()
    def deterministic(self, obs: torch.Tensor, members: slice = slice(None)) -> torch.Tensor:
        """The deployed actions tanh(mean) (k, B, A) of the ``members`` (k of them) at obs (k, B, obs_dim)."""
        return torch.tanh(self._mean_log_std(obs, members)[0])

    # Learning ----------------------------------------------------------------------------------------------
    def _min_q(self, layers: StackedLayers, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """min over the twin critics (N, B, 1) at critic inputs x (N, B, obs_dim + A)."""
        q = run_stacked(layers, torch.cat([x, x]), frozen)
        return torch.min(q[:self.n], q[self.n:])

    def loss(self, obs, actions, rewards, next_obs, terminated) -> tuple[torch.Tensor, torch.Tensor]:
        """(the population's loss, stats (N, 4): critic loss, actor loss, entropy coefficient, its loss) of one
        minibatch per member: obs, next_obs (N, B, obs_dim), actions (N, B, A), rewards, terminated (N, B, 1)."""
        c = self.config
        pi, log_prob = self.sample(obs)
        ent_coef = self.log_ent_coef.detach().exp()[:, None, None]
        ent_coef_loss = -(self.log_ent_coef[:, None, None] * (log_prob.detach() + self.target_entropy)).mean((1, 2))
        with torch.no_grad():
            next_pi, next_log_prob = self.sample(next_obs)
            next_q = self._min_q(self.targets, torch.cat([next_obs, next_pi], -1))
            target = rewards + (1 - terminated) * c.gamma * (next_q - ent_coef * next_log_prob)
        q = run_stacked(self.critics, torch.cat([torch.cat([obs, actions], -1)] * 2))
        critic_loss = 0.5 * (q - torch.cat([target, target])).square().mean((1, 2)).reshape(2, self.n).sum(0)
        actor_loss = (ent_coef * log_prob - self._min_q(self.critics, torch.cat([obs, pi], -1), frozen=True)).mean((1, 2))
        stats = torch.stack([critic_loss, actor_loss, ent_coef.flatten(), ent_coef_loss], 1)
        return (critic_loss + actor_loss + ent_coef_loss).sum(), stats.detach()

    def train(self, batches: tuple[torch.Tensor, ...], progress_remaining: float) -> torch.Tensor:
        """One gradient step per minibatch in ``batches`` (each tensor (G, N, B, ...), ``PopulationReplay.sample``);
        the learning rate at ``progress_remaining`` (1 -> 0) of the run. Returns the stats (N, 4), mean over G."""
        c = self.config
        lr = c.learning_rate * (progress_remaining if c.lr_schedule == "linear" else 1.0)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        stats = []
        critic, target = _params(self.critics), _params(self.targets)
        for i in range(batches[0].shape[0]):
            loss, s = self.loss(*(x[i] for x in batches))
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            with torch.no_grad():
                torch._foreach_lerp_(target, critic, c.tau)
            stats.append(s)
        self.updates += len(stats)
        return torch.stack(stats).mean(0)

    # Export and checkpoints --------------------------------------------------------------------------------
    def member_policy(self, m: int, position_integral: float = 0.0, integral_dt: float = 0.01) -> MLPPolicy:
        """Member ``m``'s deterministic actor as robo's ``MLPPolicy`` (what ``export_actor`` makes of an SB3 SAC):
        tanh of the mean; with ``position_integral`` > 0 it keeps the task's integral itself and reads
        ``actor_obs_dim - 3`` floats."""
        c = self.config
        config = MLPConfig(obs_dim=c.actor_obs_dim - (INTEGRAL_DIM if position_integral > 0 else 0),
                           action_dim=c.action_dim, hidden_dims=list(c.pi), activation="relu", squash="tanh",
                           position_integral=float(position_integral), integral_dt=float(integral_dt))
        with torch.random.fork_rng(devices=[]):
            actor = MLPActor(config)
        linears = [x for x in actor.net.modules() if isinstance(x, torch.nn.Linear)]
        sources = [(w[m], b[m, 0]) for w, b in self.actor] + [(self.head[0][m, :, :c.action_dim],
                                                              self.head[1][m, 0, :c.action_dim])]
        with torch.no_grad():
            for dst, (w, b) in zip(linears, sources):
                dst.weight.copy_(w.T)
                dst.bias.copy_(b)
        return MLPPolicy(config, actor)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every tensor that learns or steers learning: weights, targets, entropy coefficients, Adam's moments."""
        out = {}
        for name, layers in (("actor", self.actor), ("critic", self.critics), ("target", self.targets)):
            for i, (w, b) in enumerate(layers):
                out[f"{name}.{i}.weight"], out[f"{name}.{i}.bias"] = w.detach(), b.detach()
        out["head.weight"], out["head.bias"] = self.head[0].detach(), self.head[1].detach()
        out["log_ent_coef"] = self.log_ent_coef.detach()
        for i, p in enumerate(self.parameters()):
            s = self.optimizer.state.get(p)
            if s:
                out[f"adam.{i}.exp_avg"], out[f"adam.{i}.exp_avg_sq"] = s["exp_avg"], s["exp_avg_sq"]
                out[f"adam.{i}.step"] = s["step"].reshape(1).float()
        out["noise"] = self.noise.get_state()
        out["updates"] = torch.tensor([self.updates], dtype=torch.float64)
        return {k: v.contiguous().cpu() for k, v in out.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, layers in (("actor", self.actor), ("critic", self.critics), ("target", self.targets)):
                for i, (w, b) in enumerate(layers):
                    w.copy_(state[f"{name}.{i}.weight"]), b.copy_(state[f"{name}.{i}.bias"])
            self.head[0].copy_(state["head.weight"]), self.head[1].copy_(state["head.bias"])
            self.log_ent_coef.copy_(state["log_ent_coef"])
        for i, p in enumerate(self.parameters()):
            if f"adam.{i}.exp_avg" in state:
                self.optimizer.state[p] = {"exp_avg": state[f"adam.{i}.exp_avg"].to(self.device).clone(),
                                           "exp_avg_sq": state[f"adam.{i}.exp_avg_sq"].to(self.device).clone(),
                                           "step": state[f"adam.{i}.step"].reshape(()).clone()}
        self.noise.set_state(state["noise"])
        self.updates = int(state["updates"].item())


class PopulationReplay:
    """Each member's replay, preallocated: ``capacity`` transitions per member, filled row by row (all members
    together, ``E`` transitions each per env step), the oldest replaced first."""

    def __init__(self, n: int, capacity: int, obs_dim: int, action_dim: int, device: str | torch.device = "cpu"):
        f = dict(dtype=torch.float32, device=device)
        self.n, self.capacity, self.pos, self.full = n, int(capacity), 0, False
        self.obs = torch.zeros(n, self.capacity, obs_dim, **f)
        self.next_obs = torch.zeros(n, self.capacity, obs_dim, **f)
        self.actions = torch.zeros(n, self.capacity, action_dim, **f)
        self.rewards = torch.zeros(n, self.capacity, 1, **f)
        self.terminated = torch.zeros(n, self.capacity, 1, **f)

    @property
    def size(self) -> int:
        return self.capacity if self.full else self.pos

    def add(self, obs, next_obs, actions, rewards, terminated) -> None:
        """One env step of every member: obs, next_obs (N, E, obs_dim), actions (N, E, A), rewards, terminated
        (N, E) (a terminal transition's target does not bootstrap; a time limit's does)."""
        e = obs.shape[1]
        rows = (torch.arange(e) + self.pos) % self.capacity
        self.obs[:, rows], self.next_obs[:, rows], self.actions[:, rows] = obs, next_obs, actions
        self.rewards[:, rows, 0], self.terminated[:, rows, 0] = rewards.float(), terminated.float()
        self.full = self.full or self.pos + e >= self.capacity
        self.pos = (self.pos + e) % self.capacity

    def sample(self, gradient_steps: int, batch_size: int, generator: torch.Generator | None = None) -> tuple:
        """``gradient_steps`` minibatches of ``batch_size`` per member, uniform over its filled rows, in one
        gather: (obs, actions, rewards, next_obs, terminated), each (G, N, B, ...)."""
        idx = torch.randint(0, self.size, (gradient_steps, self.n, batch_size), generator=generator,
                            device=self.obs.device)
        member = torch.arange(self.n, device=self.obs.device)[None, :, None]
        return tuple(x[member, idx] for x in (self.obs, self.actions, self.rewards, self.next_obs, self.terminated))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The filled rows (for resume), oldest first."""
        order = (torch.arange(self.size) + (self.pos if self.full else 0)) % self.capacity
        return {name: getattr(self, name)[:, order].contiguous().cpu()
                for name in ("obs", "next_obs", "actions", "rewards", "terminated")}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        rows = state["obs"].shape[1]
        if rows > self.capacity:
            raise ValueError(f"the saved replay holds {rows} rows per member, more than buffer_size={self.capacity}")
        for name in ("obs", "next_obs", "actions", "rewards", "terminated"):
            getattr(self, name)[:, :rows] = state[name].to(self.obs.device)
        self.pos, self.full = rows % self.capacity, rows == self.capacity
