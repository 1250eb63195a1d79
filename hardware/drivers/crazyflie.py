"""Crazyflie 2.x driver over cflib: log blocks for state, RPYT setpoints, motor power parameters.

State: three cflib log blocks (the firmware caps a block's payload at 26 bytes), each a
``LogConfig`` on the firmware's TOC variables: ``stateEstimate.x/y/z`` (m) and ``.vx/vy/vz``
(m/s) in the estimator's world frame (x forward at boot, z up: FLU), ``stateEstimate.qx/qy/qz/qw``
(body -> world), and ``gyro.x/y/z`` in **deg/s** (body FLU; converted to rad/s here).

Attitude/thrust: ``Commander.send_setpoint(roll, pitch, yawrate, thrust)`` (CRTP port 3,
``struct CommanderCrtpLegacyValues``): roll and pitch in degrees with robo's FLU signs (cflib
negates pitch into the firmware's legacy nose-up-positive convention), yaw rate in deg/s
**clockwise positive** (the firmware's rpyt decoder: "legacy rate input is inverted"), thrust as
uint16 of full power. The quaternion's yaw is not used (the RPYT commander has no absolute yaw in
rate mode): ``body_rates[2]`` is the yaw-rate command (0 when omitted).

Motor-level: the firmware's ``motorPowerSet`` parameter group (``enable``, ``m1..m4`` uint16;
m1 front-right, m2 back-right, m3 back-left, m4 front-left = robo's order). Stock firmware has
no CRTP motor setpoint type, so this is the only motor path; it goes through parameter writes
(one acknowledged round trip per motor), fine for bench tests and ground checks, too slow for
closed-loop flight at 100 Hz: fly with ``AttitudeThrustCommand``.

Arming: the supervisor's arming request (CRTP protocol >= 12), confirmed by the supervisor's
"is armed" bit, then a zero setpoint to unlock thrust, as the firmware requires. Older firmware
has no arming: ``arm`` only sends the unlocking zero setpoint.

Robustness: log packets of the wrong size, from unknown blocks, or with a firmware timestamp not
newer than the last of their block (24-bit ms counter, wrap handled) are rejected and counted in
``rejected`` (never raised); no log data for ``link_timeout`` s, or cflib reporting the link lost,
makes ``read_state``/``send`` raise ``RobotError``.
"""

from __future__ import annotations

import math
import struct
import threading
import time

import numpy as np

from .attitude import attitude_setpoint
from .base import AttitudeThrustCommand, Command, MotorCommand, RobotError, RobotState
from .extras import require
from .threads import wait_until

LogTocElement = require("cflib.crazyflie.log").LogTocElement

POSITION_VELOCITY = ["stateEstimate." + n for n in ("x", "y", "z", "vx", "vy", "vz")]
QUATERNION = ["stateEstimate." + n for n in ("qx", "qy", "qz", "qw")]
GYRO = ["gyro." + n for n in ("x", "y", "z")]
LOG_BLOCKS = {"robo_pv": POSITION_VELOCITY, "robo_quat": QUATERNION, "robo_gyro": GYRO}
THRUST_MAX = 0xFFFF
TIMESTAMP_WRAP = 1 << 24


def command_to_setpoint(command: AttitudeThrustCommand) -> tuple[float, float, float, int]:
    """robo attitude/thrust command -> ``send_setpoint`` arguments (roll deg, pitch deg, yaw rate
    deg/s clockwise +, thrust uint16). Raises ``ValueError`` for NaN or wrong shapes."""
    roll, pitch, yaw_rate, thrust = attitude_setpoint(command)
    return math.degrees(roll), math.degrees(pitch), -math.degrees(yaw_rate), int(round(thrust * THRUST_MAX))


def log_to_state(values: dict, timestamp: float) -> RobotState:
    """cflib log values (names as in ``LOG_BLOCKS``; gyro in deg/s) -> ``RobotState`` (SI, FLU)."""
    g = lambda names: np.array([values.get(n, np.nan) for n in names], dtype=np.float64)  # noqa: E731
    pv, q, gyro = g(POSITION_VELOCITY), g(QUATERNION), g(GYRO)
    quat = np.array([q[3], q[0], q[1], q[2]]) if np.all(np.isfinite(q)) else np.array([1.0, 0.0, 0.0, 0.0])
    return RobotState(timestamp=timestamp, position=pv[:3], velocity=pv[3:], quaternion=quat,
                      angular_velocity=np.radians(gyro))


def timestamp_is_newer(stamp: int, last: int | None) -> bool:
    """Whether a 24-bit firmware ms timestamp is strictly newer than ``last`` (wrap-around safe)."""
    if last is None:
        return True
    delta = (stamp - last) % TIMESTAMP_WRAP
    return 0 < delta < TIMESTAMP_WRAP // 2


class CrazyflieRobot:
    """``Robot`` driver for a Crazyflie (or a CRTP stand-in) at a cflib URI.

    Args:
        uri: cflib link URI, e.g. ``radio://0/80/2M/E7E7E7E7E7`` or ``udp://127.0.0.1:19850``.
        log_period_ms: period of each state log block (10 ms = 100 Hz, the firmware's finest).
        link_timeout: s without log data before the link counts as lost.
    """

    name = "crazyflie"

    def __init__(self, uri: str = "radio://0/80/2M/E7E7E7E7E7", log_period_ms: int = 10, link_timeout: float = 0.5):
        if not 10 <= log_period_ms <= 2550:
            raise ValueError(f"log_period_ms={log_period_ms}; the firmware accepts 10..2550 ms")
        self.uri, self.log_period_ms, self.link_timeout = uri, log_period_ms, link_timeout
        self._cf = None
        self._lock = threading.Lock()
        self._values: dict[str, float] = {}
        self._stamps: dict[int, int] = {}  # block id -> last firmware timestamp
        self._blocks: dict[int, tuple[list, list, int]] = {}  # block id -> (names, type ids, payload size)
        self._firmware_ms = 0
        self._last_rx: float | None = None
        self._lost: str | None = None
        self._armed = False
        self._motor_power_enabled = False
        self.rejected = {"malformed": 0, "out_of_order": 0, "unknown_block": 0}

    # connection ------------------------------------------------------------------------------
    def connect(self, timeout: float = 5.0) -> None:
        import cflib.crtp
        from cflib.crazyflie import Crazyflie
        from cflib.crazyflie.log import LogConfig
        from cflib.crtp.crtpstack import CRTPPort

        cflib.crtp.init_drivers()
        ready, failed = threading.Event(), []
        cf = Crazyflie(rw_cache=None)
        cf.fully_connected.add_callback(lambda uri: ready.set())
        cf.connection_failed.add_callback(lambda uri, msg: (failed.append(msg), ready.set()))
        cf.connection_lost.add_callback(self._on_lost)
        cf.add_header_callback(self._on_log_packet, CRTPPort.LOGGING, 2)
        self._cf = cf
        cf.open_link(self.uri)
        if not ready.wait(timeout) or failed:
            self.close()
            why = failed[0] if failed else f"no answer within {timeout} s"
            raise RobotError(f"could not connect to the Crazyflie at {self.uri}: {why}; check that it is powered, "
                             "the radio/URI is right and no other client holds the link")
        for name, variables in LOG_BLOCKS.items():
            conf = LogConfig(name=name, period_in_ms=self.log_period_ms)
            for var in variables:
                conf.add_variable(var, "float")
            cf.log.add_config(conf)
            size = sum(LogTocElement.get_size_from_id(v.fetch_as) for v in conf.variables)
            self._blocks[conf.id] = ([v.name for v in conf.variables], [v.fetch_as for v in conf.variables], size)
            conf.start()
        if wait_until(self._has_all_log_values, timeout):
            return
        self.close()
        raise RobotError(f"connected to {self.uri} but no state log data arrived within {timeout} s; "
                         "check that the firmware logs stateEstimate.* and gyro.*")

    def _has_all_log_values(self) -> bool:
        """Whether every variable of ``LOG_BLOCKS`` has arrived at least once."""
        with self._lock:
            return all(v in self._values for vs in LOG_BLOCKS.values() for v in vs)

    def _on_lost(self, uri: str, message: str) -> None:
        self._lost = f"the link to the Crazyflie at {uri} was lost ({message.splitlines()[0] if message else '?'})"

    def _on_log_packet(self, pk) -> None:
        """Validate and decode one log data packet (CRTP port 5, channel 2) with cflib's type table."""
        data = bytes(pk.data)
        block = self._blocks.get(data[0]) if data else None
        if block is None:
            self.rejected["unknown_block" if data else "malformed"] += 1
            return
        names, types, size = block
        if len(data) != 4 + size:
            self.rejected["malformed"] += 1
            return
        stamp = int.from_bytes(data[1:4], "little")
        with self._lock:
            if not timestamp_is_newer(stamp, self._stamps.get(data[0])):
                self.rejected["out_of_order"] += 1
                return
            self._stamps[data[0]] = stamp
            offset = 4
            for name, t in zip(names, types):
                n, fmt = LogTocElement.get_size_from_id(t), LogTocElement.get_unpack_string_from_id(t)
                self._values[name] = struct.unpack(fmt, data[offset:offset + n])[0]
                offset += n
            self._last_rx = time.monotonic()
            self._firmware_ms = stamp

    def _check_link(self) -> None:
        if self._cf is None:
            raise RobotError("the Crazyflie driver is not connected; call connect() first")
        if self._lost:
            raise RobotError(self._lost + "; check the radio and battery, then connect() again")
        age = time.monotonic() - (self._last_rx or 0.0)
        if age > self.link_timeout:
            raise RobotError(f"no state from the Crazyflie at {self.uri} for {age:.2f} s (link_timeout "
                             f"{self.link_timeout} s): link lost; check the radio and battery, then connect() again")

    # Robot API -------------------------------------------------------------------------------
    def read_state(self) -> RobotState | None:
        if self._last_rx is None:
            return None
        self._check_link()
        with self._lock:
            state = log_to_state(self._values, self._last_rx)
            state.extra = {"firmware_time_ms": self._firmware_ms, "rejected": dict(self.rejected)}
        state.armed = self._armed
        return state

    def arm(self, timeout: float = 1.0) -> None:
        self._check_link()
        if self._cf.platform.get_protocol_version() < 12:  # no supervisor: nothing to arm or to confirm
            self._cf.commander.send_setpoint(0.0, 0.0, 0.0, 0)  # unlocks thrust
            self._armed = True
            return
        self._cf.supervisor.send_arming_request(True)
        if not wait_until(lambda: self._cf.supervisor.is_armed, timeout, interval=0.02):
            raise RobotError(f"the Crazyflie refused to arm within {timeout} s (supervisor state "
                             f"{self._cf.supervisor.read_state_list()}); check that it is level and not crashed")
        self._cf.commander.send_setpoint(0.0, 0.0, 0.0, 0)  # unlocks thrust
        self._armed = True

    def disarm(self) -> None:
        self._check_link()
        self._stop_motors()
        if self._cf.platform.get_protocol_version() >= 12:
            self._cf.supervisor.send_arming_request(False)
        self._armed = False

    def send(self, command: Command) -> None:
        if isinstance(command, AttitudeThrustCommand):
            setpoint = command_to_setpoint(command)
            self._check_link()
            if self._motor_power_enabled:
                self._cf.param.set_value("motorPowerSet.enable", 0)
                self._motor_power_enabled = False
            self._cf.commander.send_setpoint(*setpoint)
        elif isinstance(command, MotorCommand):
            motors = np.asarray(command.motors, dtype=np.float64)
            if motors.shape != (4,) or not np.all(np.isfinite(motors)):
                raise ValueError(f"motors must be 4 finite values in [0, 1], got {command.motors!r}")
            self._check_link()
            for i, m in enumerate(np.clip(motors, 0.0, 1.0), start=1):
                self._cf.param.set_value(f"motorPowerSet.m{i}", int(round(m * THRUST_MAX)))
            if not self._motor_power_enabled:
                self._cf.param.set_value("motorPowerSet.enable", 1)
                self._motor_power_enabled = True
        else:
            raise TypeError(f"CrazyflieRobot cannot send {type(command).__name__}; "
                            "use AttitudeThrustCommand or MotorCommand")

    def _stop_motors(self) -> None:
        self._cf.commander.send_stop_setpoint()
        if self._motor_power_enabled:
            self._cf.param.set_value("motorPowerSet.enable", 0)
            self._motor_power_enabled = False

    def close(self) -> None:
        if self._cf is None:
            return
        try:
            if self._armed and self._cf.link is not None:
                self._stop_motors()
                self._cf.supervisor.send_arming_request(False)
        finally:
            self._armed = False
            self._cf.close_link()  # sends a zero setpoint first
            self._cf = None

