"""robo's exported C policy as the controller inside Betaflight 4.6's SITL build (the onboard path).

``hardware.export.betaflight_build`` builds the SITL from the pip source with RAPTOR's C export, robo's glue and
``SIMULATOR_GYROPID_SYNC`` (lockstep: one control loop per state packet), cached per policy (~30-60 s the first
time). The firmware runs the policy on its own attitude quaternion and filtered gyro and the packet's position and
velocity, and writes the motors; robo only provisions and arms it over MSP. Ports are fixed (MSP TCP 5761, UDP
9001-9004): a firmware started elsewhere on the machine is waited for, never fought.

The build reads the export's ``manifest.json`` (``robo.onboard.export_for_deployment``, as ``robo deploy`` does):
RAPTOR's previous-action convention (``raw_motor_state``) and its 100 Hz rate, run every 10th loop of a 1 kHz
lockstep loop. Numbers (``pytest -s tests/hardware/test_betaflight_onboard.py``) print the in-firmware cost per
policy step and the hover error against the same flight in robo's sim alone (``robo.onboard.fly_sim_alone``).
"""

import dataclasses
import shutil
import time

import numpy as np
import pytest
import torch

from hardware.export import export_c
from hardware.export.manifest import read_manifest
from hardware.export.betaflight_build import (OnboardBuildError, OnboardSettings, _policy_sources, build_onboard_sitl,
                                              patched_sitl)
from policies.foundation import load_raptor
from robo.onboard import export_for_deployment, firmware_error_bound_m, fly_onboard, fly_sim_alone, onboard_settings
from sims.quadrotor import preset

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="building Betaflight SITL needs gcc and make")

firmware_mod = pytest.importorskip("sims.vehicles.betaflight_firmware")
HOVER_SECONDS = 6.0
LOOP_HZ = 1000.0  # the firmware's control loop; the 100 Hz policies run every 10th loop
QUAD = dataclasses.replace(preset("betaflight_quadx"), dt=1.0 / LOOP_HZ)


def onboard_binary(policy, directory, reference="hover", params=QUAD):
    """What `robo deploy` builds: the C export with its manifest, inside the lockstep SITL."""
    _, manifest = export_for_deployment(policy, directory)
    try:
        return build_onboard_sitl(directory, onboard_settings(params, manifest, reference)), manifest
    except OnboardBuildError as e:
        if "not installed" in str(e):
            pytest.skip(str(e))
        raise


@pytest.fixture(scope="module")
def raptor_binary(tmp_path_factory):
    return onboard_binary(load_raptor(), tmp_path_factory.mktemp("raptor_c"))


def test_the_sitl_patch_finds_its_anchors():
    text = (firmware_mod.firmware_source() / "src/platform/SIMULATOR/sitl.c").read_text()
    patched = patched_sitl(text)
    assert patched.count("roboOnboard") == 2 and '#include "robo_onboard.h"' in patched
    with pytest.raises(OnboardBuildError, match="differs from 4.6.0"):
        patched_sitl(text.replace('#include "udplink.h"\n', ""))


def test_a_policy_that_does_not_fit_is_refused(tmp_path):
    from policies.mlp import MLPConfig, MLPPolicy

    export_c(MLPPolicy(MLPConfig(obs_dim=10)), tmp_path)
    settings = OnboardSettings(loop_hz=LOOP_HZ)
    with pytest.raises(OnboardBuildError, match="declares obs 10"):
        build_onboard_sitl(tmp_path, settings)
    with pytest.raises(OnboardBuildError, match="export the policy first"):
        build_onboard_sitl(tmp_path / "nothing", settings)


def test_the_manifest_decides_and_a_mismatch_is_refused_in_one_line(tmp_path):
    from policies.mlp import MLPConfig, MLPPolicy

    policy = MLPPolicy(MLPConfig())
    export_c(policy, tmp_path)  # no manifest beside the code
    with pytest.raises(OnboardBuildError, match="manifest.json is missing"):
        build_onboard_sitl(tmp_path, OnboardSettings(loop_hz=LOOP_HZ))
    export_for_deployment(policy, tmp_path)  # 100 Hz, clipped_hover
    with pytest.raises(OnboardBuildError, match=r"control rate: the onboard build \(250 Hz loop\) runs at 250 Hz, "
                                                r"the mlp policy was trained at 100 Hz \(needs a whole multiple") as e:
        build_onboard_sitl(tmp_path, OnboardSettings(loop_hz=250.0))
    assert "\n" not in str(e.value)
    header = OnboardSettings(loop_hz=LOOP_HZ, initial_previous_action=0.6).config_header(read_manifest(tmp_path))
    assert "#define ROBO_POLICY_EVERY 10" in header and "#define ROBO_PREVIOUS_ACTION_RAW 0" in header


def test_a_position_integral_actor_fits_the_onboard_build(tmp_path):
    """An RL actor trained with task.position_integral integrates its error itself: its C reads robo's 22 floats
    (the build's check passes; the firmware is not built here)."""
    from policies.mlp import MLPConfig, MLPPolicy

    export_c(MLPPolicy(MLPConfig(position_integral=0.5, integral_dt=0.01)), tmp_path)
    files = _policy_sources(tmp_path)
    assert "#define ROBO_POLICY_OBS_DIM 22" in files["robo_policy.h"] and "integral0[3]" in files["robo_policy.h"]


def test_the_onboard_build_compiles_raptors_export_and_is_cached(raptor_binary):
    binary, manifest = raptor_binary
    assert binary.is_file() and binary.parent.parent.parent.name == "onboard"
    log = (binary.parent.parent / "build.log").read_text()
    assert "robo_onboard.c" in log and "robo_policy.c" in log
    config = (binary.parent.parent / "overlay" / "SIMULATOR" / "robo_onboard_config.h").read_text()
    assert "#define ROBO_PREVIOUS_ACTION_RAW 1" in config and "#define ROBO_INITIAL_PREVIOUS_ACTION -1.0f" in config
    t = time.monotonic()
    assert build_onboard_sitl(binary.parent.parent / "overlay" / "SIMULATOR",
                              onboard_settings(QUAD, manifest)) == binary
    assert time.monotonic() - t < 1.0


def test_raptor_inside_the_firmware_hovers_as_in_robos_sim(raptor_binary, tmp_path):
    binary, manifest = raptor_binary
    firmware = fly_onboard(binary, QUAD, tmp_path, HOVER_SECONDS, "hover", 0.01).metrics()
    alone = fly_sim_alone(load_raptor(), QUAD, manifest, "hover", HOVER_SECONDS).metrics()
    print(f"\nonboard RAPTOR: hover median error {100 * firmware['median_error_m']:.1f} cm (robo's sim alone "
          f"{100 * alone['median_error_m']:.1f} cm); policy step in the firmware {firmware['step_us_mean']:.2f} us "
          f"mean, {firmware['step_us_max']:.1f} us max over {firmware['steps']} steps; late replies {firmware['late']}")
    assert not firmware["lost"] and firmware["median_error_m"] < 0.10
    assert firmware["median_error_m"] < firmware_error_bound_m(alone["median_error_m"])
    assert firmware["steps"] >= HOVER_SECONDS * 100 - 250  # every 10th of the 1 kHz loops (logged per 250 steps)
    assert 0.0 < firmware["step_us_mean"] < 100.0
