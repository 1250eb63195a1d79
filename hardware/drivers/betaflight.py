"""Betaflight drivers: ``BetaflightRobot`` over MSP (TCP or serial), ``BetaflightSITLBridge`` over UDP.

``BetaflightRobot`` drives a flight controller the way a companion computer does with
``FEATURE_RX_MSP`` (the SITL target's default receiver): it streams ``MSP_SET_RAW_RC`` at
``rate_hz`` (Betaflight fails safe without a steady RC stream), polls ``MSP_ATTITUDE``,
``MSP_RAW_IMU`` and ``MSP_STATUS`` at the same rate, or bundled in one ``MSP_MULTIPLE_MSP`` at half
the rate where the flight controller answers it (and not while a ``request`` waits), and maps:

* ``AttitudeThrustCommand`` -> AETR sticks in angle mode (``betaflight_sitl.attitude_to_rc``).
* ``MotorCommand``: only all motors off (the safety layer's safe command), sent as ``MSP_SET_MOTOR``
  1000 us. Betaflight stores MSP_SET_MOTOR values as its *disarmed* motor outputs (``motor_disarmed``,
  the configurator's motor test) and drives the motors with them whenever it is disarmed, even if
  they arrived while armed: any other value would spin motors while robo believes the vehicle is
  disarmed, so it is refused (``RobotError``). Fly with attitude commands (or motor-level through
  the SITL bridge, or a policy compiled into the firmware).
* ``arm``/``disarm`` -> the ARM aux channel (``RcMapping.arm_channel``) with throttle low;
  ``arm`` waits for the ARM flag in ``MSP_STATUS`` (flipping the switch off and on if the firmware latched
  ``ARM_SWITCH``) and, if it never comes, raises ``RobotError`` naming the firmware's arming-disable flags
  (``MSP_STATUS_EX``, e.g. ``RXLOSS``, ``CALIB``).
* ``request(command, payload)``: one MSP exchange, waited for (setup messages, ``status_ex``);
  ``betaflight_setup.provision`` configures a fresh flight controller with it.

Position: MSP carries none. A companion computer gets it from motion capture or VIO: pass
``position_source``, a function returning (position (3,), velocity (3,)) world FLU m, m/s, and
``read_state`` reports them (otherwise NaN, which the safety layer refuses to fly).

State: quaternion from MSP_ATTITUDE, angular velocity from MSP_RAW_IMU's gyro (deg/s ->
rad/s, FLU), ``armed`` from MSP_STATUS. Position and velocity are NaN (MSP_ATTITUDE/RAW_IMU
carry none); ``extra["acc_g"]`` holds the accelerometer in g, Betaflight's axes and sign.

Flow control: Betaflight handles one MSP message per run of its serial task (100 Hz by default,
``serial_update_rate_hz``) and drops what overflows its receive buffer, so the driver keeps at most
one message of each kind unanswered (a reply older than ``REPLY_TIMEOUT`` is given up and counted
in ``rejected["no_reply"]``): the stream slows down to what the firmware serves instead of piling up.

Robustness: corrupt frames (bad checksum, oversize, garbage) are skipped by ``MspParser``;
short payloads, error replies ($M!) and replies nobody asked for are rejected; all are counted
in ``rejected``. No reply of any kind (telemetry, a request's answer, an RC ack) for ``link_timeout`` s,
or a closed socket, raises ``RobotError``. The state's ``timestamp`` is its last telemetry reply: while a
``request`` waits the telemetry bundle is held back, and the safety layer's ``max_state_age`` judges that.

Addresses: ``tcp://host:port`` (Betaflight SITL serves UART1 MSP on TCP 5761) or any pyserial
URL, e.g. ``serial:///dev/ttyACM0?baud=115200`` or ``loop://``.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections import Counter
from typing import Callable
from urllib.parse import parse_qs, urlparse

import numpy as np

from . import msp
from .attitude import attitude_setpoint
from .base import AttitudeThrustCommand, Command, MotorCommand, RobotError, RobotState
from .betaflight_setup import arming_disable_names
from .extras import require
from .threads import join_loops, start_loops, wait_until
from .betaflight_sitl import (PORT_PWM, PORT_RC, PORT_STATE, RcMapping, attitude_to_rc,
                              betaflight_attitude_to_quat, betaflight_gyro_to_flu, pack_rc, state_to_fdm,
                              unpack_servo)

POLLED = (msp.MSP_ATTITUDE, msp.MSP_RAW_IMU, msp.MSP_STATUS)
ROBO_FROM_MSP_MOTOR = [1, 0, 2, 3]  # robo [FR, BR, BL, FL] = MSP_MOTOR's Betaflight motors 1..4 [RR, FR, RL, FL][.]
REPLY_TIMEOUT = 0.25  # s after which an unanswered message no longer holds back the next of its kind


class _TcpLink:
    def __init__(self, host: str, port: int, timeout: float):
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.settimeout(0.05)

    def write(self, data: bytes) -> None:
        self._sock.sendall(data)

    def read(self) -> bytes:
        """Available bytes (b"" if none yet); raises ConnectionError when the peer closed."""
        try:
            data = self._sock.recv(4096)
        except socket.timeout:
            return b""
        if not data:
            raise ConnectionError("the flight controller closed the TCP connection")
        return data

    def close(self) -> None:
        self._sock.close()


class _SerialLink:
    def __init__(self, url: str, baud: int):
        serial = require("serial")  # pyserial

        self._port = serial.serial_for_url(url, baudrate=baud, timeout=0.05)

    def write(self, data: bytes) -> None:
        self._port.write(data)

    def read(self) -> bytes:
        return self._port.read(max(1, self._port.in_waiting))

    def close(self) -> None:
        self._port.close()


def open_link(address: str, timeout: float):
    """``tcp://host:port`` -> TCP socket; ``serial:///dev/X?baud=N`` or a pyserial URL -> serial."""
    url = urlparse(address)
    if url.scheme == "tcp":
        return _TcpLink(url.hostname or "127.0.0.1", url.port or 5761, timeout)
    if url.scheme == "serial":
        baud = int(parse_qs(url.query).get("baud", ["115200"])[0])
        return _SerialLink(url.path, baud)
    return _SerialLink(address, 115200)


ARM_SWITCH_CHECK_S = 0.5  # arm(): s without the ARM flag before it looks for a latched ARM_SWITCH
ARM_SWITCH_OFF_S = 0.2  # arm(): s the switch stays off to clear it (a few RC frames)
HOST_WAIT_S = 30.0  # request() / arm() timeouts run on the driver's clock; a clock that stops is given up after this
DISARM_CONFIRM_S = 1.0  # close(): s to wait for the flight controller to report the disarm


class BetaflightRobot:
    """``Robot`` driver for a Betaflight flight controller over MSP.

    Args:
        address: ``tcp://127.0.0.1:5761`` (SITL), ``serial:///dev/ttyACM0?baud=115200``, ...
        rate_hz: RC stream and telemetry poll rate.
        link_timeout: s without any valid reply before the link counts as lost.
        mapping: RC channel mapping (angle limit, yaw rate scale, AUX channels).
        msp_version: 1 or 2 for the frames robo sends (Betaflight answers in the same version).
        acc_1g: MSP_RAW_IMU accelerometer counts per g (512 on most boards, 256 in SITL).
        position_source: () -> (position (3,), velocity (3,)) world FLU, from mocap/VIO; None: NaN.
        read_motors: also poll MSP_MOTOR (in the same bundle): ``read_state().extra["motors"]`` is then the
            firmware's motor outputs (4,) in robo's order, (us - 1000) / 1000 in [0, 1], as old as the attitude.
        clock: () -> s, the vehicle's clock: the host's (default), or a lockstep SITL's sim time
            (``BetaflightFirmware.sim_time``), which stalls with a loaded host as the firmware does. States carry it as
            ``vehicle_time``, and a ``SafetyLayer`` over this driver measures state ages and command gaps on it;
            ``request`` and ``arm`` timeouts run on it too (and end after ``HOST_WAIT_S`` s of host time).
    """

    name = "betaflight"

    def __init__(self, address: str = "tcp://127.0.0.1:5761", rate_hz: float = 50.0, link_timeout: float = 0.5,
                 mapping: RcMapping = RcMapping(), msp_version: int = 1, acc_1g: float = 512.0,
                 position_source=None, read_motors: bool = False, clock: Callable[[], float] = time.monotonic):
        if msp_version not in (1, 2):
            raise ValueError(f"msp_version must be 1 or 2, got {msp_version}")
        self.address, self.rate_hz, self.link_timeout = address, rate_hz, link_timeout
        self.mapping, self.msp_version, self.acc_1g = mapping, msp_version, acc_1g
        self.position_source, self.clock = position_source, clock
        self.polled = POLLED + ((msp.MSP_MOTOR,) if read_motors else ())
        self._motors: np.ndarray | None = None
        self._waiters: dict[int, queue.Queue] = {}
        self.parser = msp.MspParser()
        self.rejected = Counter({"short_payload": 0, "error_reply": 0, "unexpected": 0, "no_reply": 0})
        self._link = None
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: dict[int, list[float]] = {}  # command -> send times of its unanswered messages
        self._bundle = False  # poll with MSP_MULTIPLE_MSP
        self.telemetry_replies = 0  # telemetry replies accepted (bundles count once)
        self._attitude = self._gyro = self._acc = None
        self._flags = 0
        self._last_rx: float | None = None  # the last telemetry reply: the state's timestamp
        self._last_rx_vehicle: float | None = None  # the same on ``clock``: the state's vehicle_time
        self._last_reply: float | None = None  # the last reply of any kind: the link's liveness
        self._lost: str | None = None
        self._arm_request = False
        self._rc = attitude_to_rc(0.0, 0.0, 0.0, 0.0, False, mapping)
        self._running = threading.Event()
        self._threads: list[threading.Thread] = []

    # link ------------------------------------------------------------------------------------
    def connect(self, timeout: float = 5.0) -> None:
        try:
            self._link = open_link(self.address, timeout)
        except (OSError, ImportError) as e:
            raise RobotError(f"could not open the MSP link {self.address}: {e}; check the address and that "
                             "the flight controller (or SITL) is running") from e
        self._running.set()
        self._threads = start_loops("BetaflightRobot", (self._reader,))
        try:
            self._bundle = len(self.request(msp.MSP_MULTIPLE_MSP, bytes(self.polled), timeout=0.3, attempts=1)) > 0
        except RobotError:
            self._bundle = False  # an older firmware (or a stand-in): poll one message at a time
        self._threads += start_loops("BetaflightRobot", (self._poller,))
        if wait_until(lambda: self._attitude is not None and self._gyro is not None, timeout):
            return
        self.close()
        raise RobotError(f"no MSP_ATTITUDE/MSP_RAW_IMU reply from {self.address} within {timeout} s; check that "
                         "MSP is enabled on that port")

    def _send(self, command: int, payload: bytes = b"") -> bool:
        """Send unless a message of this kind is still unanswered (flow control); -> whether it was sent."""
        frame = msp.encode(command, payload, self.msp_version)
        now = time.monotonic()
        with self._lock:
            sent = self._pending.setdefault(command, [])
            if sent and now - sent[0] > REPLY_TIMEOUT:
                self.rejected["no_reply"] += len(sent)
                sent.clear()
            if sent:
                return False
            sent.append(now)  # counted before its reply can arrive
        try:
            with self._write_lock:
                self._link.write(frame)
        except (OSError, AttributeError) as e:
            self._lost = f"writing to {self.address} failed ({e})"
        return True

    def _poller(self) -> None:
        period, tick = 1.0 / self.rate_hz, 0
        while self._running.is_set():
            self._send(msp.MSP_SET_RAW_RC, msp.pack_channels(self._rc))
            tick += 1
            if self._bundle:
                if tick % 2 == 0 and not self._waiters:  # 1.5 messages a cycle: the firmware serves ~100/s
                    self._send(msp.MSP_MULTIPLE_MSP, bytes(self.polled))
            else:
                for command in self.polled:
                    self._send(command)
            time.sleep(period)

    def _reader(self) -> None:
        while self._running.is_set():
            try:
                data = self._link.read()
            except (OSError, ValueError) as e:
                self._lost = f"the MSP link to {self.address} broke ({e})"
                return
            for frame in self.parser.feed(data):
                self._handle(frame)

    def _handle(self, frame: msp.MspFrame) -> None:
        if frame.direction not in ("reply", "error"):
            return  # our own echoes (loopback links)
        self._last_reply = time.monotonic()  # any answer proves the link: requests, acks, refusals
        waiter = self._waiters.get(frame.command)
        if waiter is not None:
            waiter.put(frame)
            return
        with self._lock:
            sent = self._pending.get(frame.command)
            expected = bool(sent)
            if expected:
                sent.pop(0)
        if frame.direction == "error":
            self.rejected["error_reply"] += 1
            return
        if not expected:
            self.rejected["unexpected"] += 1
            return
        try:
            if frame.command == msp.MSP_MULTIPLE_MSP:
                for command, payload in zip(self.polled, msp.unpack_multiple(frame.payload)):
                    self._store(command, payload)
            elif frame.command in self.polled:
                self._store(frame.command, frame.payload)
            else:
                return  # the ack of an MSP_SET_*
        except ValueError:
            self.rejected["short_payload"] += 1
            return
        self._last_rx, self._last_rx_vehicle = time.monotonic(), self.clock()
        self.telemetry_replies += 1

    def _store(self, command: int, payload: bytes) -> None:
        if command == msp.MSP_ATTITUDE:
            self._attitude = msp.unpack_attitude(payload)
        elif command == msp.MSP_RAW_IMU:
            acc, gyro, _ = msp.unpack_raw_imu(payload)
            self._acc, self._gyro = np.asarray(acc) / self.acc_1g, gyro
        elif command == msp.MSP_MOTOR:
            us = np.frombuffer(payload[:8], dtype="<u2").astype(np.float64) if len(payload) >= 8 else None
            if us is None:
                raise ValueError(f"MSP_MOTOR reply has {len(payload)} bytes, expected >= 8")
            self._motors = np.clip((us[ROBO_FROM_MSP_MOTOR] - 1000.0) / 1000.0, 0.0, 1.0)
        else:
            self._flags = msp.unpack_status(payload)[1]

    def _check_link(self) -> None:
        if self._link is None:
            raise RobotError("the Betaflight driver is not connected; call connect() first")
        if self._lost:
            raise RobotError(self._lost + "; check the cable/SITL, then connect() again")
        age = time.monotonic() - (self._last_reply or 0.0)  # a stale state is the safety layer's to judge
        if age > self.link_timeout:
            raise RobotError(f"no MSP reply from {self.address} for {age:.2f} s (link_timeout {self.link_timeout} s): "
                             "link lost; check the cable/SITL, then connect() again")

    def request(self, command: int, payload: bytes = b"", timeout: float = 1.0, attempts: int = 2) -> bytes:
        """Send one MSP message and wait for its reply; -> the reply payload (empty for a SET's ack).

        A message unanswered after ``timeout`` s is sent again, ``attempts`` times in all, as ground stations do
        over MSP (a request now and then goes unanswered: 1 in ~20 runs of the SITL tests beside a training job).
        Raises ``RobotError`` if the firmware answers with an error frame (it refused the message) or
        never within the attempts. One request per command at a time.
        """
        if self._link is None:
            raise RobotError("the Betaflight driver is not connected; call connect() first")
        if command in self.polled:
            raise ValueError(f"MSP command {command} is polled by the driver; read it through read_state()")
        box: queue.Queue = queue.Queue()
        self._waiters[command] = box
        try:
            frame = msp.encode(command, payload, self.msp_version)
            for _ in range(max(1, attempts)):
                with self._write_lock:
                    self._link.write(frame)
                try:
                    reply = self._get(box, timeout)
                    break
                except queue.Empty:
                    continue
            else:
                raise RobotError(f"no reply to MSP command {command} from {self.address} within {timeout} s, "
                                 f"{max(1, attempts)} times")
        except OSError as e:
            raise RobotError(f"writing MSP command {command} to {self.address} failed ({e})") from e
        finally:
            self._waiters.pop(command, None)
        if reply.direction == "error":
            raise RobotError(f"the flight controller refused MSP command {command} (payload {payload.hex()}); "
                             "check that the firmware supports it and that it is disarmed")
        return reply.payload

    def _time_left(self, timeout: float):
        """() -> s left of ``timeout`` s of the driver's ``clock`` (a lockstep SITL's sim time stands still while a
        loaded host stalls it), and of ``max(HOST_WAIT_S, timeout)`` s of host time (a vehicle whose clock stops
        altogether), whichever ends first: what ``request`` and ``arm`` wait on."""
        start, host_end = self.clock(), time.monotonic() + max(HOST_WAIT_S, timeout)
        return lambda: min(timeout - (self.clock() - start), host_end - time.monotonic())

    def _get(self, box: queue.Queue, timeout: float):
        """The next item of ``box`` within ``_time_left(timeout)``; raises ``queue.Empty``."""
        left = self._time_left(timeout)
        while True:
            try:
                return box.get(timeout=min(timeout, 0.05))
            except queue.Empty:
                if left() <= 0:
                    raise

    def status_ex(self, timeout: float = 1.0) -> msp.StatusEx:
        """MSP_STATUS_EX now: cycle time, arming-disable flags (``betaflight_setup.arming_disable_names``)."""
        return msp.unpack_status_ex(self.request(msp.MSP_STATUS_EX, timeout=timeout))

    def reboot(self) -> None:
        """Ask the flight controller to reboot (settings that need one, e.g. features) and close the link;
        ``connect()`` again once it is back. Betaflight SITL exits instead: its runner restarts it."""
        try:
            self.request(msp.MSP_REBOOT, timeout=0.5, attempts=1)
        except RobotError:
            pass  # it may go down before the ack leaves
        self._arm_request = False
        self._running.clear()
        join_loops(self._threads)
        self._link.close()
        self._link = None

    # Robot API -------------------------------------------------------------------------------
    def read_state(self) -> RobotState | None:
        if self._last_rx is None or self._attitude is None or self._gyro is None:
            return None
        self._check_link()
        position = velocity = np.full(3, np.nan)
        if self.position_source is not None:
            position, velocity = (np.asarray(v, dtype=np.float64) for v in self.position_source())
        return RobotState(timestamp=self._last_rx, position=position, velocity=velocity,
                          quaternion=betaflight_attitude_to_quat(*self._attitude),
                          angular_velocity=betaflight_gyro_to_flu(self._gyro), armed=bool(self._flags & 1),
                          extra={"acc_g": self._acc, "attitude_deg": self._attitude,
                                 "rejected": {**self.parser.rejected, **self.rejected},
                                 "motors": None if self._motors is None else self._motors.copy()},
                          vehicle_time=self._last_rx_vehicle)

    def _set_rc(self, roll: float, pitch: float, yaw_rate: float, thrust: float) -> None:
        self._rc = attitude_to_rc(roll, pitch, yaw_rate, thrust, self._arm_request, self.mapping)
        self._send(msp.MSP_SET_RAW_RC, msp.pack_channels(self._rc))  # or with the poller's next message

    def arm(self, timeout: float = 2.0) -> None:
        """ARM switch on (throttle low); wait for the ARM flag. A switch the firmware saw on while something
        else kept it from arming latches ``ARM_SWITCH`` until it sees the switch off: if that is all that
        holds it back after ``ARM_SWITCH_CHECK_S``, the switch goes off for ``ARM_SWITCH_OFF_S`` and on again,
        as a pilot would flip it. ``RobotError`` naming the arming-disable flags if not armed in ``timeout`` s."""
        self._check_link()
        left = self._time_left(timeout)
        self._arm_request = True
        self._set_rc(0.0, 0.0, 0.0, 0.0)
        while not wait_until(lambda: self._flags & 1, min(ARM_SWITCH_CHECK_S, max(left(), 0))):
            if left() <= 0:
                flags = self._arming_disable_report()
                self.disarm()
                raise RobotError(f"Betaflight did not arm within {timeout} s: {flags}; see the CLI 'status' "
                                 "(betaflight_setup.provision configures a fresh flight controller)")
            names = self._arming_disable_names(timeout=0.2)  # briefly: the firmware may arm meanwhile
            if isinstance(names, list) and "ARM_SWITCH" in names and set(names) <= {"ARM_SWITCH", "NOT_DISARMED"}:
                self.disarm()
                time.sleep(ARM_SWITCH_OFF_S)
                self._arm_request = True
                self._set_rc(0.0, 0.0, 0.0, 0.0)

    def _arming_disable_names(self, timeout: float = 1.0) -> list[str] | str:
        """The firmware's arming-disable flag names now, or why they could not be read."""
        try:
            return arming_disable_names(self.status_ex(timeout).arming_disable)
        except (RobotError, ValueError) as e:
            return str(e)

    def _arming_disable_report(self) -> str:
        names = self._arming_disable_names()
        if isinstance(names, str):
            return f"its arming-disable flags could not be read ({names}); check that ARM is on AUX channel " \
                   f"{self.mapping.arm_channel - 3} and the throttle is low"
        return "arming disabled by " + (", ".join(names) or "no flag (ARM switch not seen yet)")

    def disarm(self) -> None:
        self._arm_request = False
        self._set_rc(0.0, 0.0, 0.0, 0.0)

    def send(self, command: Command) -> None:
        if isinstance(command, AttitudeThrustCommand):
            setpoint = attitude_setpoint(command)
            self._check_link()
            self._set_rc(*setpoint)
        elif isinstance(command, MotorCommand):
            m = np.asarray(command.motors, dtype=np.float64)
            if m.shape != (4,) or not np.all(np.isfinite(m)):
                raise ValueError(f"motors must be 4 finite values in [0, 1], got {command.motors!r}")
            if m.any():
                raise RobotError(f"BetaflightRobot sends only motors off, got {m.tolist()}: Betaflight keeps "
                                 "MSP_SET_MOTOR values as its disarmed motor outputs and would spin the motors "
                                 "after a disarm; fly with AttitudeThrustCommand")
            self._check_link()
            self._send(msp.MSP_SET_MOTOR, msp.pack_channels(np.full(8, 1000)))
        else:
            raise TypeError(f"BetaflightRobot cannot send {type(command).__name__}; "
                            "use AttitudeThrustCommand or MotorCommand")

    def close(self) -> None:
        if self._link is None:
            return
        if self._arm_request and not self._lost:
            self.disarm()
            # the poller keeps streaming the disarmed RC and reading the status: wait (bounded) until the
            # flight controller reports itself disarmed, so the link does not close before it acted on it
            wait_until(lambda: not self._flags & 1 or self._lost, DISARM_CONFIRM_S, interval=0.005)
        self._running.clear()
        join_loops(self._threads)
        self._link.close()
        self._link = None


class BetaflightSITLBridge:
    """The simulator side of Betaflight SITL's UDP protocol: robo's physics <-> the firmware.

    Sends ``fdm_packet`` (state) to ``fc_host:state_port`` and ``rc_packet`` to ``fc_host:rc_port``;
    receives ``servo_packet`` (motors) on ``motor_port`` (bind 0 for a free port). Betaflight
    SITL sends its motors to 127.0.0.1:9002 (``--ip`` changes the host).

    ``receive_motors`` returns motors (4,) in robo's order and [0, 1], or None on timeout; packets
    of the wrong size or with non-finite values are dropped and counted in ``rejected``.
    ``servo_packet`` has no timestamp, so the bridge cannot order motor packets; the FC drops
    fdm packets older than the last (``sitl.c``), so send increasing ``sim_time``.
    """

    def __init__(self, fc_host: str = "127.0.0.1", state_port: int = PORT_STATE, rc_port: int = PORT_RC,
                 motor_port: int = PORT_PWM, origin=(47.0, 8.0, 400.0), mapping: RcMapping = RcMapping()):
        self.fc_state, self.fc_rc = (fc_host, state_port), (fc_host, rc_port)
        self.origin, self.mapping = origin, mapping
        self._out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._in = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._in.bind(("0.0.0.0" if fc_host not in ("127.0.0.1", "localhost") else "127.0.0.1", motor_port))
        self.motor_port = self._in.getsockname()[1]
        self.rejected = Counter({"wrong_size": 0, "non_finite": 0})
        self._last_motor_rx: float | None = None

    def send_state(self, sim_time: float, position, velocity, quaternion, angular_velocity, specific_force) -> None:
        """robo state (world FLU = NWU, body FLU, SI; specific_force = accelerometer, body FLU)."""
        packet = state_to_fdm(sim_time, position, velocity, quaternion, angular_velocity, specific_force, self.origin)
        self._out.sendto(packet.pack(), self.fc_state)

    def send_rc(self, sim_time: float, channels) -> None:
        self._out.sendto(pack_rc(sim_time, channels), self.fc_rc)

    def send_command(self, sim_time: float, command: AttitudeThrustCommand, armed: bool) -> None:
        """An attitude/thrust command as angle-mode RC channels (with the ARM channel set)."""
        self.send_rc(sim_time, attitude_to_rc(*attitude_setpoint(command), armed, self.mapping))

    def receive_motors(self, timeout: float = 0.1) -> np.ndarray | None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self._in.settimeout(left)
            try:
                data = self._in.recv(256)
            except socket.timeout:
                return None
            try:
                motors = unpack_servo(data)
            except ValueError as e:
                self.rejected["non_finite" if "finite" in str(e) else "wrong_size"] += 1
                continue
            self._last_motor_rx = time.monotonic()
            return motors
        return None

    def check_link(self, timeout: float = 0.5) -> None:
        """Raise ``RobotError`` if no motor packet arrived for ``timeout`` s."""
        age = time.monotonic() - (self._last_motor_rx or 0.0)
        if age > timeout:
            raise RobotError(f"no servo_packet from Betaflight SITL on UDP {self.motor_port} for {age:.2f} s; "
                             "check that the SITL runs and sends to this host (--ip)")

    def close(self) -> None:
        self._out.close()
        self._in.close()
