"""PX4 over MAVLink (``pymavlink``): heartbeat, offboard mode, arming, setpoints, telemetry.

Wire protocol (MAVLink 2, ``common`` dialect; frames converted in ``hardware.drivers.frames``,
messages built in ``hardware.drivers.px4_protocol``):

* out: HEARTBEAT (GCS) at ``heartbeat_hz``; COMMAND_LONG MAV_CMD_DO_SET_MODE (custom main mode
  6 = OFFBOARD) and MAV_CMD_COMPONENT_ARM_DISARM, each confirmed by a COMMAND_ACK;
  SET_ATTITUDE_TARGET (attitude/thrust, NED/FRD) and SET_ACTUATOR_CONTROL_TARGET (motors).
* in: HEARTBEAT (armed flag, mode), ATTITUDE_QUATERNION / ATTITUDE (attitude and FRD body
  rates), LOCAL_POSITION_NED, COMMAND_ACK.

Direct motor control: SET_ACTUATOR_CONTROL_TARGET (id 139), ``controls[0:4]`` = motors in [0, 1]
in PX4's quad-X output order (1 FR, 2 BL, 3 FL, 4 BR), group ``actuator_group``. PX4 <= v1.13
accepts it in offboard mode (PX4 PR #18581); PX4 v1.14+ dropped MAVLink direct-actuator offboard
and takes motor setpoints only as ``ActuatorMotors`` over uXRCE-DDS/ROS 2 (PR #22222), so on
v1.14+ fly ``control="attitude"`` or run a firmware that maps this message to actuator_motors.

Malformed frames (bad CRC, garbage bytes) come out of pymavlink's robust parser as BAD_DATA and
are counted; telemetry whose ``time_boot_ms`` is not newer than the newest of its type is
counted as stale and dropped (unless it is more than ``reboot_gap_ms`` older: a rebooted vehicle,
counted in ``reboots`` and accepted). Nothing received ever raises in the receiver thread.

Signing (MAVLink 2 message signing, ``hardware.drivers.mavlink_signing``): with a key (``signing_key``,
``PX4Config.signing_key_file`` or ``$ROBO_MAVLINK_KEY``) every message robo sends is signed (link id
``signing_link_id``, timestamps from the wall clock) and every received message must carry a valid
signature with a timestamp newer than the last of its stream: unsigned ones are counted in
``stats["unsigned"]``, wrongly signed or replayed ones in ``stats["bad_signature"]`` (both in
``rejected_messages``), each kind logged once. The vehicle must hold the same key (see the hardware guide).
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from . import frames
from .base import AttitudeThrustCommand, Command, MotorCommand, RobotError, RobotState
from .extras import require
from . import mavlink_signing as signing
from .threads import join_loops, start_loops
from .px4_protocol import (FORCE_DISARM, PX4_MAIN_MODE_OFFBOARD, TELEMETRY, PX4Config, attitude_message,
                           check_command, listens_everywhere, motor_message, px4_main_mode)

mavutil = require("pymavlink.mavutil")
mavlink = require("pymavlink.dialects.v20.common")
log = logging.getLogger(__name__)
REJECTIONS = ("malformed", "stale", "unknown", "ignored_system", "unsigned", "bad_signature")


class PX4Robot:
    """A PX4 vehicle over MAVLink, behind robo's ``Robot`` interface (all values FLU, SI).

    ``stats`` counts received messages and rejected ones (``malformed``: BAD_DATA frames or bytes
    pymavlink could not frame, ``stale``: out-of-order telemetry, ``unknown``: message ids outside
    the common dialect, ``ignored_system``: other systems; with a signing key ``unsigned`` and
    ``bad_signature``); ``last_rejection`` says in one line why the newest rejected bytes were
    refused. ``local_port``: our bound UDP port. ``signing_key``: 32 bytes that override the config's
    key file and ``$ROBO_MAVLINK_KEY`` (kept out of the config, which runs save).
    """

    name = "px4"

    def __init__(self, config: PX4Config | None = None, *, signing_key: bytes | None = None, **overrides):
        self.config = config or PX4Config(**overrides)
        self._key = signing.resolve_key(signing_key, self.config.signing_key_file)
        self._rx_signing = signing.incoming_signing(self._key) if self._key else None
        self._tx_timestamp = 0  # newest signing timestamp sent: a reconnect goes on after it
        self._link = None
        self._tx = self._rx = None
        self._tx_lock = threading.Lock()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._t0 = time.monotonic()
        self._state: RobotState | None = None
        self._newest_boot_ms: dict[str, int] = {}
        self._att: tuple | None = None  # (q FLU, rates FLU, time_boot_ms)
        self._pos: tuple | None = None  # (p FLU, v FLU, time_boot_ms)
        self._acks: dict[int, int] = {}
        self._heartbeat: tuple | None = None  # (armed, main_mode, time)
        self._confirmation = 0
        self.stats = {"received": 0, "malformed": 0, "malformed_bytes": 0, "stale": 0, "unknown": 0,
                      "ignored_system": 0, "unsigned": 0, "bad_signature": 0, "reboots": 0}
        self.last_rejection: str | None = None
        self._logged: set[str] = set()
        self._rx = self._new_parser()

    @property
    def signed(self) -> bool:
        """True if robo signs what it sends and accepts only signed messages."""
        return self._key is not None

    @property
    def rejected_messages(self) -> int:
        """Received messages dropped for their signature (unsigned, wrong key, replayed)."""
        return self.stats["unsigned"] + self.stats["bad_signature"]

    # Link ----------------------------------------------------------------------------------------------
    def connect(self, timeout: float = 5.0) -> None:
        cfg = self.config
        if self._link is not None:
            raise RobotError("PX4Robot is already connected; close() it first")
        try:
            self._link = mavutil.mavlink_connection(cfg.connection, baud=cfg.baud, source_system=cfg.system_id,
                                                    source_component=cfg.component_id)
        except ImportError as e:  # pymavlink opens serial ports with pyserial, an optional dependency
            raise RobotError(f"cannot open {cfg.connection!r}: {e}; for serial links pip install pyserial") from e
        except Exception as e:
            raise RobotError(f"cannot open MAVLink link {cfg.connection!r}: {e}") from e
        if listens_everywhere(cfg.connection):
            log.warning("PX4 link %s listens on every interface and accepts MAVLink from any sender there; %s",
                        cfg.connection, "unsigned and wrongly signed messages are dropped" if self.signed else
                        "bind one address (udpin:127.0.0.1:14540 for SITL) and set a signing key")
        self._state = self._att = self._pos = self._heartbeat = None  # nothing from an earlier connection
        self._newest_boot_ms.clear()
        self._tx = mavlink.MAVLink(self._link, cfg.system_id, cfg.component_id)
        self._tx.WIRE_PROTOCOL_VERSION = "2.0"
        if self._key:
            signing.sign_outgoing(self._tx, self._key, cfg.signing_link_id,
                                  max(signing.now_timestamp(), self._tx_timestamp + 1))
        self._rx = self._new_parser()
        self._stop.clear()
        self._threads = start_loops("px4", (self._receive_loop, self._heartbeat_loop))
        deadline = time.monotonic() + timeout
        if not self._wait(lambda: self._heartbeat is not None, deadline):
            self.close()
            raise RobotError(f"no HEARTBEAT from system {cfg.target_system} at {cfg.connection} within {timeout} s; "
                             + self._signing_hint() + "check the address/port, that PX4 streams MAVLink there, "
                             "and the target_system id")
        if not self._wait(lambda: self._att is not None and self._pos is not None, deadline):
            self.close()
            raise RobotError(f"PX4 at {cfg.connection} sends heartbeats but no ATTITUDE(_QUATERNION) and "
                             "LOCAL_POSITION_NED; enable those streams (MAV_x_MODE / SET_MESSAGE_INTERVAL)")

    @property
    def local_port(self) -> int | None:
        sock = getattr(self._link, "port", None)
        return sock.getsockname()[1] if hasattr(sock, "getsockname") else None

    def close(self) -> None:
        if self._link is None:
            return
        if self.armed:  # never leave a vehicle armed behind a closed link
            try:
                self.send(self._neutral())
                self._command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 0, FORCE_DISARM, tries=1)
            except RobotError:
                pass
        self._stop.set()
        join_loops(self._threads)
        self._link.close()
        self._link = None
        if self._key:
            self._tx_timestamp = self._tx.signing.timestamp

    def _signing_hint(self) -> str:
        if self.stats["unsigned"]:
            return (f"dropped {self.stats['unsigned']} unsigned messages (robo has a signing key: provision the same "
                    "key on the vehicle, or unset it); ")
        if self.stats["bad_signature"]:
            return (f"dropped {self.stats['bad_signature']} messages signed with another key or replayed: "
                    "check that robo and the vehicle hold the same key and the clocks are right; ")
        return ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Modes and arming ------------------------------------------------------------------------------------
    @property
    def armed(self) -> bool:
        return bool(self._heartbeat and self._heartbeat[0])

    @property
    def main_mode(self) -> int | None:
        return self._heartbeat[1] if self._heartbeat else None

    def set_offboard(self) -> None:
        """Stream neutral setpoints for ``offboard_stream_s`` (PX4 refuses offboard without them),
        then switch to OFFBOARD and wait for the ACK."""
        end = time.monotonic() + self.config.offboard_stream_s
        while time.monotonic() < end:
            self.send(self._neutral())
            time.sleep(0.02)
        self._command(mavlink.MAV_CMD_DO_SET_MODE, mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, PX4_MAIN_MODE_OFFBOARD)

    def _neutral(self) -> Command:
        """Motors off, or level attitude at zero thrust, per ``config.control``."""
        if self.config.control == "motors":
            return MotorCommand(np.zeros(4))
        return AttitudeThrustCommand(np.array([1.0, 0.0, 0.0, 0.0]), 0.0)

    def arm(self) -> None:
        """Switch to OFFBOARD if needed, then arm; raises ``RobotError`` if PX4 refuses."""
        if self.main_mode != PX4_MAIN_MODE_OFFBOARD:
            self.set_offboard()
        self._command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)

    def disarm(self) -> None:
        self._command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 0)

    def kill(self) -> None:
        """Disarm now, even in flight (PX4's forced disarm)."""
        self._command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 0, FORCE_DISARM)

    def _command(self, command: int, *params: float, tries: int | None = None) -> None:
        """COMMAND_LONG with retries; raises ``RobotError`` unless a COMMAND_ACK says ACCEPTED."""
        cfg = self.config
        p = (list(params) + [0.0] * 7)[:7]
        name = mavlink.enums["MAV_CMD"][command].name
        for attempt in range(tries or cfg.command_tries):
            with self._cond:
                self._acks.pop(command, None)
            self._send_message(self._tx.command_long_encode(cfg.target_system, cfg.target_component, command,
                                                            attempt, *p))
            if self._wait(lambda: command in self._acks, time.monotonic() + cfg.ack_timeout):
                result = self._acks[command]
                if result == mavlink.MAV_RESULT_ACCEPTED:
                    return
                entry = mavlink.enums["MAV_RESULT"].get(result)
                raise RobotError(f"PX4 refused {name}{tuple(p[:2])}: {entry.name if entry else f'result {result}'}; "
                                 "check the vehicle's pre-arm/mode messages (e.g. in QGroundControl)")
        hint = self._signing_hint().rstrip("; ")
        raise RobotError(f"no COMMAND_ACK for {name} from {cfg.connection} after {tries or cfg.command_tries} tries"
                         + (f"; {hint}" if hint else ""))

    # Commands and state ---------------------------------------------------------------------------------
    def send(self, command: Command) -> None:
        check_command(command)
        now = time.monotonic() - self._t0
        if isinstance(command, MotorCommand):
            msg = motor_message(self._tx, command, int(now * 1e6), self.config)
        else:
            msg = attitude_message(self._tx, command, int(now * 1e3), self.config)
        self._send_message(msg)

    def read_state(self) -> RobotState | None:
        return self._state

    def _send_message(self, msg) -> None:
        if self._link is None:
            raise RobotError("PX4Robot is not connected; call connect() first")
        with self._tx_lock:
            self._tx.send(msg)

    def _wait(self, predicate, deadline: float) -> bool:
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    # Threads --------------------------------------------------------------------------------------------
    def _new_parser(self) -> mavlink.MAVLink:
        rx = mavlink.MAVLink(None)
        rx.robust_parsing = True
        if self._rx_signing is not None:  # one signing state for every parser: replay protection survives a reset
            signing.verify_signatures(rx, self._rx_signing)
        return rx

    def _heartbeat_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._send_message(self._tx.heartbeat_encode(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID,
                                                             0, 0, mavlink.MAV_STATE_ACTIVE))
            except (RobotError, OSError):
                pass
            self._stop.wait(1.0 / self.config.heartbeat_hz)

    def _receive_loop(self) -> None:
        datagrams = isinstance(self._link, mavutil.mavudp)
        while not self._stop.is_set():
            try:
                if not self._link.select(0.05):
                    continue
                data = self._link.recv() if datagrams else self._link.recv(256)
            except (OSError, ValueError, AttributeError):
                if self._stop.is_set():
                    return
                time.sleep(0.01)
                continue
            if data:
                self._handle_bytes(data if isinstance(data, (bytes, bytearray)) else data.encode("latin-1"),
                                   datagrams)

    def _handle_bytes(self, data: bytes, datagram: bool) -> None:
        """Parse received bytes; never raises. A UDP datagram holds whole frames, so a partial
        frame left at its end is garbage and the parser starts afresh."""
        try:
            msgs = self._rx.parse_buffer(data) or []
        except Exception as e:  # pymavlink raises on some corrupt headers even in robust mode
            msgs = []
            self._malformed(len(data), f"{type(e).__name__}: {e}")
            self._rx = self._new_parser()
        if datagram and self._rx.buf_len() > 0:
            self._malformed(self._rx.buf_len(), f"{self._rx.buf_len()} bytes of an incomplete frame")
            self._rx = self._new_parser()
        telemetry = False
        for msg in msgs:
            telemetry |= self._handle_message(msg)
        if self._key and msgs:  # send after the newest timestamp accepted, as the signing spec asks
            with self._tx_lock:
                if self._tx is not None:
                    self._tx.signing.timestamp = max(self._tx.signing.timestamp, self._rx_signing.timestamp)
        if telemetry and self._att is not None:
            self._publish_state()

    def _reject(self, kind: str, why: str) -> bool:
        """Count a refused message; log the first of each signature kind. Returns False (not telemetry)."""
        self.stats[kind] += 1
        self.last_rejection = f"{kind}: {why}".replace("\n", " ")
        if kind in ("unsigned", "bad_signature") and kind not in self._logged:
            self._logged.add(kind)
            log.warning("PX4 link %s: dropped %s (further ones are counted in stats[%r])",
                        self.config.connection, why, kind)
        return False

    def _malformed(self, n_bytes: int, why: str) -> bool:
        self.stats["malformed_bytes"] += n_bytes
        return self._reject("malformed", why)

    def _handle_message(self, msg) -> bool:
        kind = msg.get_type()
        if kind == "BAD_DATA":
            refused = signing.rejection_kind(msg)
            if refused is None:
                return self._malformed(len(msg.data), str(msg.reason))
            src = signing.frame_source(msg.data) or ("?", "?")
            what = "an unsigned" if refused == "unsigned" else "a wrongly signed or replayed"
            return self._reject(refused, f"{what} message (id {src[1]}) from system {src[0]}")
        if kind.startswith("UNKNOWN"):  # an id outside the common dialect: no CRC (nor signature) check was possible
            return self._reject("unknown", f"{kind}: a message id outside the common dialect")
        if msg.get_srcSystem() != self.config.target_system:
            return self._reject("ignored_system", f"{kind} from system {msg.get_srcSystem()}, "
                                                  f"not target_system {self.config.target_system}")
        self.stats["received"] += 1
        if kind in TELEMETRY:
            newest = self._newest_boot_ms.get(kind, -1)
            if newest - msg.time_boot_ms > self.config.reboot_gap_ms:  # clock restarted: the vehicle rebooted
                self.stats["reboots"] += 1
                self._newest_boot_ms.clear()
            elif msg.time_boot_ms <= newest:
                return self._reject("stale", f"{kind} time_boot_ms {msg.time_boot_ms} <= newest {newest}")
            self._newest_boot_ms[kind] = msg.time_boot_ms
            rates = None if kind == "LOCAL_POSITION_NED" else frames.frd_to_flu(
                [msg.rollspeed, msg.pitchspeed, msg.yawspeed])
            if kind == "ATTITUDE_QUATERNION":
                self._att = (frames.quat_ned_to_flu([msg.q1, msg.q2, msg.q3, msg.q4]), rates, msg.time_boot_ms)
            elif kind == "ATTITUDE" and "ATTITUDE_QUATERNION" not in self._newest_boot_ms:
                q = frames.euler_to_quat(msg.roll, msg.pitch, msg.yaw)
                self._att = (frames.quat_ned_to_flu(q), rates, msg.time_boot_ms)
            elif kind == "LOCAL_POSITION_NED":
                self._pos = (frames.ned_to_flu([msg.x, msg.y, msg.z]), frames.ned_to_flu([msg.vx, msg.vy, msg.vz]),
                             msg.time_boot_ms)
            return True
        with self._cond:
            if kind == "HEARTBEAT" and msg.type != mavlink.MAV_TYPE_GCS:
                armed = bool(msg.base_mode & mavlink.MAV_MODE_FLAG_SAFETY_ARMED)
                self._heartbeat = (armed, px4_main_mode(msg.custom_mode), time.monotonic())
            elif kind == "COMMAND_ACK":
                self._acks[msg.command] = msg.result
            self._cond.notify_all()
        return False

    def _publish_state(self) -> None:
        q, w, t_att = self._att
        p, v, t_pos = self._pos if self._pos is not None else (np.full(3, np.nan), np.full(3, np.nan), None)
        hb = self._heartbeat
        self._state = RobotState(
            timestamp=time.monotonic(), position=p, velocity=v, quaternion=q, angular_velocity=w,
            armed=bool(hb and hb[0]),
            extra={"attitude_time_boot_ms": t_att, "position_time_boot_ms": t_pos,
                   "main_mode": hb[1] if hb else None})
        with self._cond:
            self._cond.notify_all()
