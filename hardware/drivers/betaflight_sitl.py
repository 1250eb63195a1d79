"""Betaflight SITL UDP protocol: packet layouts and robo <-> Betaflight conversions (pure functions).

Packet layouts are those of Betaflight's simulator target, ``src/platform/SIMULATOR/target/SITL/
target.h`` (formerly ``src/main/target/SITL/target.h``; the sockets are in ``udplink.c``), host
byte order (little endian on x86/ARM), C struct alignment:

* ``fdm_packet`` (simulator -> FC, UDP port 9003): double timestamp s; double
  imu_angular_velocity_rpy[3] rad/s; double imu_linear_acceleration_xyz[3] m/s^2 (minus the body
  FLU specific force: -9.81 on z at rest); double imu_orientation_quat[4] (w, x, y, z);
  double velocity_xyz[3] m/s; double position_xyz[3]; double pressure Pa. 144 bytes.
* ``rc_packet`` (simulator -> FC, port 9004): double timestamp; uint16 channels[16] us. 40 bytes.
* ``servo_packet`` (FC -> simulator, port 9002): float motor_speed[4], [0, 1] ([-1, 1] in 3D), in the order
  [FR, RL, FL, RR]: ``pwmCompleteMotorUpdate`` rotates Betaflight's motors 1..4 (RR, FR, RL, FL). 16 bytes.
* ``servo_packet_raw`` (FC -> simulator, port 9001): uint16 motorCount, 2 bytes padding,
  float pwm_output_raw[16] us. 68 bytes.

``sitl.c`` accepts a packet only if its size equals ``sizeof`` the struct, and drops an fdm
packet whose timestamp is older than the last one ("don't use old packet").

Conventions robo sends (legacy, non-Gazebo bridge path of ``sitl.c``, checked against the 4.6 SITL): gyro
in body FRD (``sitl.c`` flips y and z: the firmware's own body axes are FLU); the accelerometer as minus the
body FLU specific force (``sitl.c`` negates all three axes); quaternion body FRD -> world NED; with
``USE_VIRTUAL_GPS`` (the SITL target enables GPS) velocity is ENU and position is (longitude deg, latitude deg,
altitude m). robo's world FLU is taken as North-West-Up. Betaflight's motor numbering (quad X, MSP_SET_MOTOR,
MSP_MOTOR) is [rear-right, front-right, rear-left, front-left]; the servo packet's is [FR, RL, FL, RR];
robo's is [front-right, back-right, back-left, front-left].

Betaflight's own attitude convention (MSP_ATTITUDE, ``imu.c``): roll right-wing-down +, pitch
nose-down + ("Positive angle - nose down"), yaw = heading, clockwise from north. Its gyro axes
(MSP_RAW_IMU, checked against the 4.6 SITL): FLU -- roll rate right +, pitch rate nose-down +, yaw
rate counter-clockwise + -- in sensor counts (16.4 per deg/s), not deg/s.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

PORT_PWM_RAW, PORT_PWM, PORT_STATE, PORT_RC = 9001, 9002, 9003, 9004
FDM = struct.Struct("<d3d3d4d3d3dd")
RC = struct.Struct("<d16H")
SERVO = struct.Struct("<4f")
SERVO_RAW = struct.Struct("<H2x16f")
RC_CHANNELS = 16
EARTH_RADIUS = 6378137.0  # m, WGS-84 equatorial
BF_FROM_ROBO = [1, 0, 2, 3]  # Betaflight motor i (MSP) = robo[BF_FROM_ROBO[i]] (a swap: its own inverse)
ROBO_FROM_SERVO = [0, 3, 1, 2]  # robo motor i = servo_packet[ROBO_FROM_SERVO[i]]
SERVO_FROM_ROBO = [0, 2, 3, 1]  # servo_packet[i] = robo[SERVO_FROM_ROBO[i]]


@dataclass
class FdmPacket:
    """``fdm_packet`` fields, in the packet's own frames (see the module docstring)."""

    timestamp: float
    angular_velocity_rpy: np.ndarray  # (3,)
    linear_acceleration_xyz: np.ndarray  # (3,)
    orientation_quat: np.ndarray  # (4,) w, x, y, z
    velocity_xyz: np.ndarray  # (3,)
    position_xyz: np.ndarray  # (3,)
    pressure: float

    def pack(self) -> bytes:
        return FDM.pack(self.timestamp, *self.angular_velocity_rpy, *self.linear_acceleration_xyz,
                        *self.orientation_quat, *self.velocity_xyz, *self.position_xyz, self.pressure)

    @classmethod
    def unpack(cls, data: bytes) -> "FdmPacket":
        if len(data) != FDM.size:
            raise ValueError(f"fdm_packet has {len(data)} bytes, expected {FDM.size}")
        v = np.array(FDM.unpack(data))
        return cls(float(v[0]), v[1:4], v[4:7], v[7:11], v[11:14], v[14:17], float(v[17]))


def pack_rc(timestamp: float, channels) -> bytes:
    ch = np.asarray(channels)
    if ch.shape != (RC_CHANNELS,):
        raise ValueError(f"rc_packet needs {RC_CHANNELS} channels, got shape {ch.shape}")
    return RC.pack(float(timestamp), *(int(c) for c in ch))


def unpack_servo(data: bytes) -> np.ndarray:
    """``servo_packet`` bytes -> motors (4,) in robo's order; ``ValueError`` if malformed."""
    if len(data) != SERVO.size:
        raise ValueError(f"servo_packet has {len(data)} bytes, expected {SERVO.size}")
    packet = np.array(SERVO.unpack(data), dtype=np.float64)
    if not np.all(np.isfinite(packet)):
        raise ValueError(f"servo_packet holds non-finite motor values {packet.tolist()}")
    return packet[ROBO_FROM_SERVO]


# frames ----------------------------------------------------------------------------------------
def flu_to_frd(v) -> np.ndarray:
    """Vector (3,) in a FLU (or NWU) frame -> the same vector in FRD (or NED): (x, -y, -z)."""
    v = np.asarray(v, dtype=np.float64)
    return np.array([v[0], -v[1], -v[2]])


def quat_flu_to_ned_frd(q) -> np.ndarray:
    """Body FLU -> world NWU quaternion (w, x, y, z) -> body FRD -> world NED: (w, x, -y, -z)."""
    q = np.asarray(q, dtype=np.float64)
    return np.array([q[0], q[1], -q[2], -q[3]])


def nwu_to_geodetic(position, origin) -> np.ndarray:
    """Local NWU position (3,) m -> (longitude deg, latitude deg, altitude m) about ``origin``
    (lat deg, lon deg, alt m); flat-earth approximation, fine within a few km."""
    lat0, lon0, alt0 = origin
    north, west, up = np.asarray(position, dtype=np.float64)
    lat = lat0 + math.degrees(north / EARTH_RADIUS)
    lon = lon0 - math.degrees(west / (EARTH_RADIUS * math.cos(math.radians(lat0))))
    return np.array([lon, lat, alt0 + up])


def pressure_at(altitude: float) -> float:
    """International standard atmosphere pressure (Pa) at ``altitude`` m (Betaflight's formula)."""
    return 101325.0 * (1.0 - 2.25577e-5 * altitude) ** 5.25588


def state_to_fdm(timestamp: float, position, velocity, quaternion, angular_velocity, specific_force,
                 origin=(47.0, 8.0, 400.0)) -> FdmPacket:
    """robo state (world NWU/FLU, body FLU, SI) -> ``FdmPacket`` in the SITL's conventions.

    specific_force: (3,) body FLU m/s^2, what an accelerometer measures (+9.81 on z at rest).
    """
    geo = nwu_to_geodetic(position, origin)
    v = np.asarray(velocity, dtype=np.float64)
    return FdmPacket(float(timestamp), flu_to_frd(angular_velocity), -np.asarray(specific_force, dtype=np.float64),
                     quat_flu_to_ned_frd(quaternion), np.array([-v[1], v[0], v[2]]), geo, pressure_at(geo[2]))


def betaflight_attitude_to_quat(roll_deg: float, pitch_deg: float, yaw_deg: float) -> np.ndarray:
    """MSP_ATTITUDE angles (Betaflight signs, deg) -> quaternion (4,) body FLU -> world NWU.

    Betaflight's roll and pitch have FLU's ZYX signs (right wing down +, nose down +); its yaw is a
    clockwise heading, FLU's yaw negated.
    """
    r, p, y = math.radians(roll_deg) / 2, math.radians(pitch_deg) / 2, -math.radians(yaw_deg) / 2
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return np.array([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy])


def betaflight_gyro_to_flu(gyro, lsb_per_dps: float = 16.4) -> np.ndarray:
    """MSP_RAW_IMU gyro (3,) -> body FLU rad/s. Betaflight 4.6 sends sensor counts (``gyroRateDps`` divides
    deg/s by the gyro scale: 16.4 per deg/s at the 2000 deg/s range, also in SITL), axes FLU (yaw CCW +)."""
    return np.radians(np.asarray(gyro, dtype=np.float64) / lsb_per_dps)


@dataclass
class RcMapping:
    """How robo commands become RC channels (Betaflight's default AETR map, angle mode).

    max_angle: rad at full roll/pitch stick (Betaflight ``angle_limit``, default 60 deg);
    max_yaw_rate: rad/s at full yaw stick (set the FC's yaw rates linear to match);
    arm_channel / angle_channel: 0-based indices of the AUX channels mapped to ARM / ANGLE.
    """

    max_angle: float = math.radians(60.0)
    max_yaw_rate: float = math.radians(400.0)
    arm_channel: int = 4
    angle_channel: int = 5


def attitude_to_rc(roll: float, pitch: float, yaw_rate: float, thrust: float, armed: bool,
                   mapping: RcMapping = RcMapping()) -> np.ndarray:
    """Angle-mode setpoint (FLU rad, rad, rad/s; thrust [0, 1]) -> RC channels (16,) uint16 us.

    Channel order AETR: roll (right +), pitch (forward / nose down +), throttle, yaw (clockwise +).
    """
    vals = np.array([roll, pitch, yaw_rate, thrust], dtype=np.float64)
    if not np.all(np.isfinite(vals)):
        raise ValueError(f"attitude setpoint contains NaN or inf: {vals.tolist()}")
    ch = np.full(RC_CHANNELS, 1000.0)
    ch[0] = 1500 + 500 * roll / mapping.max_angle
    ch[1] = 1500 + 500 * pitch / mapping.max_angle
    ch[2] = 1000 + 1000 * thrust
    ch[3] = 1500 - 500 * yaw_rate / mapping.max_yaw_rate
    ch[mapping.arm_channel] = 2000 if armed else 1000
    ch[mapping.angle_channel] = 2000
    return np.clip(np.round(ch), 1000, 2000).astype(np.uint16)
