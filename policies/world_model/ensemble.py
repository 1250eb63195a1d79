"""MBPO's probabilistic dynamics ensemble over flat observations.

Each of ``E`` members maps normalized (obs, action) to a Gaussian over the normalized
(next_obs - obs, reward) and a termination logit. Members are trained on their own bootstrap
resample of the transitions; their disagreement (the spread of their mean next-state
predictions, in normalized units) measures where the model does not know the dynamics. With
``EnsembleConfig.frame_pose_dims`` set, inputs and the body's position change are object-centric
(``frames.PlanarFrame``); ``nll_beta`` > 0 is what makes a push-T model learn pushes at all.

    model = EnsembleDynamics(EnsembleConfig(obs_dim=5, action_dim=2))
    model.fit(transitions, steps=3000)            # {"obs", "action", "next_obs", "reward", "terminated"}
    p = model.predict(obs, action)                # p.next_obs (B, 5), p.reward (B,), p.disagreement (B,)
    model.save("runs/wm"); EnsembleDynamics.load("runs/wm")

Devices: ``fit(device=)`` trains anywhere and hands the model back on the CPU; ``to(device)`` puts it where it
predicts. ``predict`` takes numpy or tensors from anywhere and answers with tensors on the model's device
(``device``); ``predict_numpy`` is the host-array form (one copy to the device, one back). A ``"member"``
prediction draws its member and noise from a CPU generator, so one seed imagines the same on every device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint import load_checkpoint, save_checkpoint
from .configuration_world_model import EnsembleConfig
from .frames import PlanarFrame

TRANSITION_KEYS = ("obs", "action", "next_obs", "reward", "terminated")


class EnsembleLinear(nn.Module):
    """x (E, B, in) -> (E, B, out): ``E`` independent linear layers applied in one batched matmul."""

    def __init__(self, members: int, d_in: int, d_out: int):
        super().__init__()
        bound = 1.0 / math.sqrt(d_in)
        self.weight = nn.Parameter(torch.empty(members, d_in, d_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(members, 1, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


def wrap_angle(x: torch.Tensor) -> torch.Tensor:
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


@dataclass
class Prediction:
    """One model step for B samples: next_obs (B, obs_dim), reward (B,), terminated (B,) bool,
    disagreement (B,) (ensemble spread, normalized units), member_next_obs (E, B, obs_dim)."""

    next_obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    disagreement: torch.Tensor
    member_next_obs: torch.Tensor


class GaussianEnsemble(nn.Module):
    """The networks plus the normalization buffers (everything the checkpoint holds)."""

    def __init__(self, c: EnsembleConfig):
        super().__init__()
        self.config = c
        frame = planar_frame(c)
        d_in = frame.feature_dim(c.obs_dim, c.action_dim) if frame else c.obs_dim + c.action_dim
        d_in += c.obs_dim if c.use_prev_change else 0
        self.d_out = c.obs_dim + 1
        dims = [d_in, *c.hidden_dims]
        self.layers = nn.ModuleList(EnsembleLinear(c.num_members, a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.head = EnsembleLinear(c.num_members, dims[-1], 2 * self.d_out + 1)
        self.max_logvar = nn.Parameter(torch.full((self.d_out,), c.max_logvar))
        self.min_logvar = nn.Parameter(torch.full((self.d_out,), c.min_logvar))
        for name, dim in (("in_mean", d_in), ("in_std", d_in), ("out_mean", self.d_out), ("out_std", self.d_out)):
            self.register_buffer(name, torch.zeros(dim) if name.endswith("mean") else torch.ones(dim))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (E, B, in) normalized -> mean (E, B, out), logvar (E, B, out), termination logit (E, B)."""
        h = x
        for layer in self.layers:
            h = F.silu(layer(h))
        out = self.head(h)
        mean, logvar, term = out[..., :self.d_out], out[..., self.d_out:2 * self.d_out], out[..., -1]
        logvar = self.max_logvar - F.softplus(self.max_logvar - logvar)  # MBPO's soft bounds
        logvar = self.min_logvar + F.softplus(logvar - self.min_logvar)
        return mean, logvar, term


def planar_frame(c: EnsembleConfig) -> PlanarFrame | None:
    if not c.frame_pose_dims:
        return None
    return PlanarFrame(tuple(c.frame_pose_dims), tuple(c.frame_point_dims), c.frame_action_is_point)


def check_transitions(t: dict, obs_dim: int, action_dim: int, prev_obs: bool = False) -> dict[str, torch.Tensor]:
    """Validate a transition dict -> float32 tensors (obs, action, next_obs (N, D); reward, terminated (N,);
    with ``prev_obs``, also prev_obs (N, D): the observation one step before obs, obs itself at an
    episode's first step)."""
    keys = TRANSITION_KEYS + (("prev_obs",) if prev_obs else ())
    missing = [k for k in keys if k not in t]
    if missing:
        raise KeyError(f"transitions need {list(keys)}; missing {missing}")
    out = {k: torch.as_tensor(np.asarray(t[k]), dtype=torch.float32) for k in keys}
    n = out["obs"].shape[0]
    shapes = {"obs": (n, obs_dim), "next_obs": (n, obs_dim), "action": (n, action_dim), "reward": (n,),
              "terminated": (n,), **({"prev_obs": (n, obs_dim)} if prev_obs else {})}
    for k, s in shapes.items():
        if tuple(out[k].shape) != s:
            raise ValueError(f"transitions[{k!r}] has shape {tuple(out[k].shape)}, expected {s}")
        if not bool(torch.isfinite(out[k]).all()):
            raise ValueError(f"transitions[{k!r}] contains NaN or inf")
    if n < 2:
        raise ValueError(f"need at least 2 transitions to fit a model, got {n}")
    return out


class EnsembleDynamics:
    """Learned dynamics ``(obs (B, D), action (B, A)) -> Prediction``; see the module docstring."""

    kind = "ensemble_dynamics"
    config_class = EnsembleConfig

    def __init__(self, config: EnsembleConfig | None = None):
        self.config = config or EnsembleConfig()
        self.model = GaussianEnsemble(self.config)
        self.obs_dim, self.action_dim = self.config.obs_dim, self.config.action_dim
        self.frame = planar_frame(self.config)

    @property
    def device(self) -> torch.device:
        """Where the networks are, so where ``predict`` computes."""
        return self.model.in_mean.device

    def to(self, device: str | torch.device) -> "EnsembleDynamics":
        """Move the networks and normalization to ``device`` (in place); returns the model."""
        self.model.to(torch.device(device))
        return self

    # Inputs and targets ---------------------------------------------------------------------
    def _inputs(self, obs: torch.Tensor, action: torch.Tensor, prev_obs: torch.Tensor | None = None) -> torch.Tensor:
        """Raw (obs, action[, prev_obs]) -> the unnormalized network input."""
        x = self.frame.features(obs, action) if self.frame else torch.cat([obs, action], 1)
        if not self.config.use_prev_change:
            return x
        return torch.cat([x, self._delta(obs if prev_obs is None else prev_obs, obs, frame_obs=obs)], 1)

    def _delta(self, obs: torch.Tensor, next_obs: torch.Tensor, frame_obs: torch.Tensor | None = None) -> torch.Tensor:
        """next_obs - obs, angles wrapped, in the body frame (at ``frame_obs``, default obs) if any:
        the state-change target, and (from the previous observation) the last change as an input."""
        d = next_obs - obs
        if self.config.angle_dims:
            i = self.config.angle_dims
            d[:, i] = wrap_angle(d[:, i])
        return self.frame.to_body(obs if frame_obs is None else frame_obs, d) if self.frame else d

    def set_normalization(self, t: dict[str, torch.Tensor]) -> None:
        m = self.model
        x = self._inputs(t["obs"], t["action"], t.get("prev_obs"))
        y = torch.cat([self._delta(t["obs"], t["next_obs"]), t["reward"][:, None]], dim=1)
        m.in_mean.copy_(x.mean(0)), m.in_std.copy_(x.std(0).clamp_min(1e-6))
        m.out_mean.copy_(y.mean(0)), m.out_std.copy_(y.std(0).clamp_min(1e-6))

    # Training -------------------------------------------------------------------------------
    def fit(self, transitions: dict, steps: int = 2000, batch_size: int = 256, lr: float = 1e-3,
            weight_decay: float = 1e-5, holdout: float = 0.1, seed: int = 0,
            device: str | torch.device = "cpu") -> dict[str, float]:
        """Fit on ``transitions`` (see ``check_transitions``); each member draws minibatches from its
        own bootstrap resample. Returns {"train_nll", "holdout_mse"} (normalized next-state/reward MSE
        of the ensemble mean on the held-out fraction).

        ``device``: where the networks and the transitions train (a torch device: ``"cpu"``, ``"cuda"``,
        ``"cuda:N"``). The minibatch indices come from a CPU generator seeded with ``seed``, so every device
        draws the same minibatches; the fitted model is handed back on the CPU (``to`` moves it to predict
        elsewhere)."""
        if steps < 1 or batch_size < 1 or not 0 <= holdout < 1:
            raise ValueError(f"need steps >= 1, batch_size >= 1, 0 <= holdout < 1; got {steps}, {batch_size}, "
                             f"{holdout}")
        device = torch.device(device)
        t = check_transitions(transitions, self.obs_dim, self.action_dim, self.config.use_prev_change)
        gen = torch.Generator().manual_seed(seed)
        n = t["obs"].shape[0]
        perm = torch.randperm(n, generator=gen)
        n_hold = int(n * holdout) if n >= 20 else 0
        hold, train = perm[:n_hold], perm[n_hold:]
        self.set_normalization({k: v[train] for k, v in t.items()})
        m, E = self.model.to(device), self.config.num_members
        x, y = (v.to(device) for v in self._normalized_io({k: v.to(device) for k, v in t.items()}))
        terminated = t["terminated"].to(device)
        boot = train[torch.randint(len(train), (E, len(train)), generator=gen)]  # (E, N) bootstrap resamples
        opt = torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=weight_decay)
        m.train()
        losses = []
        for step in range(steps):
            idx = boot.gather(1, torch.randint(boot.shape[1], (E, batch_size), generator=gen)).to(device)  # (E, b)
            mean, logvar, term = m(x[idx])
            nll = ((mean - y[idx]) ** 2) * torch.exp(-logvar) + logvar
            if self.config.nll_beta:  # beta-NLL: weight by the (detached) variance ** beta
                nll = nll * torch.exp(self.config.nll_beta * logvar.detach())
            nll = nll.mean()
            bce = F.binary_cross_entropy_with_logits(term, terminated[idx])
            loss = nll + bce + 0.01 * (m.max_logvar.sum() - m.min_logvar.sum())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(nll.detach())  # kept on the device: no host round trip per step
        m.eval()
        out = {"train_nll": float(np.mean(torch.stack(losses[-100:]).cpu().numpy(), dtype=np.float64))}
        if n_hold:
            with torch.no_grad():
                mean, _, _ = m(x[hold.to(device)].expand(E, -1, -1))
            out["holdout_mse"] = float(((mean.mean(0) - y[hold.to(device)]) ** 2).mean())
        m.to("cpu")
        return out

    def _normalized_io(self, t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        m = self.model
        x = (self._inputs(t["obs"], t["action"], t.get("prev_obs")) - m.in_mean) / m.in_std
        y = torch.cat([self._delta(t["obs"], t["next_obs"]), t["reward"][:, None]], 1)
        return x, (y - m.out_mean) / m.out_std

    # Inference ------------------------------------------------------------------------------
    @torch.no_grad()
    def predict(self, obs, action, sample: str = "mean", generator: torch.Generator | None = None,
                prev_obs=None) -> Prediction:
        """obs (B, obs_dim), action (B, action_dim) raw units (numpy, or tensors on any device) -> Prediction,
        its tensors on the model's device (``device``).

        ``prev_obs`` (B, obs_dim): the observations one step before ``obs``, read by a model with
        ``use_prev_change``; None means each episode's first step (no change yet).

        ``sample``: ``"mean"`` averages the members' means (deterministic); ``"member"`` picks a
        random member per sample and draws from its Gaussian (MBPO's rollouts), both drawn by ``generator``
        where it is (default: the global CPU generator) and copied to the model's device."""
        if sample not in ("mean", "member"):
            raise ValueError(f"sample must be 'mean' or 'member', got {sample!r}")
        device = self.device
        obs = _checked(obs, self.obs_dim, "obs", device)
        action = _checked(action, self.action_dim, "action", device)
        if obs.shape[0] != action.shape[0]:
            raise ValueError(f"obs batch {obs.shape[0]} differs from action batch {action.shape[0]}")
        m, E, B = self.model, self.config.num_members, obs.shape[0]
        if prev_obs is not None:
            prev_obs = _checked(prev_obs, self.obs_dim, "prev_obs", device)
            if prev_obs.shape[0] != obs.shape[0]:
                raise ValueError(f"prev_obs batch {prev_obs.shape[0]} differs from obs batch {obs.shape[0]}")
        x = ((self._inputs(obs, action, prev_obs) - m.in_mean) / m.in_std).expand(E, -1, -1)
        mean, logvar, term = m(x)  # (E, B, D + 1), (E, B)
        disagreement = mean[..., :-1].std(0).mean(-1) if E > 1 else torch.zeros(B, device=device)
        if sample == "mean":
            y, p_term = mean.mean(0), torch.sigmoid(term).mean(0)
        else:
            drawn_on = generator.device if generator is not None else torch.device("cpu")
            k = torch.randint(E, (B,), generator=generator, device=drawn_on).to(device)
            ar = torch.arange(B, device=device)
            noise = torch.randn(B, mean.shape[-1], generator=generator, device=drawn_on).to(device)
            y = mean[k, ar] + noise * torch.exp(0.5 * logvar[k, ar])
            p_term = torch.sigmoid(term[k, ar])
        next_obs = self._step(obs, y)
        members = torch.stack([self._step(obs, mean[e]) for e in range(E)])
        return Prediction(next_obs, y[:, -1] * m.out_std[-1] + m.out_mean[-1], p_term > 0.5, disagreement, members)

    def predict_numpy(self, obs, action, sample: str = "mean", generator: torch.Generator | None = None,
                      prev_obs=None) -> dict[str, np.ndarray]:
        """``predict`` for host arrays (SB3's and the tasks' side): obs (B, obs_dim), action (B, action_dim)[,
        prev_obs (B, obs_dim)] -> {"next_obs" (B, obs_dim) float32, "reward" (B,) float32, "terminated" (B,) bool,
        "disagreement" (B,) float32} numpy. The inputs cross to the model's device side by side in one copy, and
        the answers come back in one."""
        parts = [_host(obs, self.obs_dim, "obs"), _host(action, self.action_dim, "action")]
        if prev_obs is not None:
            parts.append(_host(prev_obs, self.obs_dim, "prev_obs"))
        if len({len(x) for x in parts}) != 1:
            raise ValueError(f"obs, action and prev_obs batches differ: {[len(x) for x in parts]}")
        D, A = self.obs_dim, self.action_dim
        x = torch.from_numpy(np.concatenate(parts, 1)).to(self.device)
        p = self.predict(x[:, :D], x[:, D:D + A], sample=sample, generator=generator,
                         prev_obs=None if prev_obs is None else x[:, D + A:])
        out = torch.cat([p.next_obs, p.reward[:, None], p.terminated[:, None].float(), p.disagreement[:, None]],
                        1).cpu().numpy()
        return {"next_obs": out[:, :D].copy(), "reward": out[:, D].copy(), "terminated": out[:, D + 1] > 0.5,
                "disagreement": out[:, D + 2].copy()}

    def _step(self, obs: torch.Tensor, y_normalized: torch.Tensor) -> torch.Tensor:
        m = self.model
        delta = y_normalized[:, :-1] * m.out_std[:-1] + m.out_mean[:-1]
        nxt = obs + (self.frame.to_world(obs, delta) if self.frame else delta)
        if self.config.angle_dims:
            i = self.config.angle_dims
            nxt[:, i] = wrap_angle(nxt[:, i])
        return nxt

    # Checkpoints ----------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        n = sum(p.numel() for p in self.model.parameters())
        return save_checkpoint(directory, self.kind, self.config, self.model.state_dict(), {"num_parameters": n})

    @classmethod
    def load(cls, directory: str | Path) -> "EnsembleDynamics":
        kind, cfg, tensors, _ = load_checkpoint(directory)
        if kind != cls.kind:
            raise ValueError(f"{directory} holds a {kind!r} checkpoint, not {cls.kind!r}")
        model = cls(cls.config_class(**cfg))
        model.model.load_state_dict(tensors)
        return model


def _checked(x, dim: int, name: str, device: torch.device | None = None) -> torch.Tensor:
    """(B, dim) float32 tensor with finite values, checked where it is, then moved to ``device``."""
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x, dtype=torch.float32)
    if t.ndim != 2 or t.shape[1] != dim:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected (B, {dim})")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return t if device is None else t.to(device)


def _host(x, dim: int, name: str) -> np.ndarray:
    """(B, dim) float32 numpy with finite values (a tensor is copied to the host)."""
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    a = a.astype(np.float32, copy=False)
    if a.ndim != 2 or a.shape[1] != dim:
        raise ValueError(f"{name} has shape {a.shape}, expected (B, {dim})")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or inf")
    return a
