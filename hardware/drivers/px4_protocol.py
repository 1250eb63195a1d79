"""PX4's side of MAVLink as robo speaks it: config, constants and the setpoint encoders.

Pure functions (no link, no threads), so the bytes robo sends can be built and checked alone.
Frames are converted by ``hardware.drivers.frames``; motor order by ``PX4_FROM_ROBO``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import frames
from .base import AttitudeThrustCommand, Command, MotorCommand
from .extras import require

mavlink = require("pymavlink.dialects.v20.common")

PX4_MAIN_MODE_OFFBOARD = 6
FORCE_DISARM = 21196  # PX4's magic param2 of ARM_DISARM: disarm even in flight
# PX4 quad-X output i is robo motor PX4_FROM_ROBO[i] (robo order: FR, BR, BL, FL).
PX4_FROM_ROBO = np.array([0, 2, 3, 1])
TELEMETRY = ("ATTITUDE_QUATERNION", "ATTITUDE", "LOCAL_POSITION_NED")
_ATT_RATES_ONLY = (mavlink.ATTITUDE_TARGET_TYPEMASK_BODY_ROLL_RATE_IGNORE
                   | mavlink.ATTITUDE_TARGET_TYPEMASK_BODY_PITCH_RATE_IGNORE
                   | mavlink.ATTITUDE_TARGET_TYPEMASK_BODY_YAW_RATE_IGNORE)


def px4_main_mode(custom_mode: int) -> int:
    """PX4's main mode from a HEARTBEAT's ``custom_mode`` (bits 16..23)."""
    return (int(custom_mode) >> 16) & 0xFF


@dataclass
class PX4Config:
    """Link and protocol settings of ``PX4Robot``.

    ``connection`` is a pymavlink address: ``udpin:127.0.0.1:14540`` (listen on loopback, where PX4
    SITL sends), ``udpin:ADDR:14540`` with ADDR the one interface a companion link arrives on,
    ``udpout:HOST:PORT``, or a serial device ``/dev/ttyACM0`` with ``baud``. A listen on 0.0.0.0
    takes MAVLink from any sender on every interface (logged as a warning): sign the link.
    ``control`` is the setpoint kind streamed before the offboard switch: ``motors`` | ``attitude``.
    ``signing_key_file``: a file with the MAVLink 2 signing key shared with the vehicle (see
    ``hardware.drivers.mavlink_signing``; the config names the file, never holds the key); unset, the
    key may come from ``$ROBO_MAVLINK_KEY``; with no key the link is unsigned. ``signing_link_id``:
    the link id robo signs with.
    """

    connection: str = "udpin:127.0.0.1:14540"
    baud: int = 921600
    system_id: int = 255  # ours (a GCS)
    component_id: int = mavlink.MAV_COMP_ID_MISSIONPLANNER
    target_system: int = 1
    target_component: int = 1
    heartbeat_hz: float = 2.0
    control: str = "motors"
    actuator_group: int = 0
    ack_timeout: float = 0.5  # s per try
    command_tries: int = 3
    offboard_stream_s: float = 0.3  # s of setpoints before the switch (PX4 requires > 2 Hz first)
    reboot_gap_ms: int = 10000  # telemetry this much older than the newest means PX4 rebooted (accepted)
    signing_key_file: str | None = None
    signing_link_id: int = 0

    def __post_init__(self) -> None:
        if self.control not in ("motors", "attitude"):
            raise ValueError(f"control must be 'motors' or 'attitude', got {self.control!r}")
        if self.heartbeat_hz < 1.0:
            raise ValueError(f"heartbeat_hz must be >= 1 (PX4 drops a GCS after ~1.5 s), got {self.heartbeat_hz}")
        if not 0 <= int(self.signing_link_id) <= 255:
            raise ValueError(f"signing_link_id must be in 0..255, got {self.signing_link_id}")


def listens_everywhere(connection: str) -> bool:
    """True for a pymavlink address that binds all interfaces (``udpin:0.0.0.0:P``, ``udp:``, ``tcpin:``)."""
    kind, _, rest = connection.partition(":")
    host = rest.rsplit(":", 1)[0] if ":" in rest else ""
    return kind in ("udpin", "udp", "tcpin") and host in ("0.0.0.0", "", "::", "[::]")


def motor_message(mav: mavlink.MAVLink, cmd: MotorCommand, time_usec: int, cfg: PX4Config):
    """robo ``MotorCommand`` -> SET_ACTUATOR_CONTROL_TARGET (PX4 output order, 8 controls)."""
    controls = np.zeros(8)
    controls[:4] = np.asarray(cmd.motors, dtype=np.float64)[PX4_FROM_ROBO]
    return mav.set_actuator_control_target_encode(time_usec, cfg.actuator_group, cfg.target_system,
                                                  cfg.target_component, controls.tolist())


def attitude_message(mav: mavlink.MAVLink, cmd: AttitudeThrustCommand, time_boot_ms: int, cfg: PX4Config):
    """robo ``AttitudeThrustCommand`` (FLU) -> SET_ATTITUDE_TARGET (NED/FRD)."""
    q = frames.quat_flu_to_ned(cmd.quaternion)
    mask = 0
    rates = np.zeros(3)
    if cmd.body_rates is None:
        mask |= _ATT_RATES_ONLY
    else:
        rates = frames.flu_to_frd(cmd.body_rates)
    return mav.set_attitude_target_encode(time_boot_ms % 2**32, cfg.target_system, cfg.target_component, mask,
                                          q.tolist(), *rates.tolist(), float(cmd.thrust))


def check_command(command: Command) -> None:
    """Raise ``ValueError``/``TypeError`` for a malformed command (shape, range, NaN)."""
    if isinstance(command, MotorCommand):
        m = np.asarray(command.motors, dtype=np.float64)
        if m.shape != (4,) or not np.isfinite(m).all() or (m < 0).any() or (m > 1).any():
            raise ValueError(f"motors must be 4 finite values in [0, 1], got {m}")
    elif isinstance(command, AttitudeThrustCommand):
        q = np.asarray(command.quaternion, dtype=np.float64)
        if q.shape != (4,) or not np.isfinite(q).all() or abs(np.linalg.norm(q) - 1) > 1e-3:
            raise ValueError(f"quaternion must be a finite unit (4,) array, got {q}")
        if not (np.isfinite(command.thrust) and 0 <= command.thrust <= 1):
            raise ValueError(f"thrust must be in [0, 1], got {command.thrust}")
        if command.body_rates is not None and np.asarray(command.body_rates).shape != (3,):
            raise ValueError(f"body_rates has shape {np.asarray(command.body_rates).shape}, expected (3,)")
    else:
        raise TypeError(f"PX4Robot sends MotorCommand or AttitudeThrustCommand, got {type(command).__name__}")
