"""Fine-tuning through Betaflight's firmware (``robo finetune real_robot=betaflight_sitl``): the actor built into
the SITL firmware, flown from hand-placed starts, and the learner's transitions and the twin's identification
read from the firmware's own log."""

import json
import shutil

import numpy as np
import pytest
import torch

from robo.cli import main
from robo.real.firmware import (FirmwareLoop, OnboardFlights, episode_transitions, identify_from_log, truth_params,
                                violation)
from robo.real.learner import LearnerConfig, build_sac
from hardware.safety import SafetyConfig
from policies.foundation import load_raptor
from sims.envs.config import RewardConfig
from sims.envs.quadrotor_env import make_robot

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="building Betaflight SITL needs gcc and make")
pytest.importorskip("sims.vehicles.betaflight_firmware")

TARGET = (0.0, 0.0, 1.0)
HEAVY = {"robot": {"preset": "crazyflie", "mass": 0.03978}, "loop_hz": 1000}  # 30 % heavier than nominal


def loop(tmp_path, scale=0.1) -> FirmwareLoop:
    nominal = make_robot("crazyflie")
    return FirmwareLoop(load_raptor(), None, scale, truth_params(HEAVY), nominal, float(nominal.hover_action), TARGET,
                        SafetyConfig(), tmp_path)


def test_flights_inside_the_firmware_give_the_learner_its_transitions(tmp_path):
    """RAPTOR plus a fixed residual built into the firmware: each flight starts where the vehicle was put, and the
    residual the learner gets back from the log is the one the C computed (torch's actor on the logged
    observations), so the transitions are the actor's own."""
    actor = build_sac(LearnerConfig(seed=0)).actor
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    fl = loop(tmp_path)
    binary = fl.build(actor, "round", explore=False)
    starts = [(0.2, -0.2, 1.1), (-0.1, 0.15, 0.9)]
    with fl.flights(binary, "round") as flights:
        episodes = [flights.fly(s, 151) for s in starts]
    for start, ep in zip(starts, episodes):
        assert ep.fault is None and ep.obs.shape == (151, 22) and ep.actions.shape == (151, 4)
        np.testing.assert_allclose(ep.obs[0, 0:3], np.subtract(start, TARGET), atol=1e-6)  # held there until armed
        transitions = episode_transitions(ep, fl.base, fl.scale, fl.hover_action, RewardConfig())
        assert len(transitions) == 150 and transitions[-1][4] is False
        obs = np.stack([t[0] for t in transitions])
        u = np.stack([t[1] for t in transitions])
        with torch.no_grad():
            expected = actor(torch.as_tensor(obs), deterministic=True).numpy()
        free = (np.abs(ep.actions[:-1]) < 0.999).all(axis=1)  # where the clip kept nothing of the residual away
        print(f"\nstart {start}: final error {ep.metrics()['final_error']:.3f} m, |u - actor(obs)| max "
              f"{np.abs(u - expected)[free].max():.1e} over {free.sum()} steps")
        assert free.sum() > 100 and np.abs(u - expected)[free].max() < 1e-4
        assert np.isfinite([t[2] for t in transitions]).all()
        assert ep.metrics()["final_error"] < 0.5  # RAPTOR, a small residual: the heavy quad sags (0.32 m in sim) but flies


def test_the_twin_identifies_the_robot_from_the_firmwares_log(tmp_path):
    fl = loop(tmp_path)
    twin = fl.identify(load_raptor(), None, "crazyflie", (0.2, -0.2, 1.1), 800, seed=0)
    mass = twin.calibrated_params().mass
    print(f"\nidentified {1000 * mass:.2f} g, true {1000 * HEAVY['robot']['mass']:.2f} g")
    assert abs(mass / HEAVY["robot"]["mass"] - 1) < 0.05


def test_the_safety_monitor_names_the_limit():
    obs = np.zeros(22)
    obs[3:12] = np.eye(3).reshape(-1)
    assert violation(obs, TARGET, SafetyConfig()) is None
    tilted = obs.copy()
    tilted[11] = np.cos(np.radians(70))
    assert violation(tilted, TARGET, SafetyConfig()).startswith("tilt 70 deg")
    far = obs.copy()
    far[0] = 5.0
    assert violation(far, TARGET, SafetyConfig()).startswith("geofence")
    spinning = obs.copy()
    spinning[15] = 30.0
    assert violation(spinning, TARGET, SafetyConfig()).startswith("body rate")
    assert violation(np.full(22, np.nan), TARGET, SafetyConfig()) == "non-finite observation"


@pytest.mark.slow
def test_robo_finetune_through_the_firmware(tmp_path):
    """The whole loop at a small budget (2 min): identification from the firmware's log, pre-training in the twin,
    two rounds of the actor built into the firmware with the twin gate, before/after flights inside it. At this
    budget the twin's residual need not help RAPTOR inside the firmware; the gate and the twin's ranking must keep
    what flies from getting much worse, with no safety fault. The gain on robo's SAC actor, at the benchmark's
    budget: ``python benchmarks/firmware_finetune.py``."""
    run = tmp_path / "ft"
    main(["finetune", "real_robot=betaflight_sitl", "base=raptor", "total_steps=400", "real_robot.round_steps=200",
          "twin_pretrain.steps=60000", "twin_pretrain.snapshot_every=10000", "twin_pretrain.identify_steps=500",
          "eval_episodes=3", "residual_scale=0.5", "learner.snapshot_every=200", "twin_gate.tolerance=0.1",
          "twin_gate.every=200", f"hydra.run.dir={run}"])
    m = json.loads((run / "metrics.json").read_text())
    print(f"\nthrough the firmware: {m['tracking_error_before']:.3f} -> {m['tracking_error_pretrained']:.3f} (twin) "
          f"-> {m['tracking_error_after']:.3f} m, identified {1000 * m['identified_mass']:.2f} g, "
          f"{m['safety_faults']} safety faults, gate {m['gate_admitted']}/{m['gate_checks']}")
    assert m["real_steps"] == 400 and m["rounds"] == 2 and m["episodes"] == 2
    assert abs(m["identified_mass"] / HEAVY["robot"]["mass"] - 1) < 0.05
    assert m["tracking_error_after"] < 1.25 * m["tracking_error_before"]
    assert m["safety_faults"] == 0
    for name in ("before", "identification", "pretrained", "rounds/000", "rounds/001", "after"):
        manifest = json.loads((run / name / "export" / "manifest.json").read_text())
        assert manifest["policy_kind"] == "residual(foundation)" and manifest["previous_action"] == "raw_motor_state"
    assert len((run / "after" / "episode_000.jsonl").read_text().splitlines()) == 1 + 201

