"""robo's exported C policy as the controller inside Betaflight 4.6's SITL build (the onboard path).

``hardware.export.betaflight_build`` builds the SITL from the pip source with RAPTOR's C export, robo's glue and
``SIMULATOR_GYROPID_SYNC`` (lockstep: one control loop per state packet), cached per policy (~30-60 s the first
time). The firmware runs the policy on its own attitude quaternion and filtered gyro and the packet's position and
velocity, and writes the motors; robo only provisions and arms it over MSP. Ports are fixed (MSP TCP 5761, UDP
9001-9004): a firmware started elsewhere on the machine is waited for, never fought.

Numbers (``pytest -s tests/hardware/test_betaflight_onboard.py``) print the in-firmware cost per policy step and the
hover error against the same policy in robo's sim alone.
"""

import shutil
import time

import numpy as np
import pytest
import torch

from hardware.drivers.betaflight_setup import SetupConfig, disable_runaway_takeoff, wait_ready
from hardware.export import export_c
from hardware.export.betaflight_build import (OnboardBuildError, OnboardSettings, _policy_sources, build_onboard_sitl,
                                              onboard_log, patched_sitl)
from policies.foundation import load_raptor
from sims.quadrotor import preset
from tests.hardware.polling import connect_provisioned, start_firmware, wait_for

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="building Betaflight SITL needs gcc and make")

firmware_mod = pytest.importorskip("sims.vehicles.betaflight_firmware")
TARGET = (0.0, 0.0, 1.0)
SETTINGS = OnboardSettings(target=TARGET, origin=firmware_mod.ORIGIN, earth_radius=firmware_mod.EARTH_RADIUS)
HOVER_SECONDS, SETTLE_SECONDS = 6.0, 1.0


def onboard_binary(policy, directory):
    export_c(policy, directory)  # what `robo export policy=... format=c out=<directory>` writes
    try:
        return build_onboard_sitl(directory, SETTINGS)
    except OnboardBuildError as e:
        if "not installed" in str(e):
            pytest.skip(str(e))
        raise


@pytest.fixture(scope="module")
def raptor_binary(tmp_path_factory):
    return onboard_binary(load_raptor(), tmp_path_factory.mktemp("raptor_c"))


def fly_onboard(binary, run_dir, seconds: float) -> tuple[np.ndarray, dict, dict]:
    """Fresh firmware on the ground at the origin: provision, arm, let the onboard policy fly ``seconds`` of sim
    time -> (trajectory (T, 4): sim s since arming, position world FLU m; onboard log numbers; loop rates)."""
    fw = start_firmware(300.0, run_dir=run_dir, binary=binary, lockstep=True)
    try:
        robot, _ = connect_provisioned(fw, SetupConfig(failsafe_delay=0.5, failsafe_procedure="DROP"), acc_1g=256)
        try:
            wait_ready(robot, timeout=60.0)
            disable_runaway_takeoff(robot)
            assert not fw.snapshot()["motors"].any()  # disarmed: the policy leaves the motors alone
            robot.arm(timeout=3.0)
            t0, trajectory = fw.time, []
            while (s := fw.snapshot())["time"] - t0 < seconds:
                trajectory.append((s["time"] - t0, *s["state"][0:3]))
                time.sleep(0.02)
            rates = fw.rates()
            robot.disarm()  # the firmware disarms on the fourth RC frame with the switch off (0.15-0.25 s here)
            assert wait_for(lambda: not fw.snapshot()["motors"].any(), timeout=2.0)
        finally:
            robot.close()
    finally:
        fw.close()
    return np.array(trajectory), onboard_log((run_dir / "sitl.log").read_text()), rates


def sim_alone(policy, seconds: float) -> np.ndarray:
    """The same policy in robo's sim alone (same preset, start and ground): (T, 4) sim s, position world FLU m."""
    from sims.envs.observation import observe
    from sims.quadrotor import BatchedQuadrotorSim, ParamsBatch, hover_state

    params = preset("betaflight_quadx")
    batch = ParamsBatch.from_params(params, dtype=torch.float64)
    sim = BatchedQuadrotorSim(batch)
    s = hover_state(batch, torch.zeros(1, 3, dtype=torch.float64))
    s[0, 13:17] = 0.0
    sim.reset(s)
    policy.reset()
    ref, zero, action = torch.tensor([TARGET], dtype=torch.float64), torch.zeros(1, 3, dtype=torch.float64), \
        torch.zeros(1, 4, dtype=torch.float64)
    out = []
    for k in range(int(round(seconds / params.dt))):
        obs = observe(sim.state, ref, zero, action).float()
        action = torch.as_tensor(policy.act(obs), dtype=torch.float64).clamp(-1, 1)
        s = sim.step(action, validate=False)
        if s[0, 2] < 0:  # the runner's flat ground (level, at rest)
            s[0, 2], s[0, 7:13], s[0, 3:7] = 0.0, 0.0, torch.tensor([1.0, 0, 0, 0], dtype=torch.float64)
            sim.state = s
        out.append((k * params.dt + params.dt, *s[0, 0:3].tolist()))
    return np.array(out)


def hover_error(trajectory: np.ndarray) -> float:
    """Median distance to the target after the take-off (m)."""
    late = trajectory[trajectory[:, 0] >= SETTLE_SECONDS]
    return float(np.median(np.linalg.norm(late[:, 1:4] - np.array(TARGET), axis=1)))


def test_the_sitl_patch_finds_its_anchors():
    text = (firmware_mod.firmware_source() / "src/platform/SIMULATOR/sitl.c").read_text()
    patched = patched_sitl(text)
    assert patched.count("roboOnboard") == 2 and '#include "robo_onboard.h"' in patched
    with pytest.raises(OnboardBuildError, match="differs from 4.6.0"):
        patched_sitl(text.replace('#include "udplink.h"\n', ""))


def test_a_policy_that_does_not_fit_is_refused(tmp_path):
    from policies.mlp import MLPConfig, MLPPolicy

    export_c(MLPPolicy(MLPConfig(obs_dim=10)), tmp_path)
    with pytest.raises(OnboardBuildError, match="declares obs 10"):
        build_onboard_sitl(tmp_path, SETTINGS)
    with pytest.raises(OnboardBuildError, match="export the policy first"):
        build_onboard_sitl(tmp_path / "nothing", SETTINGS)


def test_a_position_integral_actor_fits_the_onboard_build(tmp_path):
    """An RL actor trained with task.position_integral integrates its error itself: its C reads robo's 22 floats
    (the build's check passes; the firmware is not built here)."""
    from policies.mlp import MLPConfig, MLPPolicy

    export_c(MLPPolicy(MLPConfig(position_integral=0.5, integral_dt=0.01)), tmp_path)
    files = _policy_sources(tmp_path)
    assert "#define ROBO_POLICY_OBS_DIM 22" in files["robo_policy.h"] and "integral0[3]" in files["robo_policy.h"]


def test_the_onboard_build_compiles_raptors_export_and_is_cached(raptor_binary):
    assert raptor_binary.is_file() and raptor_binary.parent.parent.parent.name == "onboard"
    log = (raptor_binary.parent.parent / "build.log").read_text()
    assert "robo_onboard.c" in log and "robo_policy.c" in log
    t = time.monotonic()
    assert build_onboard_sitl(raptor_binary.parent.parent / "overlay" / "SIMULATOR", SETTINGS) == raptor_binary
    assert time.monotonic() - t < 1.0


def test_raptor_inside_the_firmware_hovers(raptor_binary, tmp_path):
    trajectory, cost, rates = fly_onboard(raptor_binary, tmp_path, HOVER_SECONDS)
    firmware_err, alone_err = hover_error(trajectory), hover_error(sim_alone(load_raptor(), HOVER_SECONDS))
    print(f"\nonboard RAPTOR: hover median error {100 * firmware_err:.1f} cm (robo's sim alone {100 * alone_err:.1f}"
          f" cm); policy step in the firmware {cost['step_us_mean']:.2f} us mean, {cost['step_us_max']:.1f} us max "
          f"over {cost['steps']} steps; physics {rates['step_hz']:.0f} steps/s, answered {rates['answered']:.4f}")
    assert firmware_err < 0.10
    assert abs(firmware_err - alone_err) < 0.03
    assert cost["steps"] >= 0.9 * HOVER_SECONDS / preset("betaflight_quadx").dt - 250
    assert 0.0 < cost["step_us_mean"] < 100.0


@pytest.mark.slow
def test_an_mlp_actor_runs_inside_the_firmware(tmp_path):
    """A robo MLP actor checkpoint (untrained, seeded: it does not hover) builds into the firmware and runs once per
    state packet while armed: its own build (~20-60 s) and a 2 s flight."""
    from policies.mlp import MLPConfig, MLPPolicy
    from policies.registry import load_policy

    torch.manual_seed(0)
    MLPPolicy(MLPConfig(hidden_dims=[64, 64])).save(tmp_path / "mlp")
    binary = onboard_binary(load_policy(tmp_path / "mlp"), tmp_path / "mlp_c")
    _, cost, rates = fly_onboard(binary, tmp_path, 2.0)
    print(f"\nonboard MLP 22-64-64-4: policy step in the firmware {cost['step_us_mean']:.2f} us mean, "
          f"{cost['step_us_max']:.1f} us max over {cost['steps']} steps")
    assert cost["steps"] >= 250 and 0.0 < cost["step_us_mean"] < 100.0
