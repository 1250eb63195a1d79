"""The batched quadrotor task: references, resets, reward and termination over B envs.

Both gymnasium front ends (``QuadrotorEnv`` for one env, ``QuadrotorVectorEnv`` for B)
are thin layers over this class, so single and batched use share one implementation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from sims.quadrotor.batched import BatchedQuadrotorSim, check_action
from sims.quadrotor.dynamics import MOTOR, OMEGA, POS, QUAT, STATE_DIM, VEL, ParamsBatch
from sims.quadrotor.rotations import random_quat_within

from .config import QuadrotorTaskConfig, RewardConfig
from .observation import OBS_DIM, PRIVILEGED_DIM, observe, privileged_observation

ParamSampler = Callable[[int, np.random.Generator], ParamsBatch]


@dataclass
class StepResult:
    """One batched step. Shapes: obs (B, 22), reward/terminated/truncated (B,)."""

    obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor


def _uniform_ball(n: int, radius: float, rng: np.random.Generator) -> np.ndarray:
    d = rng.normal(size=(n, 3))
    d /= np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
    return d * radius * rng.uniform(size=(n, 1)) ** (1.0 / 3.0)


def _figure_eight(A: torch.Tensor | float, w: torch.Tensor | float,
                  wt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Offset (B, 3) from the centre, m, and velocity (B, 3), m/s, of the lemniscate
    ``x = A sin(wt), y = A/2 sin(2wt)`` at phases ``wt`` (B,) rad; A in m, w in rad/s."""
    zero = torch.zeros_like(wt)
    pos = torch.stack([A * torch.sin(wt), 0.5 * A * torch.sin(2 * wt), zero], -1)
    vel = torch.stack([A * w * torch.cos(wt), A * w * torch.cos(2 * wt), zero], -1)
    return pos, vel


def _figure_eight_derivatives(A: torch.Tensor | float, w: torch.Tensor | float,
                              wt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Acceleration (B, 3), m/s^2, and jerk (B, 3), m/s^3, of ``_figure_eight`` at phases ``wt`` (B,)."""
    zero = torch.zeros_like(wt)
    acc = torch.stack([-A * w ** 2 * torch.sin(wt), -2 * A * w ** 2 * torch.sin(2 * wt), zero], -1)
    jerk = torch.stack([-A * w ** 3 * torch.cos(wt), -4 * A * w ** 3 * torch.cos(2 * wt), zero], -1)
    return acc, jerk


def quadrotor_reward(e_p: torch.Tensor, q_w: torch.Tensor, e_v: torch.Tensor, w: torch.Tensor,
                     action: torch.Tensor, hover_action: torch.Tensor, r: RewardConfig,
                     previous_action: torch.Tensor | None = None) -> torch.Tensor:
    """The task's per-step reward (see ``RewardConfig``) before termination.

    e_p, e_v, w: (B, 3) position/velocity errors (world) and body rates; q_w: (B,) quaternion w;
    action, previous_action: (B, 4) in [-1, 1] (the action-rate term is 0 without a previous action);
    hover_action: (B,) hover command in action units. Returns (B,).
    """
    cost = (r.position * (e_p * e_p).sum(-1) + r.position_abs * e_p.norm(dim=-1) + r.orientation * (1 - q_w ** 2)
            + r.velocity * (e_v * e_v).sum(-1) + r.angular_velocity * (w * w).sum(-1)
            + r.action * ((action - hover_action[:, None]) ** 2).sum(-1))
    if previous_action is not None:
        cost = cost + r.action_rate * ((action - previous_action) ** 2).sum(-1)
    return r.constant - r.scale * cost


class BatchedQuadrotorTask:
    """B quadrotors flying one task.

    Args:
        config: the task.
        params: per-env physical parameters (batch size B).
        param_sampler: optional ``(n, rng) -> ParamsBatch``; when given, every reset draws
            fresh parameters for the environments being reset (domain randomization).
        privileged: append ``privileged_observation`` (B, 14) to every observation, for
            asymmetric actor-critic training (the actor reads only the first 22 floats).
        step_backend: the simulator's RK4 step, ``"torch"``, ``"c"`` or ``"compiled"`` (see ``BatchedQuadrotorSim``).
        device: where the parameters, states, references, rewards and episode counters live (default: the
            device of ``params``). Steps never leave it; a reset draws its noise on the host with the task's
            numpy generator (so one seed gives the same episodes on every device) and copies it over once.
    """

    def __init__(self, config: QuadrotorTaskConfig, params: ParamsBatch, param_sampler: ParamSampler | None = None,
                 privileged: bool = False, step_backend: str = "torch", device: str | torch.device | None = None):
        self.config = config
        self.privileged = privileged
        self.sim = BatchedQuadrotorSim(params, step_backend, device)
        params = self.sim.params
        self.param_sampler = param_sampler
        B, dt = params.batch_size, params.dt
        f = dict(dtype=params.mass.dtype, device=params.mass.device)
        self.device = params.mass.device
        i = dict(dtype=torch.long, device=self.device)
        self.max_steps = int(round(config.episode_seconds / dt))
        self.steps = torch.zeros(B, **i)
        self.origin = torch.tensor(config.hover_position, **f).expand(B, 3).clone()  # (B, 3) hover point / waypoint
        # per-episode figure-eight shapes (config.figure_eight_randomization): amplitude (m), rate (rad/s), phase (rad)
        self.amplitude = torch.full((B,), config.figure_eight_amplitude, **f)
        self.omega = torch.full((B,), 2 * math.pi / config.figure_eight_period, **f)
        self.phase = torch.zeros(B, **f)
        self.previous_action = torch.zeros(B, 4, **f)  # (B, 4) what the observation reports, see previous_action_mode
        # config.previous_action resolved: "clipped_hover" or "raw_motor_state" ("auto" is clipped_hover here; a
        # flight of a known policy may set the policy's own for its duration, see robo.evaluate.rollout)
        self.previous_action_mode = "clipped_hover" if config.previous_action == "auto" else config.previous_action
        self.action_history = torch.zeros(B, config.action_history, 4, **f)  # older actions, newest first
        self.position_integral = torch.zeros(B, 3, **f)  # (B, 3) m s, sum of dt (p - p_ref) of past steps, clipped
        self.levels = torch.full((B,), -1, **i)  # curriculum level of each env, -1: none
        # this episode's push (config.push): world-frame force (B, 3) N from step push_start (B,) (-1: none)
        self.push_force = torch.zeros(B, 3, **f)
        self.push_start = torch.full((B,), -1, **i)
        self.push_steps = max(1, int(round(config.push.duration / dt)))
        self.rng = np.random.default_rng()

    @property
    def obs_dim(self) -> int:
        """22 + 4 * action_history (+ 3 with a position integral, + 14 privileged features when ``privileged``)."""
        return self.config.actor_obs_dim + (PRIVILEGED_DIM if self.privileged else 0)

    @property
    def num_envs(self) -> int:
        return self.sim.batch_size

    @property
    def dt(self) -> float:
        return self.sim.dt

    @property
    def state(self) -> torch.Tensor:
        return self.sim.state

    def seed(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)

    # References -----------------------------------------------------------
    def reference(self, t: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reference position (B, 3) and velocity (B, 3), world frame, at times ``t`` (B,) s."""
        if self.config.name != "figure_eight":
            return self.origin, torch.zeros_like(self.origin)
        pos, vel = _figure_eight(*self._figure_eight_phase(t))
        return self.origin + pos, vel

    def reference_derivatives(self, t: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reference acceleration (B, 3), m/s^2, and jerk (B, 3), m/s^3, world frame, at times ``t`` (B,) s:
        what a tracking controller would feed forward (zero for a still reference)."""
        if self.config.name != "figure_eight":
            return torch.zeros_like(self.origin), torch.zeros_like(self.origin)
        return _figure_eight_derivatives(*self._figure_eight_phase(t))

    def _figure_eight_phase(self, t: torch.Tensor | None):
        """(amplitude m, rate rad/s, phase (B,) rad) of the figure-eight at times ``t`` (default: now)."""
        t = self.sim.time if t is None else t
        cfg = self.config
        if cfg.figure_eight_randomization.enabled:
            A, w, phase = self.amplitude, self.omega, self.phase
        else:  # the config's values, which a curriculum may change between steps
            A, w, phase = cfg.figure_eight_amplitude, 2 * math.pi / cfg.figure_eight_period, 0.0
        return A, w, w * t + phase

    def _draw_figure_eight(self, idx: torch.Tensor) -> None:
        """Draw the figure-eight shapes of envs ``idx`` (config.figure_eight_randomization)."""
        cfg, n, rng = self.config, len(idx), self.rng
        r = cfg.figure_eight_randomization
        amplitude = rng.uniform(*r.amplitude, n) if r.amplitude else np.full(n, cfg.figure_eight_amplitude)
        period = rng.uniform(*r.period, n) if r.period else np.full(n, cfg.figure_eight_period)
        phase = rng.uniform(0, 2 * math.pi, n) if r.random_phase else np.zeros(n)
        if r.hover_fraction > 0:
            amplitude = np.where(rng.uniform(size=n) < r.hover_fraction, 0.0, amplitude)
        f = dict(dtype=self.amplitude.dtype, device=self.device)
        self.amplitude[idx] = torch.as_tensor(amplitude, **f)
        self.omega[idx] = torch.as_tensor(2 * math.pi / period, **f)
        self.phase[idx] = torch.as_tensor(phase, **f)

    def observe(self) -> torch.Tensor:
        """(B, obs_dim): the 22 deployable floats, the action history, the position integral, then privileged
        features."""
        ref_p, ref_v = self.reference()
        obs = observe(self.sim.state, ref_p, ref_v, self.previous_action)
        if self.config.action_history:
            obs = torch.cat([obs, self.action_history.reshape(self.num_envs, -1)], -1)
        if self.config.position_integral > 0:
            obs = torch.cat([obs, self.position_integral], -1)
        if self.privileged:
            obs = torch.cat([obs, privileged_observation(self.sim.state, self.sim.params)], -1)
        return obs.float()

    # Reset ------------------------------------------------------------------
    def reset(self, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Reset all envs (or those where ``mask`` (B,) is true); returns (B, obs_dim) observations."""
        idx = torch.arange(self.num_envs, device=self.device) if mask is None else mask.nonzero().flatten()
        n = len(idx)
        if n == 0:
            return self.observe()
        cfg, rng = self.config, self.rng
        if self.param_sampler is not None:
            self._assign_params(idx, self.param_sampler(n, rng))
            levels = getattr(self.param_sampler, "last_levels", None)  # set by level-replay samplers
            if levels is not None:
                self.levels[idx] = torch.as_tensor(levels, dtype=torch.long).to(self.device)
        p = self.sim.params
        f = dict(dtype=p.mass.dtype, device=p.mass.device)
        hover = torch.tensor(cfg.hover_position, **f)
        if cfg.name == "waypoint":
            offset = rng.uniform(-cfg.waypoint_range, cfg.waypoint_range, (n, 3))
            self.origin[idx] = hover + torch.as_tensor(offset, **f)
        start = hover.expand(n, 3)
        if cfg.name == "figure_eight" and cfg.figure_eight_randomization.enabled:
            self._draw_figure_eight(idx)
            # the reference at t = 0: a random phase starts off the hover point
            start = self.origin[idx] + _figure_eight(self.amplitude[idx], self.omega[idx], self.phase[idx])[0]
        s = torch.zeros(n, STATE_DIM, **f)
        # Episodes start around the reference at t = 0; for waypoints the target is elsewhere.
        s[:, POS] = start + torch.as_tensor(_uniform_ball(n, cfg.init.position_radius, rng), **f)
        g = torch.Generator().manual_seed(int(rng.integers(2**62)))
        s[:, QUAT] = random_quat_within(math.radians(cfg.init.angle_deg), n, g, dtype=s.dtype).to(self.device)
        s[:, VEL] = torch.as_tensor(_uniform_ball(n, cfg.init.velocity, rng), **f)
        s[:, OMEGA] = torch.as_tensor(_uniform_ball(n, cfg.init.angular_velocity, rng), **f)
        if cfg.init.guidance > 0:  # a fraction of episodes starts exactly at the reference, level, at rest
            at_goal = torch.as_tensor(rng.uniform(size=n) < cfg.init.guidance, device=self.device)
            s[at_goal, POS] = start[at_goal]
            s[at_goal, QUAT] = torch.tensor([1.0, 0.0, 0.0, 0.0], **f)
            s[at_goal, VEL.start:OMEGA.stop] = 0.0
        hover_cmd = p.hover_command()[idx]
        if cfg.init.motors_at_hover:
            s[:, MOTOR] = hover_cmd[:, None]
        else:
            s[:, MOTOR] = torch.as_tensor(rng.uniform(0, 1, (n, 4)), **f)
        full_mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        full_mask[idx] = True
        self.sim.reset(s, full_mask)
        if self.previous_action_mode == "raw_motor_state":  # L2F: the motor states, in action units
            self.previous_action[idx] = (2 * s[:, MOTOR] - 1).to(self.previous_action.dtype)
        else:
            self.previous_action[idx] = (2 * hover_cmd - 1)[:, None].to(self.previous_action.dtype)
        self.action_history[idx] = self.previous_action[idx, None]
        self.position_integral[idx] = 0.0
        self.steps[idx] = 0
        if cfg.push.probability > 0:
            self._draw_pushes(idx)
        return self.observe()

    def _draw_pushes(self, idx: torch.Tensor) -> None:
        """Draw this episode's push of envs ``idx`` (config.push): whether, when, which way, how hard."""
        push, n, rng, p = self.config.push, len(idx), self.rng, self.sim.params
        dv = rng.uniform(*push.velocity, n)
        heading = rng.uniform(0, 2 * math.pi, n)
        direction = np.stack([np.cos(heading), np.sin(heading), np.zeros(n)], -1)
        force = torch.as_tensor(direction * (dv / push.duration)[:, None], dtype=self.push_force.dtype,
                                device=self.device)
        self.push_force[idx] = force * p.mass[idx, None].to(force.dtype)
        start = np.round(rng.uniform(*push.time, n) / self.dt).astype(np.int64)
        self.push_start[idx] = torch.as_tensor(np.where(rng.uniform(size=n) < push.probability, start, -1),
                                               device=self.device)

    def _assign_params(self, idx: torch.Tensor, new: ParamsBatch) -> None:
        p = self.sim.params
        if new.dt != p.dt:
            raise ValueError(f"sampled parameters have dt={new.dt}, task runs at dt={p.dt}")
        for name, value in vars(new).items():
            if name != "dt":
                getattr(p, name)[idx] = value.to(getattr(p, name).dtype).to(self.device)

    # Step ------------------------------------------------------------------
    def step(self, action: torch.Tensor) -> StepResult:
        """Apply (B, 4) actions in [-1, 1] (clipped; numpy or a tensor, moved to the task's device); no
        automatic reset. The next observation's previous action is the clipped action, or the action as given
        under ``previous_action_mode == "raw_motor_state"``."""
        raw = torch.as_tensor(action, dtype=self.sim.state.dtype, device=self.device)
        check_action(raw, self.num_envs)
        action = raw.clamp(-1.0, 1.0)
        if self.config.position_integral > 0:  # the error of the observation this action was chosen on
            self._integrate_position_error()
        if self.config.push.probability > 0:
            since = self.steps - self.push_start
            on = (self.push_start >= 0) & (since >= 0) & (since < self.push_steps)
            self.sim.external_force = torch.where(on[:, None], self.push_force, torch.zeros_like(self.push_force))
        self.sim.step(action, validate=False)
        self.steps += 1
        reward, terminated = self._reward_and_termination(action)
        if self.config.action_history:
            self.action_history = torch.cat([self.previous_action[:, None], self.action_history[:, :-1]], 1)
        self.previous_action = raw.clone() if self.previous_action_mode == "raw_motor_state" else action
        truncated = (self.steps >= self.max_steps) & ~terminated
        return StepResult(self.observe(), reward.float(), terminated, truncated)

    def _integrate_position_error(self) -> None:
        """``I <- clip(I + dt (p - p_ref), +-position_integral)`` (B, 3) m s, with the position error of now (before
        the step): the next observation's integral sums the errors of every observation before it, as a policy that
        integrates its own observations does (``policies.mlp``'s position integral)."""
        limit = self.config.position_integral
        error = self.sim.state[:, POS] - self.reference()[0]
        self.position_integral = (self.position_integral + self.dt * error).clamp(-limit, limit)

    def _reward_and_termination(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cfg, s = self.config, self.sim.state
        ref_p, ref_v = self.reference()
        e_p = s[:, POS] - ref_p
        e_v = s[:, VEL] - ref_v
        w = s[:, OMEGA]
        hover_action = 2 * self.sim.params.hover_command() - 1
        r = cfg.reward
        applied_before = self.previous_action.clamp(-1.0, 1.0)  # the action rate of applied commands, either mode
        reward = quadrotor_reward(e_p, s[:, 3], e_v, w, action, hover_action, r, applied_before)
        t = cfg.termination
        terminated = ((e_p.norm(dim=-1) > t.position_error) | (s[:, VEL].norm(dim=-1) > t.velocity)
                      | (w.norm(dim=-1) > t.angular_velocity) | ~torch.isfinite(s).all(-1))
        if t.floor:
            terminated |= s[:, 2] < t.floor_z
        if t.tilt_deg < 180.0:  # cos(tilt) = body z . world z = 1 - 2 (qx^2 + qy^2)
            terminated |= 1 - 2 * (s[:, 4] ** 2 + s[:, 5] ** 2) < math.cos(math.radians(t.tilt_deg))
        reward = torch.where(terminated, torch.full_like(reward, -r.termination_penalty), reward)
        return torch.nan_to_num(reward, nan=-r.termination_penalty), terminated
