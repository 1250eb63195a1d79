"""A simulated PX4 vehicle: robo's quadrotor simulator behind a MAVLink 2 UDP endpoint.

It speaks to a ground station / offboard computer the way PX4 does: HEARTBEATs (PX4 autopilot,
armed flag in ``base_mode``, main mode in ``custom_mode`` bits 16..23), COMMAND_ACKs for
MAV_CMD_COMPONENT_ARM_DISARM and MAV_CMD_DO_SET_MODE (offboard is refused unless setpoints have
been streaming), and telemetry LOCAL_POSITION_NED + ATTITUDE_QUATERNION in NED/FRD. Everything it
receives is decoded by pymavlink and kept in ``received`` (so tests check robo's bytes against the
protocol library). SET_ACTUATOR_CONTROL_TARGET (PX4 quad-X output order 1 FR, 2 BL, 3 FL, 4 BR,
values in [0, 1]) drives the motors; SET_ATTITUDE_TARGET (NED/FRD quaternion, thrust in [0, 1],
optional FRD body rates) is flown by a PX4-style attitude controller (``attitude_controller``).

Modes:
* lockstep (default): while armed in offboard, every received setpoint (motors or attitude) advances the
  simulation by one step (dt = 10 ms) and answers with telemetry, as PX4 SITL in lockstep does;
  closed-loop runs are deterministic however loaded the machine is.
* real time: a background thread steps the simulation at 1 / dt with the newest motor command.

While disarmed the vehicle is held at its initial state (on a test stand) and its clock runs
in real time.

Signing (``signing_key``, 32 bytes): as PX4 with a key on its SD card, the vehicle signs everything
it sends and drops incoming messages that are unsigned (except PX4's unsigned allowlist: HEARTBEAT,
RADIO_STATUS, ADSB_VEHICLE, COLLISION) or wrongly signed / replayed, counting them in ``rejected``;
replies go only to a peer that has sent a correctly signed message. Non-finite setpoints and
command parameters are refused (counted in ``refused``), as a flight stack would.

The NED conversion here is written independently of robo's driver on purpose:
the two sides of the link check each other.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from sims.envs.quadrotor_env import make_robot
from sims.quadrotor.batched import BatchedQuadrotorSim
from sims.quadrotor.dynamics import MOTOR, OMEGA, POS, QUAT, VEL, ParamsBatch, hover_state
from sims.quadrotor.rotations import quat_mul, quat_to_rotmat

from hardware.drivers.mavlink_signing import incoming_signing, rejection_kind, sign_outgoing, verify_signatures

from .attitude_controller import AttitudeGains, attitude_motor_commands
from .extras import require
from .loops import BackgroundLoops

mavlink = require("pymavlink.dialects.v20.common")

OFFBOARD, POSCTL = 6, 3  # PX4 main modes
UNSIGNED_ALLOWED = (0, 109, 246, 247)  # PX4 accepts these unsigned: HEARTBEAT, RADIO_STATUS, ADSB_VEHICLE, COLLISION
ROBO_FROM_PX4 = (0, 3, 1, 2)  # robo motor j (FR, BR, BL, FL) is PX4 output ROBO_FROM_PX4[j]
_Q_X_PI = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64)  # rotation by pi about x: NWU <-> NED


@dataclass
class SensorConfig:
    """What the vehicle's estimator reports, as a real one would: white Gaussian noise (standard
    deviations: position m, velocity m/s, attitude rad (a random small rotation), body rates rad/s)
    and a latency of ``latency_steps`` simulation steps (telemetry carries the state and the
    ``time_boot_ms`` of that many steps ago). ``seed`` seeds the noise."""

    position_noise: float = 0.0
    velocity_noise: float = 0.0
    attitude_noise: float = 0.0
    angular_velocity_noise: float = 0.0
    latency_steps: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        stds = (self.position_noise, self.velocity_noise, self.attitude_noise, self.angular_velocity_noise)
        if not all(math.isfinite(x) and x >= 0 for x in stds):
            raise ValueError(f"sensor noise standard deviations must be finite and >= 0, got {stds}")
        if int(self.latency_steps) != self.latency_steps or self.latency_steps < 0:
            raise ValueError(f"latency_steps must be an integer >= 0, got {self.latency_steps}")


@dataclass
class VehicleConfig:
    """The simulated vehicle. ``robot``: preset name or ``{preset: ..., field: value}`` (hidden
    parameters); ``initial_position``/``initial_velocity``: world FLU; ``initial_motors_at_hover``:
    motor states start at the hover command (the vehicle was hovering under PX4's own controller
    when offboard took over) or at 0; ``remote``: (host, port) to
    send to from the start (as PX4 SITL sends to 14540), else replies go to the last sender."""

    robot: str | dict = "crazyflie"
    initial_position: tuple[float, float, float] = (0.0, 0.0, 1.0)
    initial_velocity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    initial_motors_at_hover: bool = True
    lockstep: bool = True
    host: str = "127.0.0.1"
    port: int = 0
    remote: tuple[str, int] | None = None
    system_id: int = 1
    component_id: int = 1
    heartbeat_hz: float = 2.0
    idle_telemetry_hz: float = 50.0
    offboard_setpoint_timeout: float = 0.5  # s: offboard needs a setpoint at least this recent
    refuse_arming: bool = False
    euler_attitude: bool = False  # send ATTITUDE (Euler angles) instead of ATTITUDE_QUATERNION
    attitude_gains: AttitudeGains = field(default_factory=AttitudeGains)
    received_log: int = 10000  # decoded messages kept in ``received``
    sensors: SensorConfig = field(default_factory=SensorConfig)
    signing_key: bytes | None = field(default=None, repr=False)  # MAVLink 2 signing key (32 bytes); None: unsigned
    signing_link_id: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.sensors, dict):
            self.sensors = SensorConfig(**self.sensors)
        if self.signing_key is not None and (len(self.signing_key) != 32 or not any(self.signing_key)):
            raise ValueError(f"signing_key must be 32 bytes, not all zero; got {len(self.signing_key)} bytes")


def _to_ned(v: torch.Tensor) -> np.ndarray:
    """World NWU (robo FLU) -> NED, or body FLU -> FRD: rotate by pi about x."""
    return np.array([float(v[0]), -float(v[1]), -float(v[2])])


def _flip_quat(q: torch.Tensor) -> torch.Tensor:
    """Attitude FLU/NWU <-> FRD/NED (conjugation by the rotation by pi about x; self-inverse)."""
    return quat_mul(quat_mul(_Q_X_PI, q), _Q_X_PI * torch.tensor([1.0, -1, -1, -1], dtype=torch.float64))


def _finite(msg) -> bool:
    """True if every float field of ``msg`` (arrays included) is finite."""
    for name in msg.get_fieldnames():
        v = getattr(msg, name)
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, float) and not math.isfinite(x):
                return False
    return True


def _euler_zyx(q: torch.Tensor) -> tuple[float, float, float]:
    """Quaternion (w, x, y, z) -> roll, pitch, yaw (Z-Y-X), rad, as MAVLink's ATTITUDE."""
    R = quat_to_rotmat(q)
    return (math.atan2(float(R[2, 1]), float(R[2, 2])), -math.asin(max(-1.0, min(1.0, float(R[2, 0])))),
            math.atan2(float(R[1, 0]), float(R[0, 0])))


class MavlinkVehicle:
    """Run with ``with MavlinkVehicle(cfg) as v:``; ``v.port`` is the bound UDP port."""

    def __init__(self, config: VehicleConfig | None = None, **overrides):
        self.config = cfg = config or VehicleConfig(**overrides)
        params = ParamsBatch.from_params(make_robot(cfg.robot), 1, dtype=torch.float64)
        self.sim = BatchedQuadrotorSim(params)
        self.dt = params.dt
        self.sim.reset(hover_state(params, torch.tensor([cfg.initial_position], dtype=torch.float64)))
        self.sim.state[0, VEL] = torch.tensor(cfg.initial_velocity, dtype=torch.float64)
        if not cfg.initial_motors_at_hover:
            self.sim.state[0, MOTOR] = 0.0
        self.motors = np.zeros(4)  # robo order, [0, 1]
        self.attitude_setpoint: tuple | None = None  # (q_sp FLU (4,), thrust, rates FLU (3,) | None), when flying one
        self.armed = False
        self.mode = POSCTL
        self.steps = 0
        self.time_ms = 0
        self.received: list = []  # decoded messages (pymavlink objects), newest last
        self.received_at: list[float] = []  # time.monotonic() of each, same order
        self.bad_data = 0
        self.rejected = {"unsigned": 0, "bad_signature": 0}  # dropped for their signature (with a signing_key)
        self.refused = 0  # decoded, but non-finite setpoints or command parameters
        self._last_setpoint = -math.inf
        self._lock = threading.RLock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((cfg.host, cfg.port))
        self._sock.settimeout(0.05)
        self._peer = cfg.remote
        self._mav = mavlink.MAVLink(None, cfg.system_id, cfg.component_id)  # packs what we send
        self._rx_signing = None
        if cfg.signing_key is not None:
            sign_outgoing(self._mav, bytes(cfg.signing_key), cfg.signing_link_id)
            self._rx_signing = incoming_signing(bytes(cfg.signing_key),
                                                allow_unsigned=lambda mav, msg_id: msg_id in UNSIGNED_ALLOWED)
        self._rx = self._new_parser()
        self._loops = BackgroundLoops("MavlinkVehicle")
        self._noise = np.random.default_rng(cfg.sensors.seed)
        self._history: deque = deque([(self.time_ms, self.sim.state[0].clone())], maxlen=cfg.sensors.latency_steps + 1)

    @property
    def port(self) -> int:
        return self._sock.getsockname()[1]

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    def start(self) -> "MavlinkVehicle":
        self._loops.start(self._receive_loop, self._tick_loop)
        return self

    def close(self) -> None:
        self._loops.stop(timeout=1.0)
        self._sock.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # Ground truth -----------------------------------------------------------------------------------
    def true_state(self) -> dict:
        """The simulator's state in robo's frames (FLU): position, quaternion, velocity, angular_velocity."""
        with self._lock:
            s = self.sim.state[0].numpy().copy()
        return {"position": s[POS], "quaternion": s[QUAT], "velocity": s[VEL], "angular_velocity": s[OMEGA],
                "motors": s[MOTOR]}

    def set_state(self, position=None, quaternion=None, velocity=None, angular_velocity=None, motors=None) -> None:
        """Overwrite parts of the simulator state (robo frames: world FLU, body FLU, (w, x, y, z); motor
        states in [0, 1])."""
        with self._lock:
            for sl, v in ((POS, position), (QUAT, quaternion), (VEL, velocity), (OMEGA, angular_velocity),
                          (MOTOR, motors)):
                if v is not None:
                    self.sim.state[0, sl] = torch.as_tensor(v, dtype=torch.float64)

    def messages(self, kind: str) -> list:
        with self._lock:
            return [m for m in self.received if m.get_type() == kind]

    # Sending ------------------------------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are to the peer (fault injection: garbage, corrupt frames)."""
        if self._peer is not None:
            self._sock.sendto(bytes(data), self._peer)

    def _send(self, *msgs) -> None:
        with self._lock:
            data = b"".join(m.pack(self._mav) for m in msgs)
        self.send_raw(data)

    def measured_state(self) -> tuple[int, torch.Tensor]:
        """What the sensors report now: (time_boot_ms, (17,) state) of ``latency_steps`` steps ago,
        with noise (``config.sensors``); robo frames."""
        with self._lock:
            t, s = self._history[0] if self.armed else (self.time_ms, self.sim.state[0])
            return t, self._add_noise(s)

    def _restart_sensors(self) -> None:
        """At arming: fill the latency line with the (held) current state, stamped after anything sent."""
        self._history.clear()
        dt_ms = int(round(self.dt * 1000))
        for _ in range(self._history.maxlen):
            self.time_ms += dt_ms
            self._history.append((self.time_ms, self.sim.state[0].clone()))

    def _add_noise(self, s: torch.Tensor) -> torch.Tensor:
        c = self.config.sensors
        s = s.clone()
        n = lambda std, k: torch.as_tensor(self._noise.normal(0.0, std, k) if std > 0 else np.zeros(k))  # noqa: E731
        s[POS] += n(c.position_noise, 3)
        s[VEL] += n(c.velocity_noise, 3)
        s[OMEGA] += n(c.angular_velocity_noise, 3)
        if c.attitude_noise > 0:
            half = n(c.attitude_noise, 3) / 2
            dq = torch.cat([torch.ones(1, dtype=s.dtype), half])
            s[QUAT] = quat_mul(s[QUAT], dq / dq.norm())
        return s

    def telemetry_messages(self, time_boot_ms: int | None = None) -> list:
        """LOCAL_POSITION_NED + ATTITUDE_QUATERNION of the measured state (NED/FRD, see ``measured_state``)."""
        with self._lock:
            t_meas, s = self.measured_state()
            t = t_meas if time_boot_ms is None else time_boot_ms
            q_ned = _flip_quat(s[QUAT])
            p, v, w = _to_ned(s[POS]), _to_ned(s[VEL]), _to_ned(s[OMEGA])
            if self.config.euler_attitude:
                attitude = self._mav.attitude_encode(t, *_euler_zyx(q_ned), *w)
            else:
                attitude = self._mav.attitude_quaternion_encode(t, *q_ned.tolist(), *w)
            return [self._mav.local_position_ned_encode(t, *p, *v), attitude]

    def send_telemetry(self, time_boot_ms: int | None = None) -> None:
        self._send(*self.telemetry_messages(time_boot_ms))

    def _heartbeat(self):
        base = mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED | (mavlink.MAV_MODE_FLAG_SAFETY_ARMED if self.armed else 0)
        status = mavlink.MAV_STATE_ACTIVE if self.armed else mavlink.MAV_STATE_STANDBY
        return self._mav.heartbeat_encode(mavlink.MAV_TYPE_QUADROTOR, mavlink.MAV_AUTOPILOT_PX4, base,
                                          self.mode << 16, status)

    # Simulation ----------------------------------------------------------------------------------------
    def step(self) -> None:
        """Advance the simulation by dt under the newest motor command (if armed) and the clock by dt."""
        with self._lock:
            if self.armed:
                if self.attitude_setpoint is not None:
                    self.motors = attitude_motor_commands(self.sim.state[0], self.sim.params, *self.attitude_setpoint,
                                                          gains=self.config.attitude_gains).numpy()
                action = torch.as_tensor(2 * self.motors - 1, dtype=torch.float64)[None]
                self.sim.step(action)
                if self.sim.state[0, 2] < 0:  # the floor: stop there
                    self.sim.state[0, 2] = 0.0
                    self.sim.state[0, VEL] = 0.0
                self.steps += 1
            self.time_ms += int(round(self.dt * 1000))
            self._history.append((self.time_ms, self.sim.state[0].clone()))

    def _receive_loop(self) -> None:
        while self._loops.running:
            try:
                data, addr = self._sock.recvfrom(65535)
            except (socket.timeout, OSError):
                continue
            self.handle_datagram(data, addr)

    def handle_datagram(self, data: bytes, addr: tuple[str, int]) -> list:
        """Parse and act on one received datagram from ``addr``; never raises. Returns the messages accepted."""
        with self._lock:
            try:
                msgs = self._rx.parse_buffer(data) or []
            except Exception:
                msgs, self.bad_data, self._rx = [], self.bad_data + 1, self._new_parser()
            if self._rx.buf_len() > 0:  # a datagram holds whole frames: the rest is garbage
                self.bad_data, self._rx = self.bad_data + 1, self._new_parser()
            accepted = [m for m in msgs if self._accept(m)]
        if self.config.remote is None and accepted and (self._rx_signing is None
                                                        or any(m.get_signed() for m in accepted)):
            first, self._peer = self._peer is None, addr
            if first:
                self._send(self._heartbeat())  # answer a new peer at once
        with self._lock:
            for msg in accepted:
                self._handle(msg)
        return accepted

    def _accept(self, msg) -> bool:
        kind = msg.get_type()
        refused = rejection_kind(msg) if kind == "BAD_DATA" else None
        if refused is not None:
            self.rejected[refused] += 1
            return False
        if kind == "BAD_DATA" or kind.startswith("UNKNOWN"):
            self.bad_data += 1
            return False
        return True

    def _new_parser(self) -> mavlink.MAVLink:
        rx = mavlink.MAVLink(None)
        rx.robust_parsing = True
        if self._rx_signing is not None:  # the replay state outlives a parser reset
            verify_signatures(rx, self._rx_signing)
        return rx

    def _tick_loop(self) -> None:
        period = self.dt
        next_hb = next_tick = time.monotonic()
        while self._loops.running:
            now = time.monotonic()
            if now >= next_hb:
                self._send(self._heartbeat())
                next_hb = now + 1.0 / self.config.heartbeat_hz
            if self.config.lockstep:
                with self._lock:  # atomic with arming: no idle telemetry once the arm ACK is out
                    if not self.armed:
                        self.time_ms += int(round(1000 / self.config.idle_telemetry_hz))
                        self.send_telemetry()
                self._loops.sleep(1.0 / self.config.idle_telemetry_hz)
                continue
            self.step()
            self.send_telemetry()
            next_tick = max(next_tick + period, time.monotonic() - period)
            self._loops.sleep(max(0.0, next_tick - time.monotonic()))

    def _handle(self, msg) -> None:
        kind = msg.get_type()
        self.received.append(msg)
        self.received_at.append(time.monotonic())
        del self.received[:-self.config.received_log], self.received_at[:-self.config.received_log]
        if kind in ("SET_ACTUATOR_CONTROL_TARGET", "SET_ATTITUDE_TARGET", "COMMAND_LONG") and not _finite(msg):
            self.refused += 1  # a NaN/inf setpoint or parameter: ignored, as PX4 ignores invalid setpoints
            if kind == "COMMAND_LONG":
                self._send(self._mav.command_ack_encode(msg.command, mavlink.MAV_RESULT_DENIED))
            return
        if kind == "SET_ACTUATOR_CONTROL_TARGET":
            self._last_setpoint = time.monotonic()
            self.motors = np.clip(np.asarray(msg.controls[:4], dtype=np.float64)[list(ROBO_FROM_PX4)], 0.0, 1.0)
            self.attitude_setpoint = None
            self._lockstep()
        elif kind == "SET_ATTITUDE_TARGET":
            self._last_setpoint = time.monotonic()
            self.attitude_setpoint = self._attitude_setpoint(msg)
            self._lockstep()
        elif kind == "COMMAND_LONG":
            self._command(msg)

    def _lockstep(self) -> None:
        if self.config.lockstep and self.armed and self.mode == OFFBOARD:
            self.step()
            self.send_telemetry()

    def _attitude_setpoint(self, msg) -> tuple:
        """SET_ATTITUDE_TARGET (NED/FRD) -> (q_sp FLU, thrust, body-rate feed-forward FLU or None)."""
        mask = msg.type_mask
        s = self.sim.state[0]
        q_ned = torch.tensor(msg.q, dtype=torch.float64)
        q_sp = s[QUAT].clone() if mask & mavlink.ATTITUDE_TARGET_TYPEMASK_ATTITUDE_IGNORE else _flip_quat(q_ned)
        last = self.attitude_setpoint
        thrust = (last[1] if last else 0.0) if mask & mavlink.ATTITUDE_TARGET_TYPEMASK_THROTTLE_IGNORE else msg.thrust
        rates = None
        if mask & 0b111 != 0b111:
            rates = torch.tensor([msg.body_roll_rate, -msg.body_pitch_rate, -msg.body_yaw_rate], dtype=torch.float64)
        return q_sp, float(np.clip(thrust, 0.0, 1.0)), rates

    def _command(self, msg) -> None:
        result = mavlink.MAV_RESULT_UNSUPPORTED
        if msg.command == mavlink.MAV_CMD_COMPONENT_ARM_DISARM:
            if msg.param1 == 1 and self.config.refuse_arming:
                result = mavlink.MAV_RESULT_DENIED
            else:
                self.armed = msg.param1 == 1
                self._restart_sensors()
                if not self.armed:
                    self.motors, self.attitude_setpoint = np.zeros(4), None
                result = mavlink.MAV_RESULT_ACCEPTED
        elif msg.command == mavlink.MAV_CMD_DO_SET_MODE:
            main = int(msg.param2) if msg.param2 == int(msg.param2) and 0 <= msg.param2 <= 255 else None
            if main is None:
                result = mavlink.MAV_RESULT_DENIED  # not a PX4 main mode
            elif main == OFFBOARD and time.monotonic() - self._last_setpoint > self.config.offboard_setpoint_timeout:
                result = mavlink.MAV_RESULT_TEMPORARILY_REJECTED  # PX4: no offboard signal yet
            else:
                self.mode, result = main, mavlink.MAV_RESULT_ACCEPTED
        self._send(self._mav.command_ack_encode(msg.command, result), self._heartbeat())
