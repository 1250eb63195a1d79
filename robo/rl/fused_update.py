"""The pieces of robo's fused off-policy updates (``robo.rl.fast_off_policy``): SB3's networks run without module
calls, SAC's squashed Gaussian sample, and one Adam call over several optimizers.

On a CPU these small networks' time is mostly per-call overhead (the forward pass of a SAC gradient step measured
1.3 ms on this 2-core machine, its 26 matmuls about 0.35 ms of it), so these keep the Python calls per step few.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from stable_baselines3.common.policies import ContinuousCritic
from stable_baselines3.sac.policies import LOG_STD_MAX, LOG_STD_MIN
from stable_baselines3.sac.policies import Actor as SACActor
from stable_baselines3.td3.policies import Actor as TD3Actor
from torch import nn
from torch.optim.adam import adam

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
SQUASH_EPS = 1e-6  # SB3's SquashedDiagGaussianDistribution epsilon
ACTIVATIONS = {nn.ReLU: torch.relu, nn.Tanh: torch.tanh}


def squashed_sample(mean: torch.Tensor, log_std: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterized tanh-Gaussian action (B, A) and its log probability (B,), as SB3's
    ``SquashedDiagGaussianDistribution`` draws and scores it; mean, log_std (B, A)."""
    noise = torch.randn_like(mean)
    action = torch.tanh(mean + log_std.exp() * noise)
    log_prob = (-0.5 * noise.square() - log_std - LOG_SQRT_2PI).sum(-1)
    return action, log_prob - torch.log(1 - action.square() + SQUASH_EPS).sum(-1)


def mlp(layers: nn.Sequential, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
    """``layers(x)`` for SB3's Sequential of Linear layers and activations, without module calls (on a CPU their
    overhead is a large part of a 64-unit network's time). ``frozen``: with the Linear weights detached."""
    for layer in layers:
        if type(layer) is nn.Linear:
            w, b = layer.weight, layer.bias
            x = F.linear(x, w.detach(), b.detach()) if frozen else F.linear(x, w, b)
        else:
            x = ACTIVATIONS.get(type(layer), layer)(x)
    return x


def sac_distribution(actor: SACActor, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SB3's ``Actor.get_action_dist_params`` (no gSDE): mean and clamped log std (B, A) at obs (B, obs_dim)."""
    latent = mlp(actor.latent_pi, actor.extract_features(obs, actor.features_extractor))
    log_std = F.linear(latent, actor.log_std.weight, actor.log_std.bias).clamp(LOG_STD_MIN, LOG_STD_MAX)
    return F.linear(latent, actor.mu.weight, actor.mu.bias), log_std


def td3_action(actor: TD3Actor, obs: torch.Tensor) -> torch.Tensor:
    """SB3's TD3 ``Actor`` forward: the deterministic action (B, A) in [-1, 1] at obs (B, obs_dim)."""
    return mlp(actor.mu, actor.extract_features(obs, actor.features_extractor))


def q_values(critic: ContinuousCritic, obs: torch.Tensor, actions: torch.Tensor, frozen: bool = False,
             networks: int | None = None) -> list[torch.Tensor]:
    """The first ``networks`` (default: all) Q-values (B, 1) of SB3's ``critic`` at obs (B, obs_dim), actions (B, A).
    ``frozen``: with the weights detached, so gradients reach ``actions`` but not the critic."""
    x = torch.cat([critic.extract_features(obs, critic.features_extractor), actions], 1)
    return [mlp(q, x, frozen) for q in critic.q_networks[:networks]]


def check_plain_critic(critic: ContinuousCritic) -> None:
    """``q_values(frozen=True)`` detaches Linear weights only: refuse critics with other parameters."""
    other = [n for n, m in critic.named_modules() if type(m) is not nn.Linear
             and any(True for _ in m.parameters(recurse=False))]
    if other:
        raise ValueError(f"the fast algorithms need critics of Linear layers and activations; {other} have parameters")


class JointAdam:
    """One Adam update over the parameters of several ``torch.optim.Adam`` optimizers (SB3's actor, critic and
    entropy-coefficient optimizers share their hyperparameters): one fused call instead of one ``step()`` each.
    Each optimizer keeps its own state, so their ``state_dict``s save and load as before; parameters without a
    gradient are skipped, as ``Adam.step`` skips them. Optimizers of other kinds or settings step one by one."""

    KEYS = ("lr", "betas", "eps", "weight_decay", "maximize", "decoupled_weight_decay")

    def __init__(self, optimizers: list[torch.optim.Optimizer | None]):
        self.optimizers = [o for o in optimizers if o is not None]
        self.params = [p for o in self.optimizers for g in o.param_groups for p in g["params"]]
        self.joinable = all(type(o) is torch.optim.Adam and not g["amsgrad"] and not g["differentiable"]
                            for o in self.optimizers for g in o.param_groups)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        groups = [g for o in self.optimizers for g in o.param_groups]
        hyper = [tuple(g.get(k) for k in self.KEYS) for g in groups]
        if not self.joinable or any(h != hyper[0] for h in hyper):
            for o in self.optimizers:
                o.step()
            return
        params, grads, avgs, squares, steps = [], [], [], [], []
        for o in self.optimizers:
            for g in o.param_groups:
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    s = o.state[p]
                    if not s:  # Adam's lazy state, its step on the parameter's device for the fused kernel
                        s.update(step=torch.zeros((), device=p.device), exp_avg=torch.zeros_like(p),
                                 exp_avg_sq=torch.zeros_like(p))
                    elif s["step"].device != p.device:
                        s["step"] = s["step"].to(p.device, torch.float32)
                    params.append(p), grads.append(p.grad), avgs.append(s["exp_avg"])
                    squares.append(s["exp_avg_sq"]), steps.append(s["step"])
        if not params:
            return
        g = groups[0]
        fused = all(p.device.type in ("cpu", "cuda") and p.dtype == torch.float32 for p in params)
        adam(params, grads, avgs, squares, [], steps, foreach=not fused, fused=fused, amsgrad=False,
             beta1=g["betas"][0], beta2=g["betas"][1], lr=g["lr"], weight_decay=g["weight_decay"], eps=g["eps"],
             maximize=g["maximize"], decoupled_weight_decay=bool(g.get("decoupled_weight_decay", False)))
