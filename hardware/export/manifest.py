"""The deployment contract written beside every export: ``manifest.json``.

It says what the exported code expects and produces, so whoever flies it (the onboard glue, a driver, the twin,
``robo eval``) feeds it the conventions it was trained with::

    {"format_version": 1, "policy_kind": "energy", "format": "c", "artifacts": ["robo_policy.c", ...],
     "weights_sha256": "...", "obs_dim": 22, "action_dim": 4,
     "observation": [{"name": "position_error", "start": 0, "stop": 3, "unit": "m", "frame": "world FLU"}, ...],
     "previous_action": "clipped_hover", "initial_previous_action": 0.0137, "action_history": 0,
     "position_integral": 0.0,
     "action": "motor commands in [-1, 1]: thrust fraction (a + 1) / 2 of each motor", "motor_order": [FR, BR, BL, FL],
     "control_rate_hz": 100.0, "n_action_steps": 4, "horizon": 8, "n_obs_steps": 2,
     "normalization": "baked in: ...", "trained_on": {"robot": "crazyflie", "task": "quadrotor_tracking"}}

``previous_action`` is how floats 18:22 (and an action history) were filled in training: ``clipped_hover`` (the
command last applied, clipped to [-1, 1]; ``initial_previous_action`` after a reset: the trained robot's hover
command) or ``raw_motor_state`` (the policy's output as given; after a reset each motor's state as ``2 u - 1``,
-1 for motors at rest). ``check_manifest`` refuses, in one line naming it, a deployment that differs in
observation size, action size, motor order or control rate.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

FILE = "manifest.json"
FORMAT_VERSION = 1
MOTOR_ORDER = ("FR", "BR", "BL", "FL")
PREVIOUS_ACTIONS = ("clipped_hover", "raw_motor_state")

# robo's deployable quadrotor observation (sims/envs/observation.py), 22 floats; extra floats follow it
QUADROTOR_OBSERVATION = (
    {"name": "position_error", "start": 0, "stop": 3, "unit": "m", "frame": "world FLU", "what": "p - p_ref"},
    {"name": "rotation", "start": 3, "stop": 12, "unit": "1", "frame": "body FLU -> world FLU",
     "what": "rotation matrix, row-major"},
    {"name": "velocity", "start": 12, "stop": 15, "unit": "m/s", "frame": "world FLU", "what": "v - v_ref"},
    {"name": "angular_velocity", "start": 15, "stop": 18, "unit": "rad/s", "frame": "body FLU", "what": "gyro"},
    {"name": "previous_action", "start": 18, "stop": 22, "unit": "1", "frame": "motors FR, BR, BL, FL",
     "what": "see previous_action"},
)
MOTOR_ACTION = "motor commands in [-1, 1]: thrust fraction (a + 1) / 2 of each motor, in motor_order"


class ManifestError(ValueError):
    """A manifest that is missing, unreadable, or does not match the deployment."""


@dataclass(frozen=True)
class DeploymentManifest:
    policy_kind: str
    obs_dim: int
    action_dim: int
    control_rate_hz: float
    weights_sha256: str
    format: str = ""
    artifacts: tuple[str, ...] = ()
    observation: tuple[dict, ...] = ()
    previous_action: str | None = None  # clipped_hover | raw_motor_state (quadrotor policies), else None
    initial_previous_action: float | None = None  # floats 18:22 after a reset (clipped_hover: the hover command)
    action_history: int = 0
    position_integral: float = 0.0  # m s: the policy integrates its position error itself (inside the export)
    action: str = ""
    motor_order: tuple[str, ...] = ()
    n_action_steps: int = 1
    horizon: int = 1
    n_obs_steps: int = 1
    plan_spread: int = 0  # C: control steps a chunk's plan is spread over (0: planned whole when the queue empties)
    normalization: str = ""
    trained_on: dict = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.previous_action is not None and self.previous_action not in PREVIOUS_ACTIONS:
            raise ManifestError(f"previous_action={self.previous_action!r}: choose one of {PREVIOUS_ACTIONS}")
        if not self.control_rate_hz > 0:
            raise ManifestError(f"control_rate_hz={self.control_rate_hz} must be positive")

    def as_dict(self) -> dict:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict, where: str = "manifest") -> "DeploymentManifest":
        if d.get("format_version") != FORMAT_VERSION:
            raise ManifestError(f"{where} has format_version {d.get('format_version')!r}, this robo reads "
                                f"{FORMAT_VERSION}: export the policy again")
        names = {f.name for f in fields(cls)}
        unknown, missing = sorted(set(d) - names), [n for n in ("policy_kind", "obs_dim", "action_dim",
                                                                 "control_rate_hz", "weights_sha256") if n not in d]
        if unknown or missing:
            raise ManifestError(f"{where}: " + "; ".join(
                ([f"unknown fields {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else [])))
        d = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**d)


def weights_sha256(module) -> str:
    """SHA-256 over a torch module's state dict (names and float32/int bytes, in name order)."""
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def write_manifest(directory: str | Path, manifest: DeploymentManifest) -> Path:
    """``directory/manifest.json``, written atomically."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{FILE}.", dir=directory)
    with os.fdopen(fd, "w") as f:
        json.dump(manifest.as_dict(), f, indent=2)
        f.write("\n")
    os.replace(tmp, directory / FILE)
    return directory / FILE


def read_manifest(directory: str | Path) -> DeploymentManifest:
    """The manifest of an export folder (or the file itself); ManifestError, one line, if missing or corrupt."""
    path = Path(directory)
    path = path / FILE if path.is_dir() or path.suffix != ".json" else path
    if not path.is_file():
        raise ManifestError(f"{path} is missing: export the policy with robo export (it writes the manifest beside "
                            "the code)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ManifestError(f"{path} is not valid JSON ({str(e).splitlines()[0]}): export the policy again") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path} holds a {type(data).__name__}, expected an object")
    try:
        return DeploymentManifest.from_dict(data, str(path))
    except TypeError as e:
        raise ManifestError(f"{path}: {e}") from None


def check_manifest(manifest: DeploymentManifest, *, obs_dim: int | None = None, action_dim: int | None = None,
                   motor_order: tuple[str, ...] | None = None, rate_hz: float | None = None,
                   rate_divides: bool = False, where: str = "this deployment") -> None:
    """Refuse (ManifestError, one line) a deployment whose observation size, action size, motor order or control
    rate differs from the manifest's. ``rate_divides``: a loop of ``rate_hz`` may run the policy every k-th loop
    (k a whole number), as a flight controller's fast loop does."""
    kind = manifest.policy_kind
    if obs_dim is not None and obs_dim != manifest.obs_dim:
        raise ManifestError(f"observation size: {where} gives {obs_dim} floats, the {kind} policy reads "
                            f"{manifest.obs_dim}")
    if action_dim is not None and action_dim != manifest.action_dim:
        raise ManifestError(f"action size: {where} takes {action_dim}, the {kind} policy writes "
                            f"{manifest.action_dim}")
    if motor_order is not None and manifest.motor_order and tuple(motor_order) != tuple(manifest.motor_order):
        raise ManifestError(f"motor order: {where} is {list(motor_order)}, the {kind} policy's is "
                            f"{list(manifest.motor_order)}")
    if rate_hz is not None:
        ratio = rate_hz / manifest.control_rate_hz
        ok = abs(ratio - round(ratio)) < 1e-6 and round(ratio) >= 1 if rate_divides else abs(ratio - 1) < 1e-6
        if not ok:
            need = "a whole multiple of " if rate_divides else ""
            raise ManifestError(f"control rate: {where} runs at {rate_hz:g} Hz, the {kind} policy was trained at "
                                f"{manifest.control_rate_hz:g} Hz (needs {need}{manifest.control_rate_hz:g} Hz)")
