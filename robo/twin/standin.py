"""The stand-in "real robot": a simulated PX4 vehicle with hidden, perturbed parameters, sensor noise
and latency, reached only through ``PX4Robot`` over loopback UDP and the safety layer.

The vehicle object stays inside this module: the caller gets the safety-wrapped driver (a ``Robot``)
and, from ``stand_in``, a person's one action on the world (``put_back`` after a crash), so nothing
downstream (the twin above all) can read the truth.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch

from hardware.drivers.mavlink_signing import resolve_key
from hardware.drivers.px4 import PX4Robot
from hardware.safety import SafetyConfig, SafetyLayer
from sims.quadrotor.dynamics import MOTOR, hover_state
from sims.vehicles import MavlinkVehicle, SensorConfig, VehicleConfig


@dataclass
class StandInConfig:
    """robot: the hidden truth, ``{preset: crazyflie, mass: ..., thrust_curve: ...}`` or a preset name;
    sensors: noise and latency (``sims.vehicles.SensorConfig`` fields); initial_position: world FLU m;
    safety: ``SafetyConfig`` fields (the lockstep stand-in waits for each command and holds its pose in the
    air while disarmed between episodes, so the watchdog, state age and arming tilt limits are generous;
    a real robot keeps flying between episodes under the reset controller instead);
    signing_key_file: the MAVLink signing key's file, as ``PX4Config.signing_key_file`` (unset: the key
    from ``$ROBO_MAVLINK_KEY``, else unsigned); the stand-in vehicle holds the same key as the driver."""

    robot: str | dict = "crazyflie"
    sensors: dict = field(default_factory=dict)
    initial_position: tuple[float, float, float] = (0.0, 0.0, 1.0)
    safety: dict = field(default_factory=lambda: {"command_timeout": 10.0, "max_state_age": 10.0,
                                                  "arm_max_tilt_deg": 45.0})
    connect_timeout: float = 5.0
    offboard_setpoint_timeout: float = 5.0  # s; generous: a loaded host streams setpoints unevenly
    signing_key_file: str | None = None


@dataclass
class StandIn:
    """The stand-in as a person in the lab sees it: ``robot`` (the safety-wrapped driver) and
    ``put_back(position)``, what a person does after a crash (pick the robot up, hold it upright and
    still at ``position``, world FLU m). Neither reads the hidden parameters or the true state."""

    robot: SafetyLayer
    _vehicle: MavlinkVehicle

    def put_back(self, position, spinning: bool = True, timeout: float = 2.0) -> None:
        """Hold the robot level and still at ``position`` and let go: a hand launch, with the motors
        spinning at hover speed (``spinning``) or stopped. Then wait, as a person would, until the
        driver has reported a measurement taken after the placing (the arming checks read it)."""
        self.robot.stop("put back by hand")
        placed = time.monotonic()
        motors = hover_state(self._vehicle.sim.params)[0, MOTOR] if spinning else torch.zeros(4)
        self._vehicle.set_state(position=tuple(float(x) for x in position), quaternion=(1.0, 0.0, 0.0, 0.0),
                                velocity=(0.0, 0.0, 0.0), angular_velocity=(0.0, 0.0, 0.0), motors=motors)
        while time.monotonic() < placed + timeout:
            state = self.robot.read_state()
            if state is not None and state.timestamp > placed + 0.05:  # past any message already in flight
                return
            time.sleep(0.005)
        raise RuntimeError(f"no measurement from the stand-in within {timeout} s of putting it back")


@contextmanager
def stand_in(config: StandInConfig | None = None) -> Iterator[StandIn]:
    """Start the hidden vehicle, connect ``PX4Robot`` to it over UDP, yield a ``StandIn``."""
    c = config or StandInConfig()
    key = resolve_key(key_file=c.signing_key_file)  # as PX4Robot's: the file, else $ROBO_MAVLINK_KEY, else None
    vcfg = VehicleConfig(robot=c.robot, initial_position=tuple(c.initial_position), sensors=SensorConfig(**c.sensors),
                         offboard_setpoint_timeout=c.offboard_setpoint_timeout, signing_key=key)
    with MavlinkVehicle(vcfg) as vehicle:
        robot = SafetyLayer(PX4Robot(connection=f"udpout:{vehicle.address}", signing_key=key),
                            SafetyConfig.from_dict(c.safety))
        robot.connect(c.connect_timeout)
        try:
            yield StandIn(robot, vehicle)
        finally:
            robot.close()


@contextmanager
def stand_in_robot(config: StandInConfig | None = None) -> Iterator[SafetyLayer]:
    """``stand_in(config)``'s robot alone: the safety-wrapped driver."""
    with stand_in(config) as s:
        yield s.robot


def perturbed(preset_name: str, mass_scale: float, thrust_scale: float) -> dict:
    """A hidden-parameter robot config: ``preset_name`` with mass and thrust curve scaled."""
    import numpy as np

    from sims.envs import make_robot

    p = make_robot(preset_name)
    return {"preset": preset_name, "mass": p.mass * mass_scale,
            "thrust_curve": (np.asarray(p.thrust_curve) * thrust_scale).tolist()}
