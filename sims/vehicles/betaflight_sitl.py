"""Betaflight stand-ins on loopback, backed by robo's quadrotor sim.

``BetaflightSITLPeer`` plays the Betaflight SITL firmware's UDP side (``src/platform/SIMULATOR/
sitl.c``): it listens for ``fdm_packet`` (144 bytes) and ``rc_packet`` (40 bytes), drops packets
whose size is not exactly the struct's and fdm packets older than the last one (as ``sitl.c``
does), counts both, and answers each accepted fdm packet with a ``servo_packet`` (4 float32 in the
order the 4.6 SITL sends them, [FR, RL, FL, RR]: ``pwmCompleteMotorUpdate`` rotates Betaflight's motors
1..4 = RR, FR, RL, FL) computed by an angle-mode controller
(``sim_vehicle.attitude_to_motors``) from the received state and sticks. Layouts, frames and
sticks are decoded from Betaflight's documented conventions, independently of robo's driver:
gyro body FRD, accelerometer minus the body FLU specific force (``sitl.c`` negates it), quaternion
FRD -> NED, ENU velocity, AETR sticks, ARM on AUX1, angle limit 60 deg. Unlike the firmware it arms on
AUX1 without provisioning, boot grace time or calibration, and has no failsafe: tests of those run
against the real SITL (``sims.vehicles.betaflight_firmware``).

``BetaflightMSPServer`` is a flight controller's MSP port on TCP (Betaflight SITL serves UART1
on 5761): frames are decoded and encoded with ``pymsp`` (MSP v1 and v2). It answers
MSP_ATTITUDE, MSP_RAW_IMU, MSP_STATUS, MSP_MOTOR from a ``SimVehicle``, flies MSP_SET_RAW_RC sticks in angle
mode (arming on AUX1 with throttle low) and records MSP_SET_MOTOR while disarmed (motor test); a SET with a
malformed payload is answered with an error frame and counted in ``rejected``.
"""

from __future__ import annotations

import math
import socket
import struct
from functools import partial

import numpy as np

from .extras import require
from .loops import BackgroundLoops
from .sim_vehicle import SimVehicle, attitude_to_motors, quat_to_euler_zyx

_pymsp = require("pymsp")
MSPStreamProcessor, MSPv1, MSPv2 = _pymsp.MSPStreamProcessor, _pymsp.MSPv1, _pymsp.MSPv2

FDM_FORMAT, RC_FORMAT, SERVO_FORMAT = "<18d", "<d16H", "<4f"
MAX_ANGLE, MAX_YAW_RATE = math.radians(60.0), math.radians(400.0)
ARM_CHANNEL = 4
MSP_STATUS, MSP_RAW_IMU, MSP_MOTOR, MSP_ATTITUDE, MSP_SET_RAW_RC, MSP_SET_MOTOR = 101, 102, 104, 108, 200, 214


def sticks_to_setpoint(channels) -> tuple[float, float, float, float]:
    """AETR sticks (us) -> (roll, pitch, yaw rate, thrust) in FLU rad, rad/s and [0, 1]."""
    roll, pitch, throttle, yaw = (float(c) for c in channels[:4])
    return ((roll - 1500) / 500 * MAX_ANGLE, (pitch - 1500) / 500 * MAX_ANGLE,
            -(yaw - 1500) / 500 * MAX_YAW_RATE, (throttle - 1000) / 1000)


def _robo_from_ned_frd_quat(q) -> np.ndarray:
    w, x, y, z = q
    return np.array([w, x, -y, -z])


class BetaflightSITLPeer:
    """The firmware side of the SITL UDP protocol on loopback (ports chosen free when 0)."""

    def __init__(self, host: str = "127.0.0.1", state_port: int = 0, rc_port: int = 0, params=None):
        from sims.quadrotor import preset

        self.params = params or preset("racer5")
        self._state = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._state.bind((host, state_port))
        self._rc = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._rc.bind((host, rc_port))
        self.state_port, self.rc_port = self._state.getsockname()[1], self._rc.getsockname()[1]
        self.motor_address: tuple[str, int] | None = None  # where servo packets go (the bridge)
        self.channels = np.array([1500, 1500, 1000, 1500] + [1000] * 12)
        self.armed = False
        self.rejected = {"wrong_size": 0, "old_timestamp": 0}
        self.fdm_received: list[tuple] = []  # decoded fdm packets, for tests
        self._last_fdm_time = -math.inf
        self._last_rc_time = -math.inf
        self._loops = BackgroundLoops("BetaflightSITLPeer")

    def start(self, motor_address: tuple[str, int]) -> "BetaflightSITLPeer":
        self.motor_address = motor_address
        self._loops.start(partial(self._serve, self._state, self._on_fdm), partial(self._serve, self._rc, self._on_rc))
        return self

    def close(self) -> None:
        self._loops.stop()
        self._state.close()
        self._rc.close()

    def _serve(self, sock: socket.socket, handler) -> None:
        sock.settimeout(0.05)
        while self._loops.running:
            try:
                handler(sock.recv(512))
            except (socket.timeout, OSError):
                continue

    def _on_rc(self, data: bytes) -> None:
        if len(data) != struct.calcsize(RC_FORMAT):
            self.rejected["wrong_size"] += 1
            return
        t, *channels = struct.unpack(RC_FORMAT, data)
        if t < self._last_rc_time:
            self.rejected["old_timestamp"] += 1
            return
        self._last_rc_time = t
        self.channels = np.array(channels)
        if channels[ARM_CHANNEL] > 1700 and (self.armed or channels[2] < 1050):
            self.armed = True
        elif channels[ARM_CHANNEL] <= 1700:
            self.armed = False

    def _on_fdm(self, data: bytes) -> None:
        if len(data) != struct.calcsize(FDM_FORMAT):
            self.rejected["wrong_size"] += 1
            return
        v = struct.unpack(FDM_FORMAT, data)
        if v[0] < self._last_fdm_time:  # sitl.c: "don't use old packet"
            self.rejected["old_timestamp"] += 1
            return
        self._last_fdm_time = v[0]
        self.fdm_received.append(v)
        gyro_frd, quat = np.array(v[1:4]), _robo_from_ned_frd_quat(v[7:11])
        state = np.zeros(17)
        state[3:7], state[10:13] = quat, gyro_frd * np.array([1.0, -1.0, -1.0])
        motors = attitude_to_motors(state, *sticks_to_setpoint(self.channels), self.params) if self.armed \
            else np.zeros(4)
        packet = motors[[0, 2, 3, 1]]  # robo FR, BR, BL, FL -> servo_packet FR, RL, FL, RR
        self._state.sendto(struct.pack(SERVO_FORMAT, *packet), self.motor_address)


class BetaflightMSPServer:
    """A TCP MSP endpoint (one client at a time) serving a ``SimVehicle`` in Betaflight's units."""

    def __init__(self, vehicle: SimVehicle | None = None, host: str = "127.0.0.1", port: int = 0,
                 acc_1g: float = 512.0):
        self.vehicle = vehicle or SimVehicle()
        self.acc_1g = acc_1g
        self._server = socket.create_server((host, port))
        self._server.settimeout(0.05)
        self.address = "tcp://%s:%d" % self._server.getsockname()
        self.requests: list = []  # decoded pymsp frames, for tests
        self.motor_test = np.zeros(8)
        self.silent = False  # True: stop answering (link loss)
        self.inject: list[bytes] = []  # raw bytes to send before the next reply (fault injection)
        self.rejected = {"bad_payload": 0}  # requests answered with an error frame
        self._loops = BackgroundLoops("BetaflightMSPServer")

    def start(self) -> "BetaflightMSPServer":
        self.vehicle.start()
        self._loops.start(self._serve)
        return self

    def close(self) -> None:
        self._loops.stop()
        self.vehicle.stop()
        self._server.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def _serve(self) -> None:
        while self._loops.running:
            try:
                conn, _ = self._server.accept()
            except (socket.timeout, OSError):
                continue
            conn.settimeout(0.05)
            stream = MSPStreamProcessor()
            with conn:
                while self._loops.running:
                    try:
                        data = conn.recv(4096)
                    except socket.timeout:
                        continue
                    except OSError:
                        break
                    if not data:
                        break
                    for frame in stream.push_bytes(data):
                        reply = self.reply(frame)
                        if reply is not None:
                            conn.sendall(b"".join(self.inject) + reply)
                            self.inject.clear()

    def reply(self, frame) -> bytes | None:
        """The bytes answering one decoded request (a pymsp frame, recorded in ``requests``): its reply, an error
        frame (``$M!``/``$X!``, as Betaflight refuses a message) for a malformed payload, counted in ``rejected``,
        or None (an unknown command, or ``silent``)."""
        self.requests.append(frame)
        if self.silent:
            return None
        try:
            return self._answer(frame)
        except ValueError:
            self.rejected["bad_payload"] += 1
            return self._pack(frame, b"", "!")

    @staticmethod
    def _pack(frame, payload: bytes, direction: str = ">") -> bytes:
        """A frame of ``frame``'s command and MSP version; the checksum excludes the header's direction."""
        cmd = frame.message_id
        packed = MSPv2().pack(cmd, payload) if frame.protocol_version == 2 else MSPv1().pack(cmd, payload)
        return packed[:2] + direction.encode() + packed[3:]

    def _answer(self, frame) -> bytes | None:
        """The reply to a request; ValueError if its payload is malformed."""
        cmd, payload = frame.message_id, frame.payload
        s = self.vehicle.snapshot()
        if cmd == MSP_ATTITUDE:
            roll, pitch, yaw = np.degrees(quat_to_euler_zyx(s.quaternion))
            out = struct.pack("<hhh", round(roll * 10), round(pitch * 10), round(-yaw) % 360)
        elif cmd == MSP_RAW_IMU:
            gyro = np.degrees(s.angular_velocity) * 16.4  # sensor counts, FLU (as Betaflight 4.6 sends them)
            acc = s.specific_force / 9.81 * self.acc_1g
            out = struct.pack("<9h", *(round(a) for a in acc), *(round(g) for g in gyro), 0, 0, 0)
        elif cmd == MSP_MOTOR:  # Betaflight's motors 1..4 = RR, FR, RL, FL; PWM us (1000 = off)
            m = self.vehicle.commanded if self.vehicle.armed else np.zeros(4)
            out = struct.pack("<8H", *(1000 + round(1000 * float(x)) for x in m[[1, 0, 2, 3]]), 0, 0, 0, 0)
        elif cmd == MSP_STATUS:
            out = struct.pack("<HHHIB", 125, 0, 1, int(self.vehicle.armed), 0)
        elif cmd == MSP_SET_RAW_RC:
            if len(payload) % 2 or len(payload) < 2 * (ARM_CHANNEL + 1):
                raise ValueError(f"MSP_SET_RAW_RC payload has {len(payload)} bytes; expected a uint16 a channel, "
                                 f"at least {ARM_CHANNEL + 1} channels")
            self._fly(struct.unpack(f"<{len(payload) // 2}H", payload))
            out = b""
        elif cmd == MSP_SET_MOTOR:
            if len(payload) != 16:
                raise ValueError(f"MSP_SET_MOTOR payload has {len(payload)} bytes, expected 16 (uint16 x 8)")
            if not self.vehicle.armed:
                self.motor_test = np.array(struct.unpack("<8H", payload), dtype=np.float64)
            out = b""
        else:
            return None
        return self._pack(frame, out)

    def _fly(self, channels) -> None:
        arm = channels[ARM_CHANNEL] > 1700
        if arm and not self.vehicle.armed and channels[2] < 1050:
            self.vehicle.armed = True
        elif not arm:
            self.vehicle.armed = False
        self.vehicle.set_attitude(*sticks_to_setpoint(channels))
