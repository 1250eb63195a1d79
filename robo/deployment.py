"""The deployment manifest of a policy (``hardware.export.manifest``) from what robo knows about its training:
the run's ``config.yaml`` above a ``<run>/checkpoints/<name>/policy`` folder (robot, task, previous-action
convention, control rate), the policy itself (kind, sizes, chunking, weights) and, for the shipped GRUs, the
conventions RAPTOR was trained with (Learning to Fly: 100 Hz, ``raw_motor_state``).

    manifest = deployment_manifest(policy, "c", ["robo_policy.c", "robo_policy.h", "main.c"], path)
    write_manifest(export_dir, manifest)
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from hardware.export.manifest import (MOTOR_ACTION, MOTOR_ORDER, QUADROTOR_OBSERVATION, DeploymentManifest,
                                      weights_sha256)
from policies.foundation import FoundationPolicy
from robo.evaluate import previous_action_convention, resolve_previous_action
from sims.envs.observation import OBS_DIM
from sims.envs.quadrotor_env import make_robot
from sims.quadrotor import QuadrotorParams

L2F_RATE_HZ = 100.0  # RAPTOR's training simulator steps at 10 ms
NORMALIZATION = ("baked in: the export takes raw observations in the units above and returns raw actions (the "
                 "policy's observation and action normalizers are inside)")


def training_config(path: str | Path | None) -> dict | None:
    """The resolved ``config.yaml`` of the run a checkpoint folder came from (searched up to three folders up:
    ``<run>/checkpoints/<name>/policy``), as a dict; None when there is none."""
    if path is None:
        return None
    here = Path(path).resolve()
    for folder in [here, *here.parents][:4]:
        cfg = folder / "config.yaml"
        if cfg.is_file():
            c = OmegaConf.to_container(OmegaConf.load(cfg), resolve=True)
            if isinstance(c, dict) and isinstance(c.get("task"), dict):
                return c
    return None


def _quadrotor_task(cfg: dict) -> tuple[dict, dict] | None:
    """(quadrotor task config, robot config) of a training config: the task itself (RL) or an imitation task's
    ``flight`` (the flights its demos come from); None for other tasks."""
    task = cfg["task"]
    flight = task if "previous_action" in task else task.get("flight")
    robot = cfg.get("robot") or task.get("robot")
    if not isinstance(flight, dict) or not isinstance(robot, dict) or "preset" not in robot:
        return None
    return flight, robot


def _weights(policy) -> str:
    """The hash of the weights the export runs: the inference copy (EMA) where there is one; a steered policy's
    noise actor and its base's decoder."""
    import torch

    def inference(p):
        return getattr(p, "inference_model", None) or p.model

    if hasattr(policy, "base"):
        return weights_sha256(torch.nn.ModuleDict({"actor": policy.model, "base": inference(policy.base)}))
    return weights_sha256(inference(policy))


def deployment_manifest(policy, fmt: str, artifacts: list[str], path: str | Path | None = None,
                        plan_spread: int = 0) -> DeploymentManifest:
    """The manifest of ``policy`` exported as ``fmt`` (``artifacts``: the file names written), read from the
    training run of checkpoint folder ``path`` where there is one; ``plan_spread``: the C export's."""
    obs_dim, action_dim = int(policy.obs_dim), int(policy.action_dim)
    chunk = {"n_action_steps": int(getattr(policy, "n_action_steps", 1)), "horizon": int(getattr(policy, "horizon", 1)),
             "n_obs_steps": int(getattr(policy, "n_obs_steps", 1)), "plan_spread": int(plan_spread)}
    common = dict(policy_kind=str(policy.kind), obs_dim=obs_dim, action_dim=action_dim, weights_sha256=_weights(policy),
                  format=fmt, artifacts=tuple(artifacts), normalization=NORMALIZATION, **chunk)
    integral = float(getattr(getattr(policy, "config", None), "position_integral", 0.0) or 0.0)
    quadrotor = dict(observation=QUADROTOR_OBSERVATION, action=MOTOR_ACTION, motor_order=MOTOR_ORDER,
                     position_integral=integral)
    if isinstance(policy, FoundationPolicy) and path is None:  # RAPTOR's released GRU or robo's shipped student
        return DeploymentManifest(control_rate_hz=L2F_RATE_HZ, previous_action="raw_motor_state",
                                  trained_on={"robot": "randomized quadrotors (Learning to Fly / RAPTOR)",
                                              "task": "hover from random starts"}, **quadrotor, **common)
    cfg = training_config(path)
    found = _quadrotor_task(cfg) if cfg is not None else None
    if found is None:
        if action_dim == 4 and obs_dim >= OBS_DIM:  # a quadrotor policy whose run is not known: robo's defaults
            return DeploymentManifest(control_rate_hz=1.0 / QuadrotorParams.dt,
                                      previous_action=previous_action_convention(policy),
                                      trained_on={"robot": "unknown (no run config.yaml above the checkpoint): the "
                                                           "rate is robo's default control period, 10 ms"},
                                      **quadrotor, **common)
        rate = float(cfg["task"].get("fps", 10.0)) if cfg is not None else 10.0
        return DeploymentManifest(control_rate_hz=rate, trained_on={
            "task": (cfg or {}).get("task", {}).get("name", "unknown (no run config.yaml above the checkpoint)")},
            **common)
    flight, robot = found
    params = make_robot(robot)
    convention = resolve_previous_action(str(flight.get("previous_action", "auto")), policy)
    initial = 2.0 * float(params.hover_command) - 1.0 if convention == "clipped_hover" else None
    return DeploymentManifest(
        control_rate_hz=1.0 / float(params.dt), previous_action=convention, initial_previous_action=initial,
        action_history=int(flight.get("action_history", 0)),
        trained_on={"robot": str(robot["preset"]), "mass_kg": float(params.mass), "task": str(cfg["task"]["name"]),
                    "flight": str(flight.get("name", cfg["task"]["name"]))},
        **quadrotor, **common)
