"""The loopback stand-ins' own behaviour: the sim vehicle, its angle-mode controller, raw-protocol peers."""

import math
import socket
import struct
import time

import numpy as np
import pytest
from pymsp import MSPStreamProcessor, MSPv1

from sims.vehicles.betaflight_sitl import BetaflightMSPServer, sticks_to_setpoint
from sims.vehicles.crazyflie_link import CrazyflieLinkPeer
from sims.vehicles.sim_vehicle import SimVehicle, euler_zyx_to_quat, quat_to_euler_zyx


def test_euler_quaternion_round_trip():
    rng = np.random.default_rng(0)
    for roll, pitch, yaw in rng.uniform([-3, -1.5, -3], [3, 1.5, 3], size=(20, 3)):
        np.testing.assert_allclose(quat_to_euler_zyx(euler_zyx_to_quat(roll, pitch, yaw)), [roll, pitch, yaw],
                                   atol=1e-9)


def test_disarmed_vehicle_holds_its_pose():
    v = SimVehicle(position=(1.0, 2.0, 3.0))
    for _ in range(50):
        v.step()
    np.testing.assert_array_equal(v.snapshot().position, [1.0, 2.0, 3.0])


def test_angle_mode_tracks_a_tilt_and_hovers():
    v = SimVehicle()
    v.armed = True
    hover = v.params.mass * 9.81 / v.params.max_thrust
    for _ in range(150):
        v.set_attitude(0.2, -0.1, 0.0, hover)
        v.step()
    roll, pitch, _ = quat_to_euler_zyx(v.snapshot().quaternion)
    assert roll == pytest.approx(0.2, abs=0.03) and pitch == pytest.approx(-0.1, abs=0.03)
    untilted = SimVehicle()
    untilted.armed = True
    for _ in range(150):
        untilted.set_attitude(0.0, 0.0, 0.0, hover)
        untilted.step()
    s = untilted.snapshot()
    assert abs(s.position[2] - 1.0) < 0.02 and s.specific_force[2] == pytest.approx(9.81, abs=0.1)
    with pytest.raises(ValueError, match="finite"):
        v.set_motors([0.5, np.nan, 0.5, 0.5])


def test_sticks_to_setpoint_signs():
    roll, pitch, yaw_rate, thrust = sticks_to_setpoint([2000, 1250, 1500, 2000])
    assert roll == pytest.approx(math.radians(60)) and pitch == pytest.approx(-math.radians(30))
    assert yaw_rate == pytest.approx(-math.radians(400)) and thrust == pytest.approx(0.5)  # yaw right: clockwise


def test_crazyflie_peer_counts_malformed_datagrams():
    with CrazyflieLinkPeer() as peer:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        port = int(peer.uri.rsplit(":", 1)[1])
        s.sendto(bytes([0x3C]) + b"\0" * 40, ("127.0.0.1", port))  # longer than a CRTP packet
        s.sendto(bytes([0x3C]) + b"\0" * 5, ("127.0.0.1", port))  # commander packet of the wrong size
        s.sendto(bytes([0x3C]) + struct.pack("<fffH", 0, 0, 0, 0), ("127.0.0.1", port))  # a valid one
        deadline = time.monotonic() + 1.0
        while (peer.rejected < 2 or len(peer.received) < 2) and time.monotonic() < deadline:  # all three handled
            time.sleep(0.01)
        assert peer.rejected == 2 and len(peer.received) == 2
        s.close()


def test_msp_server_answers_in_betaflight_units():
    vehicle = SimVehicle()
    vehicle.set_state(quaternion=euler_zyx_to_quat(math.radians(10), math.radians(-4), math.radians(30)))
    with BetaflightMSPServer(vehicle) as server:
        host, port = server.address[len("tcp://"):].split(":")
        with socket.create_connection((host, int(port)), timeout=1.0) as conn:
            conn.sendall(MSPv1().pack(108))
            stream, frames, deadline = MSPStreamProcessor(), [], time.monotonic() + 1.0
            while not frames and time.monotonic() < deadline:
                frames = list(stream.push_bytes(conn.recv(256)))
    assert frames[0].header == b"$M>" and frames[0].message_id == 108
    assert struct.unpack("<hhh", frames[0].payload) == (100, -40, 330)  # decideg, decideg, clockwise heading deg
