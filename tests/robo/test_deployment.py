"""``robo.deployment``: the manifest says what a policy was trained with, read from its run's config.yaml, and
``robo export`` writes it beside every artifact."""

import json

import pytest
import torch
from omegaconf import OmegaConf

from hardware.export.manifest import read_manifest
from policies.foundation import load_raptor
from policies.mlp import MLPConfig, MLPPolicy
from policies.registry import load_policy
from robo.cli import main
from robo.deployment import deployment_manifest
from sims.quadrotor import preset


def run_folder(tmp_path, task: dict, robot: dict) -> str:
    """A policy saved as a training run keeps it: <run>/config.yaml and <run>/checkpoints/best/policy."""
    torch.manual_seed(0)
    (tmp_path / "run").mkdir()
    OmegaConf.save(OmegaConf.create({"task": task, "robot": robot}), tmp_path / "run" / "config.yaml")
    return str(MLPPolicy(MLPConfig(position_integral=0.1)).save(tmp_path / "run" / "checkpoints" / "best" / "policy"))


def test_an_rl_actor_carries_its_task_conventions(tmp_path):
    path = run_folder(tmp_path, {"name": "hover", "previous_action": "auto", "action_history": 0},
                      {"preset": "racer5", "mass": None})
    m = deployment_manifest(load_policy(path), "c", ["a.c"], path)
    racer = preset("racer5")
    assert m.previous_action == "clipped_hover" and m.control_rate_hz == pytest.approx(1 / racer.dt)
    assert m.initial_previous_action == pytest.approx(2 * racer.hover_command - 1)
    assert m.position_integral == pytest.approx(0.1) and m.trained_on["robot"] == "racer5"
    assert m.motor_order == ("FR", "BR", "BL", "FL") and m.obs_dim == 22 and len(m.weights_sha256) == 64


def test_an_imitation_policy_reads_the_flights_its_demos_came_from(tmp_path):
    path = run_folder(tmp_path, {"name": "quadrotor_tracking", "kind": "imitation",
                                 "flight": {"name": "figure_eight", "previous_action": "raw_motor_state"}},
                      {"preset": "crazyflie", "mass": 0.04})
    m = deployment_manifest(load_policy(path), "onnx", ["policy.onnx"], path)
    assert m.previous_action == "raw_motor_state" and m.initial_previous_action is None
    assert m.trained_on == {"robot": "crazyflie", "mass_kg": 0.04, "task": "quadrotor_tracking",
                            "flight": "figure_eight"}


def test_raptor_is_deployed_with_learning_to_fly_conventions():
    m = deployment_manifest(load_raptor(), "c", ["robo_policy.c"])
    assert (m.previous_action, m.control_rate_hz, m.n_action_steps) == ("raw_motor_state", 100.0, 1)


def test_robo_export_writes_the_manifest_beside_the_artifact(tmp_path):
    run = tmp_path / "export_run"
    main(["export", "policy=raptor", "format=onnx", f"hydra.run.dir={run}"])
    m = read_manifest(run / "export")
    assert m.format == "onnx" and m.artifacts == ("policy.onnx",) and m.policy_kind == "foundation"
    assert str(run / "export" / "manifest.json") in json.loads((run / "parity.json").read_text())["artifacts"]
