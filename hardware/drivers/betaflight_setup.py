"""Set up a Betaflight flight controller over MSP, as its configurator does, and name why it refuses to arm.

``provision(robot, SetupConfig())`` configures a connected ``BetaflightRobot`` for a companion
computer: the MSP receiver (``FEATURE_RX_MSP``), ARM and ANGLE on AUX ranges, the motor protocol,
linear rates (so angle-mode sticks map linearly to angles, as ``RcMapping`` assumes), the failsafe,
then saves to EEPROM; ``calibrate_accelerometer`` runs the level calibration (the vehicle must sit
still and level). Every message is acknowledged by the firmware or the call raises ``RobotError``;
the same code runs over TCP (SITL) and serial (a board). Messages and layouts: ``msp.py``.

Settings that need a reboot (features, motor protocol) set the firmware's ``REBOOT_REQD`` flag:
``provision`` returns True then; call ``robot.reboot()`` and connect again (SITL: the runner
restarts the process, which exits on reboot).

``arming_disable_names(mask)`` decodes ``armingDisableFlags_e`` (Betaflight 4.6,
``src/main/fc/runtime_config.h``) into the names its CLI ``status`` prints
(``armingDisableFlagNames`` in ``runtime_config.c``): ``RXLOSS``, ``CALIB``, ``THROTTLE``, ``ANGLE``, ...
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from . import msp
from .base import RobotError

ARMING_DISABLE_NAMES = (
    "NOGYRO", "FAILSAFE", "RXLOSS", "NOT_DISARMED", "BOXFAILSAFE", "RUNAWAY", "CRASH", "THROTTLE", "ANGLE",
    "BOOTGRACE", "NOPREARM", "LOAD", "CALIB", "CLI", "CMS", "BST", "MSP", "PARALYZE", "GPS", "RESCUE_SW",
    "DSHOT_TELEM", "REBOOT_REQD", "DSHOT_BBANG", "NO_ACC_CAL", "MOTOR_PROTO", "FLIP_SWITCH", "ALT_HOLD_SW",
    "POS_HOLD_SW", "ARM_SWITCH",
)  # bit i of the mask is ARMING_DISABLE_NAMES[i]
MOTOR_PROTOCOLS = ("PWM", "ONESHOT125", "ONESHOT42", "MULTISHOT", "BRUSHED", "DSHOT150", "DSHOT300", "DSHOT600",
                   "PROSHOT1000", "DISABLED")  # motorProtocol_e, drivers/motor_types.h
FAILSAFE_PROCEDURES = ("AUTO-LAND", "DROP", "GPS-RESCUE")  # failsafeProcedure_e, flight/failsafe.h
BOX_ARM, BOX_ANGLE = 0, 1  # permanent box ids, msp/msp_box.c
FEATURE_RX_MSP = 1 << 14
RX_FEATURES = (1 << 0) | (1 << 3) | (1 << 13) | (1 << 14) | (1 << 25)  # PPM, SERIAL, PARALLEL_PWM, MSP, SPI
RATES_TYPE_ACTUAL = 3


def throttle_for_motor(motor: float, idle: float = 0.055, min_check_us: int = 1050) -> float:
    """The throttle command ([0, 1], robo's ``thrust``) at which Betaflight's base motor output is ``motor``.

    The firmware rescales the throttle stick from [min_check, 2000] us to [0, 1] and maps that onto
    [idle, 1] of the motor range (``motor_idle`` 5.5 % by default); robo sends thrust t as 1000 + 1000 t us.
    Use it for a position loop's ``hover_thrust`` from a vehicle's hover motor command.
    """
    stick = (float(motor) - idle) / (1.0 - idle)
    return float(min(max((min_check_us - 1000 + stick * (2000 - min_check_us)) / 1000.0, 0.0), 1.0))


def arming_disable_names(mask: int) -> list[str]:
    """``armingDisableFlags_e`` bit mask -> the flags' CLI names, most critical first; unknown bits as ``BIT<n>``."""
    return [ARMING_DISABLE_NAMES[b] if b < len(ARMING_DISABLE_NAMES) else f"BIT{b}"
            for b in range(32) if mask >> b & 1]


@dataclass
class SetupConfig:
    """What ``provision`` writes. Channels are 0-based RC indices (4 = AUX1), as in ``RcMapping``.

    arm_channel / angle_channel: AUX channels that carry ARM / ANGLE, active in [switch_on_us, 2100].
    motor_protocol: one of ``MOTOR_PROTOCOLS`` (SITL and most test benches: PWM; a racer: DSHOT600).
    max_yaw_rate: deg/s at full yaw stick; roll/pitch rates are made linear too (angle = stick * angle_limit).
    failsafe_delay: s of RX loss before stage 2 (Betaflight's guard time, 0.1 s steps, >= 0.2 s).
    failsafe_procedure: one of ``FAILSAFE_PROCEDURES``; DROP stops the motors and disarms.
    failsafe_throttle: us held during AUTO-LAND.
    rate_pid_scale: factor on the roll and pitch rate loop's P and D (1.0 keeps the firmware's). Betaflight's
        defaults assume an 8 kHz gyro with ~1 ms from gyro to motors; a loop that sees the vehicle less often
        (SITL in robo's real-time physics: one state packet per 4 ms step, motors back a step later) needs
        them lower, as a real frame with slow motors would: at 1.0 that SITL loop oscillates at ~10 Hz into
        motor saturation on its first tilt command (a level hover never excites it); 0.5 flies.
    """

    arm_channel: int = 4
    angle_channel: int = 5
    switch_on_us: int = 1700
    motor_protocol: str = "PWM"
    max_yaw_rate: float = 400.0
    failsafe_delay: float = 0.5
    failsafe_procedure: str = "DROP"
    failsafe_throttle: int = 1000
    rate_pid_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("arm_channel", "angle_channel"):
            if not 4 <= getattr(self, name) < 18:
                raise ValueError(f"{name} must be an AUX channel index 4..17 (4 = AUX1), got {getattr(self, name)}")
        if self.motor_protocol not in MOTOR_PROTOCOLS:
            raise ValueError(f"motor_protocol {self.motor_protocol!r} is not one of {MOTOR_PROTOCOLS}")
        if self.failsafe_procedure not in FAILSAFE_PROCEDURES:
            raise ValueError(f"failsafe_procedure {self.failsafe_procedure!r} is not one of {FAILSAFE_PROCEDURES}")
        if not 0.2 <= self.failsafe_delay <= 20.0:
            raise ValueError(f"failsafe_delay must be 0.2..20 s, got {self.failsafe_delay}")
        if not 0.1 <= self.rate_pid_scale <= 2.0:
            raise ValueError(f"rate_pid_scale must be 0.1..2.0, got {self.rate_pid_scale}")
        if not 10.0 <= self.max_yaw_rate <= 1998.0:
            raise ValueError(f"max_yaw_rate must be 10..1998 deg/s, got {self.max_yaw_rate}")


def provision(robot, config: SetupConfig = SetupConfig()) -> bool:
    """Configure the flight controller behind ``robot`` (a connected, disarmed ``BetaflightRobot``) and save.

    Returns True if the firmware now needs a reboot (``robot.reboot()``, then connect again).
    """
    if robot.read_state() is not None and robot.read_state().armed:
        raise RobotError("refusing to reconfigure an armed flight controller; disarm first")
    features = int.from_bytes(robot.request(msp.MSP_FEATURE_CONFIG)[:4], "little")
    robot.request(msp.MSP_SET_FEATURE_CONFIG, ((features & ~RX_FEATURES) | FEATURE_RX_MSP).to_bytes(4, "little"))
    for slot, (box, channel) in enumerate(((BOX_ARM, config.arm_channel), (BOX_ANGLE, config.angle_channel))):
        robot.request(msp.MSP_SET_MODE_RANGE, msp.pack_mode_range(slot, box, channel - 4, config.switch_on_us, 2100))
    advanced = bytearray(robot.request(msp.MSP_ADVANCED_CONFIG))
    advanced[3] = MOTOR_PROTOCOLS.index(config.motor_protocol)
    robot.request(msp.MSP_SET_ADVANCED_CONFIG, bytes(advanced[:-1]))  # the reply's last byte is DEBUG_COUNT
    robot.request(msp.MSP_SET_RC_TUNING, _linear_rates(robot.request(msp.MSP_RC_TUNING), config.max_yaw_rate))
    fs = list(msp.FAILSAFE_CONFIG.unpack_from(robot.request(msp.MSP_FAILSAFE_CONFIG)))
    fs[0], fs[2], fs[5] = (round(config.failsafe_delay * 10), config.failsafe_throttle,
                           FAILSAFE_PROCEDURES.index(config.failsafe_procedure))
    robot.request(msp.MSP_SET_FAILSAFE_CONFIG, msp.FAILSAFE_CONFIG.pack(*fs))
    if config.rate_pid_scale != 1.0:
        robot.request(msp.MSP_SET_PID, _scaled_rate_pids(robot.request(msp.MSP_PID), config.rate_pid_scale))
    save(robot)
    return robot.status_ex().reboot_required


def _scaled_rate_pids(current: bytes, scale: float) -> bytes:
    """MSP_PID (P, I, D bytes per item: roll, pitch, yaw, level, mag) -> MSP_SET_PID with roll and pitch P, D
    scaled. (MSP_SET_PID leaves simplified tuning alone: only its sliders or a CLI ``save`` re-derive the gains.)"""
    pids = bytearray(current)
    for axis in (0, 1):
        for term in (0, 2):
            pids[3 * axis + term] = min(255, round(pids[3 * axis + term] * scale))
    return bytes(pids)


def _linear_rates(current: bytes, max_yaw_rate: float) -> bytes:
    """MSP_RC_TUNING -> MSP_SET_RC_TUNING with ACTUAL rates, center sensitivity = max rate, no expo: linear
    sticks (roll/pitch 400 deg/s; in angle mode only the linearity matters), yaw at ``max_yaw_rate``."""
    t = list(msp.RC_TUNING.unpack_from(current))
    yaw = round(max_yaw_rate / 10)
    t[0], t[1], t[2], t[3], t[4] = 40, 0, 40, 40, yaw  # roll rc rate, roll expo, rates r/p/y
    t[9], t[10], t[11], t[12] = 0, yaw, 40, 0  # yaw expo, yaw rc rate, pitch rc rate, pitch expo
    t[18] = RATES_TYPE_ACTUAL
    return msp.RC_TUNING.pack(*t)


def disable_runaway_takeoff(robot) -> None:
    """Turn off runaway-takeoff prevention until the next reboot (MSP_SET_ARMING_DISABLED 0, 1), before ``arm``.

    Betaflight disarms (flag ``RUNAWAY``) a quad whose PID sum saturates for 75 ms unless it first saw 0.5 s of
    "stable flight": throttle >= 20 % with a roll/pitch/yaw stick deflected > 15 %, or throttle >= 40 %, with small
    PID sums (``fc/core.c``). A companion computer holding position keeps the sticks near centre at ~27 % throttle,
    so the check never deactivates and the first brisk manoeuvre disarms in the air. (CLI, permanent:
    ``set runaway_takeoff_prevention = OFF``.)
    """
    robot.request(msp.MSP_SET_ARMING_DISABLED, bytes([0, 1]))


def save(robot) -> None:
    """MSP_EEPROM_WRITE: persist the settings (the firmware re-reads them)."""
    robot.request(msp.MSP_EEPROM_WRITE, timeout=3.0)


def calibrate_accelerometer(robot, timeout: float = 15.0) -> None:
    """Level the accelerometer (the vehicle must sit still and level), wait until done, save.

    Betaflight averages 400 accelerometer samples; the SITL on a loaded 2-core machine took 2.2-4.1 s (30 starts),
    so ``timeout`` leaves room for a slower firmware clock."""
    robot.request(msp.MSP_ACC_CALIBRATION)
    deadline = time.monotonic() + timeout
    time.sleep(0.05)
    while (flags := robot.status_ex().arming_disable) & (1 << ARMING_DISABLE_NAMES.index("CALIB")) \
            or flags & (1 << ARMING_DISABLE_NAMES.index("NO_ACC_CAL")):
        if time.monotonic() > deadline:
            raise RobotError(f"accelerometer calibration did not finish within {timeout} s (flags "
                             f"{arming_disable_names(flags)}); keep the vehicle still and level, then retry")
        time.sleep(0.05)
    save(robot)


def wait_ready(robot, timeout: float = 10.0, allowed: tuple[str, ...] = ("ARM_SWITCH",)) -> None:
    """Wait until no arming-disable flag but ``allowed`` is set (boot grace time, gyro calibration).

    The boot grace time (``BOOTGRACE``, 5 s) runs on the firmware's clock: in SITL that is sim time, which
    falls behind the wall clock when the simulator cannot keep up."""
    deadline = time.monotonic() + timeout
    while names := [n for n in arming_disable_names(robot.status_ex().arming_disable) if n not in allowed]:
        if time.monotonic() > deadline:
            raise RobotError(f"Betaflight is not ready to arm after {timeout} s: {', '.join(names)}")
        time.sleep(0.05)


__all__ = ["ARMING_DISABLE_NAMES", "SetupConfig", "arming_disable_names", "calibrate_accelerometer",
           "disable_runaway_takeoff", "provision", "save", "throttle_for_motor", "wait_ready"]
