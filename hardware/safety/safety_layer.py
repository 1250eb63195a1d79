"""The safety layer: sits between every policy and every driver.

``SafetyLayer(robot, config)`` is itself a ``Robot`` (same interface) plus policy-facing methods
(``send_action``, ``kill``, ``stop``, ``events``). It enforces:

* a geofence box, tilt and body-rate limits on the measured state (checked on every command and
  by the watchdog thread), and on attitude setpoints (clamped, ``attitude_limit`` events);
* slew limits on commands (clamped, recorded as ``slew_limit`` events);
* arming checks: no arming with no/stale/non-finite state, too much tilt, outside the fence, or a
  latched kill switch;
* a kill switch: safe command, forced disarm, latched until ``reset_kill()``;
* a watchdog thread: commands that stop for ``command_timeout`` s, or that contain NaN/inf, put the
  motors in the safe state (``safe_motors`` or off, then disarm if ``disarm_on_fault``).

Every violation is a ``SafetyEvent`` with its time; a fault latches (later commands are dropped)
until ``clear_faults()``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from hardware.drivers.base import AttitudeThrustCommand, Command, MotorCommand, Robot, RobotError, RobotState
from hardware.drivers.frames import clamp_tilt, tilt

from .config import SafetyConfig

FAULT_KINDS = ("geofence", "tilt", "body_rate", "invalid_state", "stale_state", "watchdog_timeout",
               "non_finite_command", "kill", "stop")


@dataclass(frozen=True)
class SafetyEvent:
    """One violation. ``time``: host monotonic s when it was handled; ``cause_time``: when its cause
    happened (last command before a silence, arrival of the bad command or state); ``safe_time``:
    when the safe command went out (None for events that need none)."""

    time: float
    kind: str
    detail: str
    cause_time: float | None = None
    safe_time: float | None = None

    @property
    def is_fault(self) -> bool:
        return self.kind in FAULT_KINDS

    @property
    def reaction_s(self) -> float | None:
        """Seconds from the cause to the safe command."""
        if self.cause_time is None or self.safe_time is None:
            return None
        return self.safe_time - self.cause_time


class SafetyLayer:
    """Wraps a ``Robot``; use it wherever a ``Robot`` is expected (policies talk only to this)."""

    def __init__(self, robot: Robot, config: SafetyConfig | None = None, clock: Callable[[], float] | None = None):
        """``clock`` () -> s: what the gaps between commands (``command_timeout``) are measured on; default: the
        driver's ``clock`` where it has one (a lockstep SITL's sim time: it stalls with a loaded host, and so does
        the loop commanding it), else the host's monotonic clock. A state that carries a ``vehicle_time`` is aged
        on the driver's clock, which stamped it (``max_state_age``); everything else, events included, is on
        host time."""
        self.robot = robot
        self.clock = clock if clock is not None else getattr(robot, "clock", time.monotonic)
        self.config = config or SafetyConfig()
        self.name = f"safe-{robot.name}"
        self._lo, self._hi = np.asarray(self.config.geofence_min), np.asarray(self.config.geofence_max)
        self._lock = threading.RLock()
        self._events: list[SafetyEvent] = []
        self._fault: SafetyEvent | None = None
        self._killed = False
        self._armed = False
        self._last_command_time = 0.0  # host s: an event's cause time
        self._last_command_tick = 0.0  # on ``clock``: what the watchdog measures
        self._last: Command | None = None  # last command forwarded (slew reference)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # Robot interface ------------------------------------------------------------------------------------
    def connect(self, timeout: float = 5.0) -> None:
        self.robot.connect(timeout)
        self._start_watchdog()

    def arm(self) -> None:
        """Arm after the arming checks; raises ``RobotError`` (and records ``arm_refused``) if one fails."""
        with self._lock:
            reason = self._arming_problem(time.monotonic())
            if reason:
                self._record(SafetyEvent(time.monotonic(), "arm_refused", reason))
                raise RobotError(f"arming refused: {reason}")
        self.robot.arm()
        with self._lock:
            self._armed, self._last = True, None
            self._last_command_time, self._last_command_tick = time.monotonic(), self.clock()
        self._start_watchdog()

    def arming_problem(self) -> str | None:
        """Why ``arm`` would refuse now (None: it would arm)."""
        with self._lock:
            return self._arming_problem(time.monotonic())

    def disarm(self) -> None:
        with self._lock:
            self._armed = False
            self.robot.disarm()

    def read_state(self) -> RobotState | None:
        return self.robot.read_state()

    def send(self, command: Command) -> Command | None:
        """The policy's command path: checks, slew limits, forwarding. Returns the command sent, or
        None if it was dropped (fault latched or just raised)."""
        now = time.monotonic()
        with self._lock:
            if self._fault is not None:
                return None
            if not self._armed:
                raise RobotError(f"{self.name}: arm() before sending commands")
            if not _finite(command):
                self._trip("non_finite_command", f"command contains NaN or inf: {command}", now)
                return None
            problem = self._state_problem(self.robot.read_state(), now)
            if problem:
                self._trip(*problem, cause_time=now)
                return None
            command = self._slew_limit(command, now)
            self.robot.send(command)
            self._last, self._last_command_time, self._last_command_tick = command, now, self.clock()
            return command

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        self.robot.close()

    # Policy-facing ------------------------------------------------------------------------------------------
    def send_action(self, action) -> np.ndarray | None:
        """Normalized motor action (4,) in [-1, 1] (clipped) -> ``MotorCommand``; returns the action
        actually sent (after slew limits), or None if it was dropped. NaN/inf trips the fault."""
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (4,):
            raise ValueError(f"action has shape {a.shape}, expected (4,)")
        sent = self.send(MotorCommand((np.clip(a, -1.0, 1.0) + 1.0) / 2.0 if np.isfinite(a).all() else a))
        return None if sent is None else 2.0 * sent.motors - 1.0

    def kill(self, reason: str = "kill switch") -> None:
        """Motors off and forced disarm now; latched until ``reset_kill()``."""
        with self._lock:
            self._killed = True
            self._trip("kill", reason, time.monotonic(), force=True)

    def stop(self, reason: str = "stop requested") -> None:
        """A commanded safe stop (e.g. a human's): safe command, disarm. Cleared by ``clear_faults()``."""
        with self._lock:
            self._trip("stop", reason, time.monotonic())

    def clear_faults(self) -> None:
        """Clear a latched fault (not the kill switch) so the robot can be re-armed."""
        with self._lock:
            if self._killed:
                raise RobotError("the kill switch is latched; inspect the vehicle, then call reset_kill()")
            self._fault = None

    def reset_kill(self) -> None:
        with self._lock:
            self._killed, self._fault = False, None

    @property
    def events(self) -> list[SafetyEvent]:
        with self._lock:
            return list(self._events)

    @property
    def fault(self) -> SafetyEvent | None:
        """The latched fault, or None."""
        return self._fault

    @property
    def armed(self) -> bool:
        return self._armed

    # Checks ------------------------------------------------------------------------------------------------
    def _state_problem(self, state: RobotState | None, now: float) -> tuple[str, str] | None:
        cfg = self.config
        if state is None:
            return "stale_state", f"no state (max_state_age {cfg.max_state_age} s)"
        age = now - state.timestamp if state.vehicle_time is None else self.robot.clock() - state.vehicle_time
        if age > cfg.max_state_age:
            return "stale_state", f"state is {age:.3f} s old (max_state_age {cfg.max_state_age} s)"
        p, q, w = state.position, state.quaternion, state.angular_velocity
        if not (np.isfinite(p).all() and np.isfinite(q).all() and np.isfinite(w).all()):
            return "invalid_state", f"non-finite state p={p} q={q} w={w}"
        if (p < self._lo).any() or (p > self._hi).any():
            return "geofence", f"position {np.round(p, 3)} outside the box {cfg.geofence_min}..{cfg.geofence_max}"
        t = float(np.degrees(tilt(q)))
        if t > cfg.max_tilt_deg:
            return "tilt", f"tilt {t:.1f} deg > {cfg.max_tilt_deg} deg"
        rate = float(np.linalg.norm(w))
        if rate > cfg.max_body_rate:
            return "body_rate", f"body rate {rate:.2f} rad/s > {cfg.max_body_rate} rad/s"
        return None

    def _arming_problem(self, now: float) -> str | None:
        if self._killed:
            return "the kill switch is latched (reset_kill())"
        if self._fault is not None:
            return f"fault {self._fault.kind!r} is latched (clear_faults())"
        state = self.robot.read_state()
        problem = self._state_problem(state, now)
        if problem:
            return problem[1]
        t = float(np.degrees(tilt(state.quaternion)))
        if t > self.config.arm_max_tilt_deg:
            return f"tilt {t:.1f} deg > arm_max_tilt_deg {self.config.arm_max_tilt_deg}"
        return None

    def _slew_limit(self, command: Command, now: float) -> Command:
        last, cfg = self._last, self.config
        if isinstance(command, MotorCommand) and isinstance(last, MotorCommand):
            m = np.asarray(command.motors, dtype=np.float64)
            limited = np.clip(m, last.motors - cfg.max_motor_step, last.motors + cfg.max_motor_step)
            if not np.array_equal(limited, m):
                self._record(SafetyEvent(now, "slew_limit", f"motors {np.round(m, 3)} -> {np.round(limited, 3)}"))
                return MotorCommand(limited)
        if isinstance(command, AttitudeThrustCommand):
            q, thrust, rates = np.asarray(command.quaternion, dtype=np.float64), command.thrust, command.body_rates
            if isinstance(last, AttitudeThrustCommand):
                step = cfg.max_thrust_step
                thrust = float(np.clip(command.thrust, last.thrust - step, last.thrust + step))
                if thrust != command.thrust:
                    self._record(SafetyEvent(now, "slew_limit", f"thrust {command.thrust:.3f} -> {thrust:.3f}"))
            q_limited = clamp_tilt(q, np.radians(cfg.max_tilt_deg))
            if q_limited is not q:
                self._record(SafetyEvent(now, "attitude_limit", f"setpoint tilt {np.degrees(tilt(q)):.1f} deg "
                                         f"clamped to {cfg.max_tilt_deg} deg"))
            if rates is not None and np.linalg.norm(rates) > cfg.max_body_rate:
                rates = np.asarray(rates, dtype=np.float64) * cfg.max_body_rate / np.linalg.norm(rates)
                self._record(SafetyEvent(now, "attitude_limit", f"body-rate setpoint scaled to {cfg.max_body_rate}"))
            return AttitudeThrustCommand(q_limited, thrust, rates)
        return command

    # Reactions ---------------------------------------------------------------------------------------------
    def _record(self, event: SafetyEvent) -> None:
        self._events.append(event)

    def _trip(self, kind: str, detail: str, cause_time: float, force: bool = False) -> None:
        """Latch a fault: safe command now, then disarm (forced for a kill). Call with the lock held."""
        if self._fault is not None and not force:
            return
        safe_time = None
        if self._armed:
            safe = self.config.safe_motors
            try:
                self.robot.send(MotorCommand(np.zeros(4) if safe is None else np.asarray(safe, dtype=np.float64)))
                safe_time = time.monotonic()
            except (RobotError, TypeError) as e:
                detail += f"; safe command failed: {e}"
        event = SafetyEvent(time.monotonic(), kind, detail, cause_time, safe_time)
        self._record(event)
        self._fault = event
        if self._armed and (force or self.config.disarm_on_fault or kind == "stop"):
            self._armed = False
            try:
                kill = getattr(self.robot, "kill", None)
                kill() if (force and kill is not None) else self.robot.disarm()
            except RobotError as e:
                self._record(SafetyEvent(time.monotonic(), kind, f"disarm after {kind} failed: {e}"))

    def _start_watchdog(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._watchdog_loop, name="safety-watchdog", daemon=True)
            self._thread.start()

    def _watchdog_loop(self) -> None:
        period = 1.0 / self.config.watchdog_hz
        while not self._stop.wait(period):
            with self._lock:
                if not self._armed or self._fault is not None:
                    continue
                now, gap = time.monotonic(), self.clock() - self._last_command_tick
                if gap > self.config.command_timeout:
                    self._trip("watchdog_timeout", f"no command for {gap:.3f} s "
                               f"(command_timeout {self.config.command_timeout} s)", self._last_command_time)
                    continue
                problem = self._state_problem(self.robot.read_state(), now)
                if problem:
                    self._trip(*problem, cause_time=now)


def _finite(command: Command) -> bool:
    if isinstance(command, MotorCommand):
        return bool(np.isfinite(np.asarray(command.motors, dtype=np.float64)).all())
    if isinstance(command, AttitudeThrustCommand):
        rates = np.zeros(3) if command.body_rates is None else np.asarray(command.body_rates, dtype=np.float64)
        return bool(np.isfinite(np.asarray(command.quaternion, dtype=np.float64)).all()
                    and np.isfinite(command.thrust) and np.isfinite(rates).all())
    raise TypeError(f"unknown command type {type(command).__name__}; send MotorCommand or AttitudeThrustCommand")
