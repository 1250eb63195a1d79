"""The deployment manifest beside every export: written atomically, read back whole, and a deployment that differs
from it (observation size, action size, motor order, control rate) refused in one line naming what differs."""

import json

import pytest

from hardware.export.manifest import (MOTOR_ORDER, DeploymentManifest, ManifestError, check_manifest, read_manifest,
                                      weights_sha256, write_manifest)
from tests.hardware.conftest import make_mlp

MANIFEST = DeploymentManifest(policy_kind="energy", obs_dim=22, action_dim=4, control_rate_hz=100.0,
                              weights_sha256="ab" * 32, previous_action="clipped_hover", initial_previous_action=0.61,
                              motor_order=MOTOR_ORDER, n_action_steps=4, horizon=8, n_obs_steps=2)


def test_a_manifest_round_trips(tmp_path):
    path = write_manifest(tmp_path, MANIFEST)
    assert path.name == "manifest.json" and not list(tmp_path.glob(".manifest*"))
    assert read_manifest(tmp_path) == MANIFEST and read_manifest(path) == MANIFEST
    assert json.loads(path.read_text())["motor_order"] == ["FR", "BR", "BL", "FL"]


@pytest.mark.parametrize("given, match", [
    ({"obs_dim": 25}, "observation size: here gives 25 floats, the energy policy reads 22"),
    ({"action_dim": 6}, "action size: here takes 6, the energy policy writes 4"),
    ({"motor_order": ("FL", "FR", "BR", "BL")}, r"motor order: here is \['FL', 'FR', 'BR', 'BL'\], the energy"),
    ({"rate_hz": 250.0}, "control rate: here runs at 250 Hz, the energy policy was trained at 100 Hz"),
    ({"rate_hz": 250.0, "rate_divides": True}, r"\(needs a whole multiple of 100 Hz\)"),
])
def test_a_mismatch_is_refused_in_one_line_naming_it(given, match):
    with pytest.raises(ManifestError, match=match) as e:
        check_manifest(MANIFEST, where="here", **given)
    assert "\n" not in str(e.value)


def test_a_matching_deployment_passes():
    check_manifest(MANIFEST, obs_dim=22, action_dim=4, motor_order=MOTOR_ORDER, rate_hz=100.0)
    check_manifest(MANIFEST, rate_hz=1000.0, rate_divides=True)  # every 10th loop


@pytest.mark.parametrize("text, match", [
    (None, "manifest.json is missing"),
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "holds a list, expected an object"),
    ('{"format_version": 7}', "format_version 7, this robo reads 1"),
    ('{"format_version": 1, "obs_dim": 22, "colour": "red"}', r"unknown fields \['colour'\]; missing"),
])
def test_a_missing_or_corrupt_manifest_gets_one_line(tmp_path, text, match):
    if text is not None:
        (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(ManifestError, match=match) as e:
        read_manifest(tmp_path)
    assert "\n" not in str(e.value)


def test_the_weights_hash_follows_the_weights():
    a, b = make_mlp(seed=0), make_mlp(seed=1)
    assert weights_sha256(a.model) == weights_sha256(make_mlp(seed=0).model) != weights_sha256(b.model)
