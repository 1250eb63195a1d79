"""Fixtures of the hardware tests: a simulated PX4 vehicle and driver on loopback, and policies with
non-trivial weights, normalization and initial state for the export tests."""

import socket

import pytest
import torch

from hardware.drivers.px4 import PX4Robot
from policies.diffusion import DiffusionConfig, DiffusionPolicy
from policies.energy import EnergyConfig, EnergyPolicy
from policies.foundation import FoundationConfig, FoundationPolicy
from policies.mlp import MLPConfig, MLPPolicy
from policies.steered import SteeredConfig, SteeredPolicy
from sims.vehicles import MavlinkVehicle


def make_mlp(seed: int = 0, **config) -> MLPPolicy:
    """An MLP actor with random weights and a far-from-identity normalization of the network's inputs (the
    observation, and the position integral with ``position_integral`` > 0)."""
    g = torch.Generator().manual_seed(seed)
    policy = MLPPolicy(MLPConfig(**config))
    n = policy.config.input_dim
    with torch.no_grad():
        for p in policy.model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        policy.model.obs_mean.copy_(torch.randn(n, generator=g) * 2.0)
        policy.model.obs_std.copy_(torch.rand(n, generator=g) * 3.0 + 0.05)
    return policy


def make_integrating_mlp(seed: int = 0, limit: float = 0.05, dt: float = 0.02) -> MLPPolicy:
    """A random MLP actor that integrates its position error (clip ``limit`` m s, period ``dt`` s), normalized as
    a trained one is: position error (m) and integral (m s) around 0 at their scales, so both move its actions."""
    policy = make_mlp(seed, position_integral=limit, integral_dt=dt)
    with torch.no_grad():
        policy.model.obs_mean[0:3] = 0.0
        policy.model.obs_std[0:3] = 0.1
        policy.model.obs_mean[-3:] = 0.0
        policy.model.obs_std[-3:] = limit
    return policy


def make_gru(seed: int = 0, **config) -> FoundationPolicy:
    """A foundation GRU with random weights and a random learned initial hidden state."""
    g = torch.Generator().manual_seed(seed)
    policy = FoundationPolicy(FoundationConfig(**config))
    with torch.no_grad():
        for p in policy.model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.4)
    return policy


CHUNK_STATS = {"obs": {"min": -torch.ones(5), "max": torch.full((5,), 2.0)},
         "action": {"min": torch.zeros(2), "max": torch.full((2,), 0.5)}}


def _perturb(module: torch.nn.Module, scale: float = 0.05) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn_like(p))


def make_diffusion_mlp(**overrides) -> DiffusionPolicy:
    """A diffusion policy with a residual-MLP denoiser (obs 5, action 2, horizon 8, 4 actions a chunk, DDIM 5
    steps), random EMA weights and a far-from-identity normalization: what C export takes."""
    torch.manual_seed(0)
    cfg = dict(obs_dim=5, action_dim=2, horizon=8, n_action_steps=4, denoiser="mlp", mlp_hidden=32, mlp_blocks=2,
               diffusion_step_embed_dim=16, num_inference_steps=5)
    policy = DiffusionPolicy(DiffusionConfig(**{**cfg, **overrides}))
    policy.set_normalization(CHUNK_STATS)
    _perturb(policy.inference_model)  # non-trivial weights in the EMA copy that inference uses
    return policy


def make_energy_mlp(**overrides) -> EnergyPolicy:
    """An energy policy with an MLP backbone (3 descent steps) and random weights, shaped as make_diffusion_mlp."""
    torch.manual_seed(0)
    cfg = dict(obs_dim=5, action_dim=2, horizon=8, n_action_steps=4, backbone="mlp", hidden_dims=[32, 32],
               n_steps=3)
    policy = EnergyPolicy(EnergyConfig(**{**cfg, **overrides}))
    policy.set_normalization(CHUNK_STATS)
    _perturb(policy.inference_model if hasattr(policy, "inference_model") else policy)
    return policy


def make_steered(base, stochastic: bool = False) -> SteeredPolicy:
    """A DSRL noise actor (one hidden layer of 16, noise bound 1.5) with random weights over ``base``."""
    torch.manual_seed(1)
    cfg = SteeredConfig(obs_dim=5, action_dim=2, n_obs_steps=base.n_obs_steps, noise_shape=list(base.noise_shape),
                        noise_bound=1.5, hidden_dims=[16], stochastic=stochastic)
    policy = SteeredPolicy(base, cfg)
    _perturb(policy.model, 0.3)
    return policy


@pytest.fixture
def mlp_factory():
    """``mlp_factory(seed, **MLPConfig fields)`` -> a random MLP policy with normalization."""
    return make_mlp


@pytest.fixture
def gru_factory():
    """``gru_factory(seed, **FoundationConfig fields)`` -> a random foundation GRU policy."""
    return make_gru


@pytest.fixture
def mlp_policy():
    return make_mlp()


@pytest.fixture
def integrating_mlp():
    """A random MLP actor with a position integral (clip 0.05 m s, dt 0.02 s): 22 observation floats."""
    return make_integrating_mlp()


@pytest.fixture
def gru_policy():
    return make_gru(input_activation="tanh", output_activation="tanh")


@pytest.fixture(scope="session")
def raptor():
    from policies.foundation import load_raptor

    return load_raptor()



def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    return free_udp_port()


@pytest.fixture
def vehicle():
    with MavlinkVehicle(initial_position=(0.5, -0.3, 1.2)) as v:
        yield v


@pytest.fixture
def px4(vehicle):
    robot = PX4Robot(connection=f"udpout:{vehicle.address}")
    robot.connect(timeout=3.0)
    yield robot
    robot.close()
