"""Asymmetric actor-critic as stable-baselines3 policy classes (no fork of SB3).

Observations are ``[actor_obs (actor_obs_dim), privileged (rest)]``: the critic reads all of
it, the actor only the first ``actor_obs_dim`` floats, so the trained actor is deployable.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, create_mlp
from stable_baselines3.sac.policies import SACPolicy
from stable_baselines3.td3.policies import TD3Policy
from torch import nn

from policies.mlp import INTEGRAL_DIM, MLPActor, MLPConfig, MLPPolicy


class ActorObservation(BaseFeaturesExtractor):
    """Features = the first ``actor_obs_dim`` observation entries (the deployable part)."""

    def __init__(self, observation_space: gym.spaces.Box, actor_obs_dim: int = 22):
        if actor_obs_dim > observation_space.shape[0]:
            raise ValueError(f"actor_obs_dim={actor_obs_dim} exceeds the observation size {observation_space.shape[0]}")
        super().__init__(observation_space, actor_obs_dim)
        self.actor_obs_dim = actor_obs_dim

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return observations[..., : self.actor_obs_dim]


class _AsymmetricOffPolicyMixin:
    """Give the actor an ``ActorObservation`` extractor; critics keep the full observation."""

    actor_obs_dim: int

    def make_actor(self, features_extractor=None):
        return super().make_actor(ActorObservation(self.observation_space, self.actor_obs_dim))


class AsymmetricTD3Policy(_AsymmetricOffPolicyMixin, TD3Policy):
    def __init__(self, *args, actor_obs_dim: int = 22, **kwargs):
        self.actor_obs_dim = actor_obs_dim
        kwargs["share_features_extractor"] = False
        super().__init__(*args, **kwargs)


class AsymmetricSACPolicy(_AsymmetricOffPolicyMixin, SACPolicy):
    def __init__(self, *args, actor_obs_dim: int = 22, **kwargs):
        self.actor_obs_dim = actor_obs_dim
        kwargs["share_features_extractor"] = False
        super().__init__(*args, **kwargs)


class AsymmetricMlpExtractor(nn.Module):
    """PPO latent networks: policy over the actor slice, value over the full observation."""

    def __init__(self, feature_dim: int, actor_obs_dim: int, net_arch: dict, activation_fn: type[nn.Module]):
        super().__init__()
        self.actor_obs_dim = actor_obs_dim
        pi, vf = net_arch.get("pi", [64, 64]), net_arch.get("vf", [64, 64])
        self.policy_net = nn.Sequential(*create_mlp(actor_obs_dim, -1, pi, activation_fn))
        self.value_net = nn.Sequential(*create_mlp(feature_dim, -1, vf, activation_fn))
        self.latent_dim_pi = pi[-1] if pi else actor_obs_dim
        self.latent_dim_vf = vf[-1] if vf else feature_dim

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return self.policy_net(features[..., : self.actor_obs_dim])

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return self.value_net(features)


class AsymmetricPPOPolicy(ActorCriticPolicy):
    def __init__(self, *args, actor_obs_dim: int = 22, **kwargs):
        self.actor_obs_dim = actor_obs_dim
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        arch = self.net_arch if isinstance(self.net_arch, dict) else {"pi": self.net_arch, "vf": self.net_arch}
        self.mlp_extractor = AsymmetricMlpExtractor(self.features_dim, self.actor_obs_dim, arch, self.activation_fn)


POLICY_CLASSES = {"td3": AsymmetricTD3Policy, "sac": AsymmetricSACPolicy, "ppo": AsymmetricPPOPolicy}


def _linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def export_actor(model, actor_obs_dim: int = 22, target: bool = False, actor: nn.Module | None = None,
                 position_integral: float = 0.0, integral_dt: float = 0.01) -> MLPPolicy:
    """The deterministic actor of a trained SB3 TD3/SAC/PPO model as a robo ``MLPPolicy``.

    TD3's ``mu`` and SAC's deterministic action end in tanh; PPO's action mean is clipped
    to [-1, 1], as ``model.predict(deterministic=True)`` does. ``target=True`` exports TD3's
    target actor instead: a Polyak average of the actor (rate ``tau``), steadier between updates.
    ``actor`` (TD3/SAC): export this module (a copy of ``model.actor``, e.g. an ``ActorAverage``'s) instead.

    ``actor_obs_dim`` is what the SB3 actor reads. An actor trained with ``task.position_integral`` = L > 0 (m s)
    reads the task's integral last (3 floats); pass ``position_integral=L`` and ``integral_dt`` = the task's dt (s):
    the policy then integrates its own position error and reads ``actor_obs_dim - 3`` floats (robo's 22 without
    an action history), as the real robot, the twin and the C export give it.
    """
    p = model.policy
    if target and not isinstance(p, TD3Policy):
        raise ValueError(f"only TD3 has a target actor to export, not {type(p).__name__}")
    if actor is not None and not isinstance(p, (TD3Policy, SACPolicy)):
        raise ValueError(f"only TD3 and SAC actors can be exported from a copy, not {type(p).__name__}'s")
    if isinstance(p, TD3Policy):
        layers = _linears(actor.mu if actor is not None else (p.actor_target if target else p.actor).mu)
    elif isinstance(p, SACPolicy):
        actor = p.actor if actor is None else actor
        layers = _linears(actor.latent_pi) + [actor.mu]
    elif isinstance(p, ActorCriticPolicy):
        layers = _linears(p.mlp_extractor.policy_net) + [p.action_net]
    else:
        raise TypeError(f"cannot export the actor of {type(p).__name__}")
    act = type(p.activation_fn()).__name__.lower() if hasattr(p, "activation_fn") else "relu"
    if layers[0].in_features != actor_obs_dim:
        raise ValueError(f"the actor reads {layers[0].in_features} inputs, expected actor_obs_dim={actor_obs_dim}")
    config = MLPConfig(obs_dim=actor_obs_dim - (INTEGRAL_DIM if position_integral > 0 else 0),
                       action_dim=layers[-1].out_features, hidden_dims=[layer.out_features for layer in layers[:-1]],
                       activation=act, squash="clip" if isinstance(p, ActorCriticPolicy) else "tanh",
                       position_integral=float(position_integral), integral_dt=float(integral_dt))
    with torch.random.fork_rng(devices=[]):  # the layers' throwaway init must not move the RNG SB3 trains with
        actor = MLPActor(config)
    for dst, src in zip(_linears(actor.net), layers):
        dst.weight.data.copy_(src.weight.data)
        dst.bias.data.copy_(src.bias.data)
    return MLPPolicy(config, actor)
