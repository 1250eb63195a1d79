"""Crazyflie driver against the UDP CRTP stand-in: the real cflib connect handshake on loopback."""

import math
import struct
import time

import numpy as np
import pytest
from cflib.crtp.crtpstack import CRTPPort

from hardware.drivers.base import AttitudeThrustCommand, MotorCommand, Robot, RobotError
from hardware.drivers.crazyflie import CrazyflieRobot, command_to_setpoint, log_to_state, timestamp_is_newer
from sims.vehicles.crazyflie_link import CrazyflieLinkPeer
from sims.vehicles.sim_vehicle import euler_zyx_to_quat
from tests.hardware.polling import wait_for


@pytest.fixture
def link():
    peer = CrazyflieLinkPeer().start()
    robot = CrazyflieRobot(peer.uri, link_timeout=0.3)
    robot.connect(timeout=5.0)
    yield peer, robot
    robot.close()
    peer.close()


def last_packet(peer, port):
    """The newest packet the peer decoded on ``port`` (cflib ``CRTPPacket``), or None."""
    return next((pk for pk in reversed(list(peer.received)) if pk.port == port), None)


def test_state_round_trip_in_si_flu(link):
    peer, robot = link
    assert isinstance(robot, Robot)
    q = euler_zyx_to_quat(0.3, -0.2, 1.0)
    peer.vehicle.set_state(position=[1.0, -2.0, 0.5], quaternion=q, angular_velocity=[0.5, -1.0, 2.0])
    # position, attitude and rates come in separate log blocks, each in its own packet: wait for all of them
    assert wait_for(lambda: np.allclose(robot.read_state().angular_velocity, [0.5, -1.0, 2.0], atol=1e-5)
                    and np.allclose(robot.read_state().position, [1.0, -2.0, 0.5], atol=1e-6)
                    and np.allclose(robot.read_state().quaternion, q, atol=1e-6))
    s = robot.read_state()
    np.testing.assert_allclose(s.position, [1.0, -2.0, 0.5], atol=1e-6)
    np.testing.assert_allclose(s.quaternion, q, atol=1e-6)  # qx..qw reordered to w, x, y, z
    assert s.extra["rejected"] == {"malformed": 0, "out_of_order": 0, "unknown_block": 0}


def test_setpoint_bytes_decode_as_firmware_legacy_values(link):
    peer, robot = link
    robot.arm()
    q = euler_zyx_to_quat(math.radians(10), math.radians(-5), 0.0)
    robot.send(AttitudeThrustCommand(q, 0.5, body_rates=np.array([0.0, 0.0, 0.5])))
    assert wait_for(lambda: (pk := last_packet(peer, CRTPPort.COMMANDER)) is not None and pk.data[12:] != b"\0\0")
    pk = last_packet(peer, CRTPPort.COMMANDER)  # decoded by cflib's CRTPPacket
    assert pk.channel == 0 and len(pk.data) == 14
    roll, pitch, yaw, thrust = struct.unpack("<fffH", pk.data)  # struct CommanderCrtpLegacyValues
    assert roll == pytest.approx(10.0, abs=1e-4)
    assert pitch == pytest.approx(5.0, abs=1e-4)  # legacy sign: nose up +, our command is nose up 5 deg
    assert yaw == pytest.approx(-math.degrees(0.5), abs=1e-4)  # clockwise +: FLU +0.5 rad/s is CCW
    assert thrust == 32768


def test_arm_hover_and_close_stop_the_motors(link):
    peer, robot = link
    robot.arm()
    assert peer.vehicle.armed and robot.read_state().armed
    p = peer.vehicle.params
    hover = p.mass * np.linalg.norm(p.gravity) / p.max_thrust
    z0 = robot.read_state().position[2]
    for _ in range(50):
        robot.send(AttitudeThrustCommand(np.array([1.0, 0, 0, 0]), hover))
        time.sleep(0.01)
    s = robot.read_state()
    assert abs(s.position[2] - z0) < 0.05 and np.linalg.norm(s.velocity) < 0.1
    robot.send(AttitudeThrustCommand(np.array([1.0, 0, 0, 0]), 0.0))
    robot.close()
    assert wait_for(lambda: not peer.vehicle.armed)
    assert wait_for(lambda: last_packet(peer, CRTPPort.COMMANDER_GENERIC) is not None)
    assert last_packet(peer, CRTPPort.COMMANDER_GENERIC).data[0] == 0  # stop setpoint


def test_motor_command_writes_motor_power_params(link):
    peer, robot = link
    robot.send(MotorCommand(np.array([0.1, 0.2, 0.3, 0.4])))
    assert wait_for(lambda: peer._params["motorPowerSet.enable"] == 1)
    assert [peer._params[f"motorPowerSet.m{i}"] for i in range(1, 5)] == [6554, 13107, 19660, 26214]
    np.testing.assert_allclose(peer.vehicle._motors, [0.1, 0.2, 0.3, 0.4], atol=1e-4)


def test_malformed_and_out_of_order_log_packets_are_rejected(link):
    peer, robot = link
    block = next(iter(robot._blocks))
    stamp = robot._stamps[block]
    header = bytes([0x5C | 2])  # port 5 (log), channel 2 (data)
    peer.send_raw(header + bytes([block]) + ((stamp + 5000) % (1 << 24)).to_bytes(3, "little") + b"\0" * 5)  # truncated
    peer.send_raw(header + bytes([block]) + ((stamp - 100) % (1 << 24)).to_bytes(3, "little") + b"\0" * 24)  # old
    peer.send_raw(header + bytes([200]) + (stamp + 1).to_bytes(3, "little") + b"\0" * 24)  # unknown block
    assert wait_for(lambda: sum(robot.rejected.values()) >= 3)
    assert robot.rejected == {"malformed": 1, "out_of_order": 1, "unknown_block": 1}
    np.testing.assert_allclose(robot.read_state().position, [0.0, 0.0, 1.0], atol=1e-6)  # not corrupted


def test_link_loss_raises_robot_error(link):
    peer, robot = link
    peer.silent = True
    time.sleep(0.5)
    with pytest.raises(RobotError, match="link lost"):
        robot.read_state()
    with pytest.raises(RobotError, match="link lost"):
        robot.send(AttitudeThrustCommand(np.array([1.0, 0, 0, 0]), 0.1))


def test_connect_without_a_peer_fails_clearly():
    robot = CrazyflieRobot("udp://127.0.0.1:9", link_timeout=0.3)
    with pytest.raises(RobotError, match="could not connect"):
        robot.connect(timeout=0.5)


def test_conversions_on_known_cases():
    s = log_to_state({"stateEstimate.qx": 0.0, "stateEstimate.qy": 0.0, "stateEstimate.qz": 1.0,
                      "stateEstimate.qw": 0.0, "gyro.x": 180.0, "gyro.y": -90.0, "gyro.z": 57.29577951308232},
                     timestamp=1.0)
    np.testing.assert_allclose(s.quaternion, [0.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(s.angular_velocity, [math.pi, -math.pi / 2, 1.0])
    assert np.isnan(s.position).all()
    roll, pitch, yaw_rate, thrust = command_to_setpoint(
        AttitudeThrustCommand(euler_zyx_to_quat(0.0, math.radians(20), 0.7), 1.5))
    assert (roll, thrust) == (pytest.approx(0.0, abs=1e-9), 65535) and pitch == pytest.approx(20.0)
    assert yaw_rate == 0.0  # absolute yaw is dropped; yaw rate comes from body_rates
    with pytest.raises(ValueError, match="NaN"):
        command_to_setpoint(AttitudeThrustCommand(np.array([np.nan, 0, 0, 0]), 0.5))
    assert timestamp_is_newer(3, (1 << 24) - 2) and not timestamp_is_newer(5, 5)
    assert not timestamp_is_newer(4, 10) and timestamp_is_newer(10, None)
