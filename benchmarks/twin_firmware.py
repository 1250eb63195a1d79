"""The digital twin shadowing a quadrotor flown through the real Betaflight 4.6 firmware (SITL), against the
same measurement on robo's MSP stand-in (``BetaflightMSPServer`` + ``SimVehicle``, as in
``benchmarks/betaflight_sitl.py``). Prints one table.

Both vehicles hide the same truth from the twin: ``betaflight_quadx`` 30 % heavier (``--mass-scale``; a thrust
scale with ``--thrust-scale``). robo's ``PositionHold`` flies them through ``SafetyLayer`` -> ``BetaflightRobot``
(angle-mode RC over MSP at 50 Hz): climb to 1 m, hover ``--hover-s``, then ``--eight-s`` of a figure-eight (the
rotational excitation the thrust scale needs; hover alone identifies thrust scale / mass, and the mass with the
thrust scale at its nominal 1). The twin (``sims.twin.DigitalTwin``, nominal
``betaflight_quadx``, one tick per 20 ms control tick, latency 0..3 ticks measured online) shadows the flight
through ``robo.twin.runner.ShadowRobot``: its action is the motor outputs the flight controller reports
(``MSP_MOTOR`` in the driver's telemetry bundle, ``read_motors=True``), its measurement mocap position and
velocity plus MSP attitude and gyro. Rows: identified mass, thrust scale, their ratio (what hover alone
identifies) and latency vs the truth; one-step and N-step open-loop position errors of the calibrated twin
over the flight's shadowed part; the age of the motor readings; the twin's cost per tick.

    python benchmarks/twin_firmware.py
    python benchmarks/twin_firmware.py --hover-s 6 --eight-s 8 --thrust-scale 1.1
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch

from hardware.drivers.betaflight import BetaflightRobot
from hardware.drivers.betaflight_setup import (SetupConfig, calibrate_accelerometer, disable_runaway_takeoff, provision,
                                               throttle_for_motor, wait_ready)
from hardware.drivers.position_hold import PositionHold, fly, hover_then_eight
from hardware.safety import SafetyConfig, SafetyLayer
from robo.twin.runner import ShadowRobot, n_step_errors
from sims.quadrotor import preset
from sims.twin import DigitalTwin, TwinConfig
from sims.vehicles import betaflight_firmware as bf
from sims.vehicles.betaflight_sitl import BetaflightMSPServer
from sims.vehicles.sim_vehicle import SimVehicle
from table import print_table  # benchmarks/ is on sys.path when run as a script

PERIOD = 0.02  # s, the control tick = the twin's tick
SITL_ACC_1G = 256
N_STEPS = (10, 25)  # ticks of open-loop prediction: 0.2 s, 0.5 s


def hidden_truth(mass_scale: float, thrust_scale: float):
    nominal = preset("betaflight_quadx")
    return nominal.replace(mass=nominal.mass * mass_scale, thrust_curve=np.asarray(nominal.thrust_curve) * thrust_scale,
                           name="betaflight_quadx-hidden")


def make_twin() -> DigitalTwin:
    return DigitalTwin(TwinConfig(robot={"preset": "betaflight_quadx", "dt": PERIOD}, max_latency_steps=3))


def shadow_flight(safe, twin: DigitalTwin, hover_s: float, eight_s: float) -> tuple[ShadowRobot, dict]:
    """Arm ``safe``, fly the trajectory with ``twin`` shadowing; -> the ShadowRobot and fly's log."""
    shadow = ShadowRobot(safe, twin, live=False)  # fed after the flight: its compute stays out of the 50 Hz loop
    trajectory = hover_then_eight(hover_s=hover_s, eight_s=eight_s)
    hover = throttle_for_motor(preset("betaflight_quadx").hover_command)  # nominal; the integrator finds the rest
    controller = PositionHold(hover_thrust=hover)
    safe.arm()
    log = fly(shadow, controller, trajectory, trajectory.duration, period=PERIOD)
    if log["stopped"]:
        log["stopped"] += f"; safety events {[e.kind for e in safe.events]}"
    shadow.catch_up()
    return shadow, log


def motor_age(motor_log, shadow_ticks: list) -> float:
    """Mean age (s) of the motor outputs the twin got: control tick time minus the time the physics applied them
    (the lag that best aligns the MSP readings with the physics' motor log)."""
    wall = np.array([t for t, _, _ in motor_log])
    applied = np.array([m for _, _, m in motor_log])
    times, motors = (np.array(c) for c in zip(*shadow_ticks))
    lags = np.arange(0.0, 0.1, 0.002)
    cost = [np.abs(applied[np.clip(np.searchsorted(wall, times - lag), 0, len(wall) - 1)] - motors).mean()
            for lag in lags]
    return float(lags[int(np.argmin(cost))])


class _TickClock:
    """Wraps the robot given to ShadowRobot: keeps (wall time, motors) of every state read (for motor_age)."""

    def __init__(self, robot):
        self.robot, self.ticks = robot, []

    def read_state(self):
        state = self.robot.read_state()
        if state is not None and state.extra.get("motors") is not None and state.armed:
            self.ticks.append((time.monotonic(), state.extra["motors"]))
        return state

    def __getattr__(self, name):
        return getattr(self.robot, name)


def firmware_run(truth, hover_s: float, eight_s: float) -> dict:
    with tempfile.TemporaryDirectory() as run_dir, bf.BetaflightFirmware(truth, run_dir=run_dir) as fw:
        robot = BetaflightRobot(fw.msp_address, acc_1g=SITL_ACC_1G, position_source=fw.mocap, read_motors=True)
        robot.connect(timeout=5.0)
        provision(robot, SetupConfig(failsafe_delay=0.5, failsafe_procedure="DROP", rate_pid_scale=0.5))
        calibrate_accelerometer(robot)
        wait_ready(robot, timeout=60.0)
        disable_runaway_takeoff(robot)
        safe = SafetyLayer(robot, SafetyConfig(command_timeout=0.2))
        clock = _TickClock(safe)
        twin = make_twin()
        fw.log_motors = True
        shadow, log = shadow_flight(clock, twin, hover_s, eight_s)
        rates = fw.rates()
        safe.close()
        out = summary(shadow, log, truth)
        extra = {"motor reading age (s)": motor_age(fw.motor_log, clock.ticks), "physics steps/s": rates["step_hz"],
                 "sim time / wall time": rates["sim_over_wall"]}
        out.update({k: (v, "") for k, v in extra.items()})
        out["firmware restarts at start"] = (fw.counts["restarts"], "")
    return out


def standin_run(truth, hover_s: float, eight_s: float) -> dict:
    vehicle = SimVehicle(truth, position=(0.0, 0.0, 0.0))
    with BetaflightMSPServer(vehicle) as server:
        robot = BetaflightRobot(server.address, read_motors=True,
                                position_source=lambda: (vehicle.snapshot().position, vehicle.snapshot().velocity))
        safe = SafetyLayer(robot, SafetyConfig(command_timeout=0.2))
        safe.connect(timeout=5.0)
        shadow, log = shadow_flight(safe, make_twin(), hover_s, eight_s)
        safe.close()
    return summary(shadow, log, truth)


def summary(shadow: ShadowRobot, log: dict, truth) -> dict:
    twin, a = shadow.twin, shadow.flight.arrays()
    if len(a["mass"]) < 2 * max(N_STEPS):
        raise RuntimeError(f"the twin shadowed only {len(a['mass'])} ticks (stopped: {log['stopped']})")
    est, nominal = twin.estimate, preset("betaflight_quadx")
    params, lat = twin.calibrated_params(), twin.latency_steps
    warm = twin.config.warmup_steps  # score after the estimates drive the twin's model
    out = {"stopped early": (log["stopped"] or "no")[:60], "ticks shadowed": len(a["mass"]),
           "mass (kg)": est["mass"], "thrust scale": est["thrust_scale"],
           "thrust scale / mass (1/kg)": est["thrust_scale"] / est["mass"], "latency (ticks of 20 ms)": lat,
           "twin cost per tick (ms)": 1000 * shadow.seconds / len(shadow.record),
           "running RMS innovation, position (m)": float(a["prediction_error"][-1, 0])}
    for n in (1, *N_STEPS):
        e = n_step_errors(shadow.record, params, n, lat, start=warm)
        out[f"{n}-step position error, median (m)"] = float(np.median(e))
    e = n_step_errors(shadow.record, nominal.replace(dt=PERIOD), N_STEPS[-1], lat, start=warm)
    out[f"{N_STEPS[-1]}-step position error, uncalibrated twin (m)"] = float(np.median(e))
    truth_row = {"mass (kg)": truth.mass, "thrust scale": float(truth.thrust_curve[0][2] / nominal.thrust_curve[0][2])}
    truth_row["thrust scale / mass (1/kg)"] = truth_row["thrust scale"] / truth.mass
    out["mass error (%)"] = 100 * abs(est["mass"] / truth.mass - 1)
    out["thrust scale / mass error (%)"] = 100 * abs(out["thrust scale / mass (1/kg)"]
                                                     / truth_row["thrust scale / mass (1/kg)"] - 1)
    return {k: (v, truth_row.get(k, "")) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hover-s", type=float, default=8.0)
    ap.add_argument("--eight-s", type=float, default=0.0)
    ap.add_argument("--mass-scale", type=float, default=1.3)
    ap.add_argument("--thrust-scale", type=float, default=1.0)
    args = ap.parse_args()
    torch.set_num_threads(1)  # the twin's tensors are (4, 17): threads only add overhead
    truth = hidden_truth(args.mass_scale, args.thrust_scale)
    fw = firmware_run(truth, args.hover_s, args.eight_s)
    sd = standin_run(truth, args.hover_s, args.eight_s)
    rows = [{"measurement": k, "firmware": v[0], "stand-in": sd.get(k, ("-",))[0], "truth": v[1]}
            for k, v in fw.items()]
    print_table(rows, ["measurement", "firmware", "stand-in", "truth"])


if __name__ == "__main__":
    main()
