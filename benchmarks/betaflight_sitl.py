"""The real Betaflight 4.6 firmware (SITL) in robo's physics: build, set-up, arming, loop rates, flight, failsafe.

Prints one table: the SITL build time (``--rebuild`` times a fresh build into a temporary cache; otherwise the
time recorded when the cached binary was built), provisioning over MSP and arm time, the loop rates achieved
(physics steps/s, sim time / wall time, share of state packets the firmware answered in time, MSP telemetry
rate), the companion-computer path (robo's ``PositionHold`` -> ``SafetyLayer`` -> ``BetaflightRobot`` -> MSP ->
the firmware's angle mode, PIDs, filters and mixer -> robo's physics): hover and figure-eight errors, the same
controller against the MSP stand-in (``BetaflightMSPServer``), and the time from the last RC message to motors
off when the RC stream stops (failsafe, DROP after ``failsafe_delay``).

    python benchmarks/betaflight_sitl.py
    python benchmarks/betaflight_sitl.py --hover-s 10 --eight-s 8 --rebuild
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from hardware.drivers.base import AttitudeThrustCommand
from hardware.drivers.betaflight import BetaflightRobot
from hardware.drivers.betaflight_setup import (SetupConfig, calibrate_accelerometer, disable_runaway_takeoff, provision,
                                               throttle_for_motor, wait_ready)
from hardware.drivers.position_hold import PositionHold, fly, hover_then_eight
from hardware.safety import SafetyConfig, SafetyLayer
from sims.quadrotor import preset
from sims.vehicles import betaflight_firmware as bf
from sims.vehicles.betaflight_sitl import BetaflightMSPServer
from sims.vehicles.sim_vehicle import SimVehicle
from table import print_table  # benchmarks/ is on sys.path when run as a script

SITL_ACC_1G = 256


def build_time(rebuild: bool) -> float | None:
    if not rebuild:
        bf.sitl_binary()
        return bf.build_seconds()
    saved = os.environ.get("ROBO_CACHE")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["ROBO_CACHE"] = cache
        try:
            t = time.monotonic()
            bf.sitl_binary()
            return time.monotonic() - t
        finally:
            os.environ.pop("ROBO_CACHE") if saved is None else os.environ.update(ROBO_CACHE=saved)


def errors(log: dict, start: float, end: float) -> float:
    """Median distance (m) to the target over start <= t < end."""
    keep = (log["t"] >= start) & (log["t"] < end)
    return float(np.median(np.linalg.norm(log["position"][keep] - log["target"][keep], axis=1)))


def flight_rows(log: dict, trajectory, hover_s: float, prefix: str) -> dict:
    climb = trajectory.climb
    row = {f"{prefix} hover median error (m)": errors(log, climb + 2.0, climb + hover_s),
           f"{prefix} stopped early": (log["stopped"] or "no")[:90]}
    if trajectory.duration > climb + hover_s:
        row[f"{prefix} figure-eight median error (m)"] = errors(log, climb + hover_s, trajectory.duration)
    return row


def firmware_run(run_dir, hover_s: float, eight_s: float) -> dict:
    params = preset("betaflight_quadx")
    out: dict = {}
    with bf.BetaflightFirmware(params, run_dir=run_dir) as fw:
        robot = BetaflightRobot(fw.msp_address, acc_1g=SITL_ACC_1G, position_source=fw.mocap)
        robot.connect(timeout=5.0)
        t = time.monotonic()
        provision(robot, SetupConfig(failsafe_delay=0.5, failsafe_procedure="DROP", rate_pid_scale=0.5))
        calibrate_accelerometer(robot)
        out["provisioning + acc calibration (s)"] = time.monotonic() - t
        wait_ready(robot, timeout=60.0)
        disable_runaway_takeoff(robot)
        safe = SafetyLayer(robot, SafetyConfig(command_timeout=0.2))
        t = time.monotonic()
        safe.arm()
        out["arm time (s)"] = time.monotonic() - t
        trajectory = hover_then_eight(hover_s=hover_s, eight_s=eight_s)
        updates, t0 = robot.telemetry_replies, time.monotonic()
        log = fly(safe, PositionHold(hover_thrust=throttle_for_motor(params.hover_command)), trajectory,
                  trajectory.duration)
        out["MSP telemetry rate (Hz)"] = (robot.telemetry_replies - updates) / (time.monotonic() - t0)
        out.update(flight_rows(log, trajectory, hover_s, "firmware"))
        rates = fw.rates()
        out.update({"loop mode": fw.mode, "physics steps/s": rates["step_hz"], "sim time / wall time":
                    rates["sim_over_wall"], "state packets answered in time": rates["answered"]})
        safe.disarm()  # the safety layer's watchdog rests while disarmed
        out["RC loss -> motors off (s)"] = rc_loss(robot, fw)
        safe.close()
    return out


def rc_loss(robot: BetaflightRobot, fw) -> float:
    """On the ground: arm, spin up above idle, stop the RC stream, time until the firmware stops the motors."""
    time.sleep(0.5)
    fw.reset((0.0, 0.0, 0.0))
    wait_ready(robot, timeout=10.0)  # level on the ground again, the ARM switch seen low
    robot.arm(timeout=3.0)
    robot.send(AttitudeThrustCommand(np.array([1.0, 0, 0, 0]), 0.2))
    time.sleep(0.5)
    fw.log_motors = True
    robot._running.clear()  # the companion computer hangs: its MSP_SET_RAW_RC stream stops
    lost = time.monotonic()
    time.sleep(4.0)
    robot._arm_request = False
    off = [t for t, _, m in fw.motor_log if t > lost and not m.any()]
    return off[0] - lost if off else float("nan")


def standin_run(hover_s: float, eight_s: float) -> dict:
    params = preset("betaflight_quadx")
    vehicle = SimVehicle(params, position=(0.0, 0.0, 0.0))
    with BetaflightMSPServer(vehicle) as server:
        robot = BetaflightRobot(server.address, position_source=lambda: (vehicle.snapshot().position,
                                                                          vehicle.snapshot().velocity))
        safe = SafetyLayer(robot, SafetyConfig(command_timeout=0.2))
        safe.connect(timeout=5.0)
        safe.arm()
        trajectory = hover_then_eight(hover_s=hover_s, eight_s=eight_s)
        hover = params.mass * float(np.linalg.norm(params.gravity)) / params.max_thrust
        log = fly(safe, PositionHold(hover_thrust=hover), trajectory, trajectory.duration)
        safe.close()
    return flight_rows(log, trajectory, hover_s, "stand-in")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hover-s", type=float, default=10.0)
    ap.add_argument("--eight-s", type=float, default=8.0)
    ap.add_argument("--rebuild", action="store_true", help="time a fresh build into a temporary cache")
    args = ap.parse_args()
    row = {"SITL build (s)": build_time(args.rebuild)}
    with tempfile.TemporaryDirectory() as run_dir:
        row.update(firmware_run(run_dir, args.hover_s, args.eight_s))
    row.update(standin_run(args.hover_s, args.eight_s))
    print_table([{"measurement": k, "value": v} for k, v in row.items()], ["measurement", "value"])


if __name__ == "__main__":
    main()
