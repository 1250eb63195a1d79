"""The pieces of robo's fused off-policy updates (``robo.rl.fast_off_policy``): SB3's networks run without module
calls, SAC's squashed Gaussian sample, and one Adam call over several optimizers.

On a CPU these small networks' time is mostly per-call overhead (the forward pass of a SAC gradient step measured
1.3 ms on this 2-core machine, its 26 matmuls about 0.35 ms of it), so these keep the Python calls per step few.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from stable_baselines3.common.policies import BaseModel, ContinuousCritic
from stable_baselines3.sac.policies import LOG_STD_MAX, LOG_STD_MIN, SACPolicy
from stable_baselines3.td3.policies import TD3Policy
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


Layers = list[tuple[torch.Tensor, torch.Tensor, Callable | None]]
"""An MLP as (weight (out, in), bias (out,), activation after it or None) per Linear layer."""


def layers_of(seq: nn.Sequential) -> Layers:
    """SB3's MLP ``seq`` (``create_mlp``: Linear layers, each followed by at most one ReLU or Tanh) as ``Layers``;
    the tensors are the module's own parameters."""
    layers: Layers = []
    for m in seq:
        if type(m) is nn.Linear and m.bias is not None:
            layers.append((m.weight, m.bias, None))
        elif type(m) in ACTIVATIONS and layers and layers[-1][2] is None:
            layers[-1] = (layers[-1][0], layers[-1][1], ACTIVATIONS[type(m)])
        else:
            raise ValueError(f"the fast algorithms run MLPs of biased Linear layers and ReLU / Tanh, not {seq}")
    return layers


def run(layers: Layers, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
    """The MLP ``layers`` at x (B, in) -> (B, out). ``frozen``: with its weights detached (gradients reach x only)."""
    for w, b, act in layers:
        x = F.linear(x, w.detach(), b.detach()) if frozen else F.linear(x, w, b)
        if act is not None:
            x = act(x)
    return x


@dataclass
class Networks:
    """SB3's networks of one ``train`` call as ``Layers``: ``actor`` (SAC: ``latent_pi``, then the ``mu`` and
    ``log_std`` heads; TD3: ``mu``, ending in tanh), ``critics`` and ``targets`` (one per Q-network), and TD3's
    ``actor_target``. Building them is cheap; they hold the parameters themselves, not copies."""

    actor: Layers
    critics: list[Layers]
    targets: list[Layers]
    heads: tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
    actor_target: Layers | None = None

    @classmethod
    def of(cls, policy: SACPolicy | TD3Policy, actor_only: bool = False) -> Networks:
        """``policy``'s networks (``actor_only``: the actor's, for rollouts; the other fields empty)."""
        critics = [] if actor_only else [layers_of(q) for q in policy.critic.q_networks]
        targets = [] if actor_only else [layers_of(q) for q in policy.critic_target.q_networks]
        if isinstance(policy, SACPolicy):
            a = policy.actor
            heads = ((a.mu.weight, a.mu.bias), (a.log_std.weight, a.log_std.bias))
            return cls(layers_of(a.latent_pi), critics, targets, heads=heads)
        target = None if actor_only else layers_of(policy.actor_target.mu)
        return cls(layers_of(policy.actor.mu), critics, targets, actor_target=target)


def sac_sample(nets: Networks, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SAC's exploring action (B, A) and its log probability (B,) from the actor's features (B, F) (SB3's
    ``Actor.action_log_prob``, no gSDE)."""
    latent = run(nets.actor, features)
    (mu_w, mu_b), (std_w, std_b) = nets.heads
    return squashed_sample(F.linear(latent, mu_w, mu_b), F.linear(latent, std_w, std_b).clamp(LOG_STD_MIN, LOG_STD_MAX))


def min_q(critics: list[Layers], features: torch.Tensor, actions: torch.Tensor, frozen: bool = False) -> torch.Tensor:
    """The smallest Q-value (B, 1) of ``critics`` at critic features (B, F) and actions (B, A)."""
    x = torch.cat([features, actions], 1)
    q = run(critics[0], x, frozen)
    for c in critics[1:]:
        q = torch.min(q, run(c, x, frozen))
    return q


def features(model: BaseModel, obs: torch.Tensor) -> torch.Tensor:
    """``model``'s features extractor at obs (SB3's ``extract_features``: the actor's first ``actor_obs_dim``
    floats under robo's asymmetric policies, the whole observation for critics)."""
    return model.extract_features(obs, model.features_extractor)


def check_plain_critic(critic: ContinuousCritic) -> None:
    """A frozen critic detaches its Linear weights only: refuse critics with other parameters."""
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
