"""``robo deploy mode=companion``: attitude-level flying through ``BetaflightRobot``, as a companion computer flies
a Betaflight quad: the stock firmware (the lockstep SITL build, on sim time, in robo's physics) runs its own
attitude and rate loops, and robo sends angle-mode RC (attitude and collective thrust) over MSP at the control
period, through the safety layer, from mocap position and velocity.

What flies is robo's attitude-level controller, ``hardware.drivers.position_hold.PositionHold`` (PID on position,
to a tilt and thrust): robo's trained policies act on the four motors, which Betaflight takes from the outside
only when disarmed (motor test), so they fly onboard (``mode=onboard``). The flight, its reference and its scoring
are the onboard flight's (``robo.onboard``: hover or figure-eight at the target, from the ground or hand-launched,
median error after the take-off). The companion's loop and the safety layer's command watchdog run on sim time
(the simulator's clock), so a slow host slows the flight down without changing it, as the firmware's lockstep does.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from hardware.drivers.betaflight_setup import SetupConfig, disable_runaway_takeoff, throttle_for_motor, wait_ready
from hardware.drivers.position_hold import PositionHold, fly
from hardware.safety import SafetyConfig, SafetyLayer
from robo.onboard import STARTS, TARGET, Flight, connect_provisioned, reference_at
from sims.quadrotor.params import QuadrotorParams
from sims.vehicles import betaflight_firmware as bf

COMPANION_PERIOD = 0.02  # s: 50 Hz, the MSP RC rate robo's Betaflight driver flies at


def position_hold(params: QuadrotorParams, c: dict) -> PositionHold:
    """``PositionHold`` from ``configs/policy/position_hold.yaml``'s gains, its hover thrust from ``params``
    (nominal; the integrator finds the rest)."""
    return PositionHold(hover_thrust=throttle_for_motor(params.hover_command), kp=tuple(c["kp"]), kd=tuple(c["kd"]),
                        ki=tuple(c["ki"]), max_tilt=math.radians(float(c["max_tilt_deg"])))


def fly_companion(controller: PositionHold, params: QuadrotorParams, run_dir: str | Path, seconds: float,
                  reference: str, start: str = "ground", target=TARGET, period: float = COMPANION_PERIOD) -> Flight:
    """Start the stock lockstep firmware on ``params``, provision, level and arm it over MSP, and fly ``controller``
    toward the reference for ``seconds`` of sim time through ``SafetyLayer`` -> ``BetaflightRobot``; -> the flight
    (every physics step's state) with the firmware's rates and the companion loop's ticks."""
    if start not in STARTS:
        raise ValueError(f"start={start!r}; choose one of {list(STARTS)}")
    fw = bf.BetaflightFirmware(params, run_dir=Path(run_dir), lockstep=True).start()
    try:
        robot = connect_provisioned(fw, SetupConfig(failsafe_delay=0.5, failsafe_procedure="DROP",
                                                    rate_pid_scale=0.5))
        sim_clock = robot.clock  # the firmware's sim time: the loop's, the driver's and the safety layer's clock
        safe = SafetyLayer(robot, SafetyConfig(command_timeout=0.2))
        try:
            wait_ready(robot, timeout=60.0)
            disable_runaway_takeoff(robot)
            if start == "hand":
                fw.reset(tuple(target), held=True, hover_motors=True)
                wait_ready(robot, timeout=60.0)
            safe.arm()
            fw.log_states = True
            t0 = sim_clock()

            def trajectory(t: float):
                p, v = reference_at(np.array([t]), reference, target)
                return p[0], v[0]

            log = fly(safe, controller, trajectory, seconds, period=period, clock=sim_clock)
            fw.log_states = False
            rates = fw.rates()
            safe.disarm()
        finally:
            safe.close()
    finally:
        fw.close()
    firmware = {**rates, "ticks": len(log["t"]), "stopped": log["stopped"]}
    return Flight.logged(fw.state_log, t0, seconds, reference, period, firmware, target)
