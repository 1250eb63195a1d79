"""Critics with LayerNorm for stable-baselines3 SAC (as DSRL's and RLPD's critics).

A Q-network trained on a few thousand transitions extrapolates wildly to actions it never tried;
SAC's actor then climbs to them. For latent-noise steering those are noises far from what the base
policy was trained on, and the steered policy collapses. LayerNorm after each hidden layer bounds
the features, so Q stays near the values it has seen.
"""

from __future__ import annotations

from stable_baselines3.common.policies import ContinuousCritic
from stable_baselines3.sac.policies import SACPolicy
from torch import nn


def layer_norm_mlp(in_dim: int, hidden: list[int], activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """in_dim -> [Linear -> LayerNorm -> activation] * len(hidden) -> Linear -> (B, 1)."""
    layers, d = [], in_dim
    for h in hidden:
        layers += [nn.Linear(d, h), nn.LayerNorm(h), activation()]
        d = h
    return nn.Sequential(*layers, nn.Linear(d, 1))


class LayerNormCriticSACPolicy(SACPolicy):
    """SB3's SAC ``MlpPolicy`` whose critics (and target critics) are ``layer_norm_mlp``s; the actor
    is unchanged, so it exports like any SAC actor."""

    def make_critic(self, features_extractor=None) -> ContinuousCritic:
        critic = super().make_critic(features_extractor)
        first = critic.q_networks[0][0]
        assert isinstance(first, nn.Linear), "SB3's critic MLP starts with a Linear layer"
        for i in range(critic.n_critics):
            q = layer_norm_mlp(first.in_features, list(self.critic_kwargs["net_arch"]),
                               self.critic_kwargs["activation_fn"]).to(first.weight.device)
            setattr(critic, f"qf{i}", q)  # replaces the registered module
            critic.q_networks[i] = q
        return critic
