"""Betaflight: SITL packet layouts vs the C headers, MSP bytes vs pymsp, drivers against loopback stand-ins."""

import ctypes
import math
import struct
import threading
import time

import numpy as np
import pytest
import torch
from pymsp import MSPv1, MSPv2

from hardware.drivers import betaflight_sitl as sitl
from hardware.drivers import msp
from hardware.drivers.base import AttitudeThrustCommand, MotorCommand, Robot, RobotError
from hardware.drivers.betaflight import BetaflightRobot, BetaflightSITLBridge
from sims.quadrotor import BatchedQuadrotorSim, ParamsBatch, hover_state, preset
from sims.vehicles.betaflight_sitl import BetaflightMSPServer, BetaflightSITLPeer
from sims.vehicles.sim_vehicle import euler_zyx_to_quat, quat_to_euler_zyx
from tests.hardware.polling import wait_for


# SITL packet layouts: ctypes mirrors of src/platform/SIMULATOR/target/SITL/target.h ---------------
class CFdm(ctypes.Structure):
    _fields_ = [("timestamp", ctypes.c_double), ("imu_angular_velocity_rpy", ctypes.c_double * 3),
                ("imu_linear_acceleration_xyz", ctypes.c_double * 3), ("imu_orientation_quat", ctypes.c_double * 4),
                ("velocity_xyz", ctypes.c_double * 3), ("position_xyz", ctypes.c_double * 3),
                ("pressure", ctypes.c_double)]


class CRc(ctypes.Structure):
    _fields_ = [("timestamp", ctypes.c_double), ("channels", ctypes.c_uint16 * 16)]


class CServo(ctypes.Structure):
    _fields_ = [("motor_speed", ctypes.c_float * 4)]


class CServoRaw(ctypes.Structure):
    _fields_ = [("motorCount", ctypes.c_uint16), ("pwm_output_raw", ctypes.c_float * 16)]


def test_sitl_struct_layouts_match_the_c_headers():
    assert (sitl.FDM.size, sitl.RC.size, sitl.SERVO.size, sitl.SERVO_RAW.size) == (144, 40, 16, 68)
    assert [ctypes.sizeof(c) for c in (CFdm, CRc, CServo, CServoRaw)] == [144, 40, 16, 68]
    pkt = sitl.FdmPacket(1.5, np.array([1, 2, 3.]), np.array([4, 5, 6.]), np.array([7, 8, 9, 10.]),
                         np.array([11, 12, 13.]), np.array([14, 15, 16.]), 101325.0)
    c = CFdm.from_buffer_copy(pkt.pack())  # field order and offsets as the C compiler lays them out
    assert c.timestamp == 1.5 and list(c.imu_angular_velocity_rpy) == [1, 2, 3]
    assert list(c.imu_linear_acceleration_xyz) == [4, 5, 6] and list(c.imu_orientation_quat) == [7, 8, 9, 10]
    assert list(c.velocity_xyz) == [11, 12, 13] and list(c.position_xyz) == [14, 15, 16] and c.pressure == 101325
    rc = CRc.from_buffer_copy(sitl.pack_rc(2.0, np.arange(1000, 1016)))
    assert rc.timestamp == 2.0 and list(rc.channels) == list(range(1000, 1016))
    bf = CServo((ctypes.c_float * 4)(0.1, 0.2, 0.3, 0.4))  # FR, RL, FL, RR (the 4.6 SITL's pwmCompleteMotorUpdate)
    np.testing.assert_allclose(sitl.unpack_servo(bytes(bf)), [0.1, 0.4, 0.2, 0.3], atol=1e-7)  # FR, BR, BL, FL
    raw = CServoRaw(4, (ctypes.c_float * 16)(*range(1100, 1116)))
    count, *pwm = sitl.SERVO_RAW.unpack(bytes(raw))
    assert count == 4 and pwm == list(range(1100, 1116))
    with pytest.raises(ValueError, match="expected 16"):
        sitl.unpack_servo(bytes(12))


def test_state_to_fdm_on_known_cases():
    level = sitl.state_to_fdm(0.0, [0, 0, 0], [1.0, 0, 0], [1, 0, 0, 0], [0.1, 0.2, 0.3], [0, 0, 9.81],
                              origin=(47.0, 8.0, 400.0))
    np.testing.assert_allclose(level.linear_acceleration_xyz, [0, 0, -9.81])  # minus the FLU specific force
    forward = sitl.state_to_fdm(0.0, [0, 0, 0], [0, 0, 0], [1, 0, 0, 0], [0, 0, 0], [2.0, 1.0, 9.81])
    np.testing.assert_allclose(forward.linear_acceleration_xyz, [-2.0, -1.0, -9.81])  # sitl.c negates all axes
    np.testing.assert_allclose(level.angular_velocity_rpy, [0.1, -0.2, -0.3])
    np.testing.assert_allclose(level.velocity_xyz, [0, 1.0, 0])  # 1 m/s north -> ENU (0, 1, 0)
    np.testing.assert_allclose(level.position_xyz, [8.0, 47.0, 400.0])
    assert level.pressure == pytest.approx(96611, rel=1e-3)  # ISA at 400 m
    west = sitl.state_to_fdm(0.0, [111.32, 100.0, 0], [0, 0, 0], euler_zyx_to_quat(0, 0, math.pi / 2), [0, 0, 0],
                             [0, 0, 9.81], origin=(0.0, 0.0, 0.0))
    heading = quat_to_euler_zyx(west.orientation_quat)[2]  # NED yaw = heading
    assert heading == pytest.approx(-math.pi / 2)  # facing west
    assert west.position_xyz[1] == pytest.approx(0.001, rel=1e-3)  # 111 m north = 0.001 deg latitude
    assert west.position_xyz[0] == pytest.approx(-100 / 111319.49, rel=1e-3)  # 100 m west


def test_betaflight_attitude_and_gyro_to_flu():
    np.testing.assert_allclose(sitl.betaflight_attitude_to_quat(30, 0, 0), euler_zyx_to_quat(math.radians(30), 0, 0))
    q = sitl.betaflight_attitude_to_quat(0, 20, 0)  # Betaflight pitch +: nose down
    nose = quat_rotate(q, [1, 0, 0])
    assert nose[2] < -0.3  # nose points down in the FLU world
    q = sitl.betaflight_attitude_to_quat(0, 0, 90)  # heading 90: east, which is -y in NWU
    np.testing.assert_allclose(quat_rotate(q, [1, 0, 0]), [0, -1, 0], atol=1e-9)
    np.testing.assert_allclose(sitl.betaflight_gyro_to_flu([180 * 16.4, -90 * 16.4, 57.29577951308232 * 16.4]),
                               [math.pi, -math.pi / 2, 1])


def quat_rotate(q, v):
    from sims.quadrotor.rotations import quat_rotate as qr
    return qr(torch.as_tensor(q, dtype=torch.float64)[None], torch.as_tensor(v, dtype=torch.float64)[None])[0].numpy()


def test_attitude_to_rc_sticks():
    ch = sitl.attitude_to_rc(math.radians(30), math.radians(-15), math.radians(200), 0.25, armed=True)
    assert ch.dtype == np.uint16 and ch.shape == (16,)
    assert list(ch[:6]) == [1750, 1375, 1250, 1250, 2000, 2000]  # AETR, AUX1 arm, AUX2 angle
    assert list(sitl.attitude_to_rc(9.0, 0, 0, 2.0, armed=False)[[0, 2, 4]]) == [2000, 2000, 1000]  # clipped
    with pytest.raises(ValueError, match="NaN"):
        sitl.attitude_to_rc(float("nan"), 0, 0, 0, armed=False)


# MSP framing vs pymsp -----------------------------------------------------------------------------
def test_msp_frames_decode_in_pymsp():
    payload = msp.pack_channels([1500, 1600, 1000, 1500, 2000])
    f1 = MSPv1().unpack(msp.encode(msp.MSP_SET_RAW_RC, payload, version=1))  # verifies the XOR checksum
    assert (f1.message_id, f1.payload, f1.protocol_version) == (200, payload, 1)
    assert struct.unpack("<5H", f1.payload) == (1500, 1600, 1000, 1500, 2000)
    f2 = MSPv2().unpack(msp.encode(msp.MSP_SET_MOTOR, payload, version=2))  # verifies CRC-8/DVB-S2
    assert (f2.message_id, f2.payload, f2.protocol_version) == (214, payload, 2)
    assert msp.crc8_dvb_s2(b"123456789") == 0xBC  # the CRC's published check value
    assert msp.encode(msp.MSP_ATTITUDE) == MSPv1().pack(108)


def test_msp_parser_rejects_corrupt_frames_and_joins_split_ones():
    good = MSPv1().pack(108, struct.pack("<hhh", 100, -50, 270)).replace(b"$M<", b"$M>")
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    v2 = MSPv2().pack(102, bytes(18)).replace(b"$X<", b"$X>")
    parser = msp.MspParser()
    frames = parser.feed(b"noise" + bytes(bad) + good[:4])
    assert frames == [] and parser.rejected["bad_checksum"] == 1 and parser.rejected["garbage"] >= 1
    frames = parser.feed(good[4:] + v2)
    assert [(f.command, f.version, f.direction) for f in frames] == [(108, 1, "reply"), (102, 2, "reply")]
    assert msp.unpack_attitude(frames[0].payload) == (10.0, -5.0, 270.0)
    with pytest.raises(ValueError, match="at least 18"):
        msp.unpack_raw_imu(bytes(10))


# BetaflightRobot against the MSP stand-in ---------------------------------------------------------
@pytest.fixture(params=[1, 2], ids=["mspv1", "mspv2"])
def fc(request):
    server = BetaflightMSPServer(acc_1g=512.0).start()
    robot = BetaflightRobot(server.address, link_timeout=0.3, msp_version=request.param)
    robot.connect(timeout=3.0)
    yield server, robot
    robot.close()
    server.close()


def test_state_round_trip(fc):
    server, robot = fc
    assert isinstance(robot, Robot)
    q = euler_zyx_to_quat(0.3, -0.2, 1.0)
    server.vehicle.set_state(quaternion=q, angular_velocity=[0.5, -1.0, 2.0])
    assert wait_for(lambda: robot.read_state().extra["attitude_deg"][0] != 0.0
                    and robot.read_state().angular_velocity[0] != 0.0)
    s = robot.read_state()
    np.testing.assert_allclose(quat_to_euler_zyx(s.quaternion), [0.3, -0.2, 1.0], atol=math.radians(1.0))
    np.testing.assert_allclose(s.angular_velocity, [0.5, -1.0, 2.0], atol=math.radians(1.0))  # int deg/s
    np.testing.assert_allclose(s.extra["acc_g"], [0, 0, 1])
    assert np.isnan(s.position).all() and not s.armed
    assert {f.protocol_version for f in server.requests} == {robot.msp_version}


def test_rc_bytes_decode_in_pymsp_and_hover(fc):
    server, robot = fc
    robot.arm()
    assert server.vehicle.armed and robot.read_state().armed
    p = server.vehicle.params
    hover = p.mass * np.linalg.norm(p.gravity) / p.max_thrust
    q = euler_zyx_to_quat(math.radians(6), 0.0, 0.0)
    for _ in range(30):
        robot.send(AttitudeThrustCommand(q, hover))
        time.sleep(0.01)
    rc = [f for f in server.requests if f.message_id == msp.MSP_SET_RAW_RC][-1]  # decoded by pymsp
    ch = struct.unpack("<16H", rc.payload)
    assert ch[:6] == (1550, 1500, 1000 + round(1000 * hover), 1500, 2000, 2000)
    assert wait_for(lambda: robot.read_state().extra["attitude_deg"][0] > 3.0)
    assert abs(server.vehicle.snapshot().position[2] - 1.0) < 0.1
    robot.close()
    assert not server.vehicle.armed


def test_motor_commands_other_than_off_are_refused(fc):
    server, robot = fc  # Betaflight would keep them as its disarmed outputs and spin the motors after a disarm
    with pytest.raises(RobotError, match="only motors off"):
        robot.send(MotorCommand(np.array([0.1, 0.2, 0.3, 0.4])))
    robot.send(MotorCommand(np.zeros(4)))  # the safety layer's safe command: MSP_SET_MOTOR 1000 us
    assert wait_for(lambda: any(f.message_id == msp.MSP_SET_MOTOR for f in server.requests))
    sent = [f for f in server.requests if f.message_id == msp.MSP_SET_MOTOR]
    assert len(sent) == 1 and struct.unpack("<8H", sent[0].payload) == (1000,) * 8


def test_corrupt_and_unexpected_replies_are_rejected_without_crashing(fc):
    server, robot = fc
    bad = bytearray(MSPv1().pack(108, struct.pack("<hhh", 900, 0, 0)).replace(b"$M<", b"$M>"))
    bad[-1] ^= 0x55
    short = MSPv1().pack(108, b"\x01").replace(b"$M<", b"$M>")  # truncated payload, valid checksum
    error = MSPv1().pack(102).replace(b"$M<", b"$M!")
    server.inject += [bytes(bad), short, error]
    assert wait_for(lambda: sum(robot.read_state().extra["rejected"].values()) >= 3)
    r = robot.read_state().extra["rejected"]
    assert r["bad_checksum"] == 1 and r["error_reply"] == 1 and r["short_payload"] + r["unexpected"] >= 1
    assert robot.read_state().extra["attitude_deg"][0] == 0.0  # the corrupt 90 deg roll never landed


def test_link_loss_raises(fc):
    server, robot = fc
    server.silent = True
    time.sleep(0.5)
    with pytest.raises(RobotError, match="link lost"):
        robot.read_state()


def test_request_timeouts_run_on_the_drivers_clock():
    """A lockstep SITL's sim time stands still while the host stalls it: an unanswered request times out after
    ``timeout`` s of that clock, not of host time."""
    server = BetaflightMSPServer(acc_1g=512.0).start()
    sim = {"t": 0.0}
    robot = BetaflightRobot(server.address, clock=lambda: sim["t"])
    try:
        robot.connect(timeout=3.0)
        assert robot.read_state().vehicle_time == 0.0
        server.silent = True
        outcome: list = []
        waiter = threading.Thread(target=lambda: outcome.append(
            pytest.raises(RobotError, robot.request, msp.MSP_STATUS_EX, timeout=0.1, attempts=1)))
        waiter.start()
        time.sleep(0.4)  # four timeouts of host time, none of sim time
        assert waiter.is_alive() and not outcome
        sim["t"] = 0.2
        waiter.join(timeout=2.0)
        assert not waiter.is_alive() and "within 0.1 s, 1 times" in str(outcome[0].value)
    finally:
        robot.close()
        server.close()


def test_connect_refused_is_a_clear_error():
    with pytest.raises(RobotError, match="could not open the MSP link"):
        BetaflightRobot("tcp://127.0.0.1:9").connect(timeout=0.5)


# the SITL bridge against the firmware stand-in ----------------------------------------------------
def test_sitl_bridge_closed_loop_hover_and_rejections():
    peer = BetaflightSITLPeer()
    bridge = BetaflightSITLBridge(state_port=peer.state_port, rc_port=peer.rc_port, motor_port=0)
    peer.start(("127.0.0.1", bridge.motor_port))
    try:
        params = preset("racer5")
        batch = ParamsBatch.from_params(params, dtype=torch.float64)
        sim = BatchedQuadrotorSim(batch)
        sim.reset(hover_state(batch, torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)))
        hover = params.mass * 9.81 / params.max_thrust
        level = np.array([1.0, 0, 0, 0])
        bridge.send_command(0.0, AttitudeThrustCommand(level, 0.0), armed=True)  # arm with throttle low
        assert wait_for(lambda: peer.armed)
        # RC and state arrive on separate sockets; let the firmware see hover throttle before the first state
        bridge.send_command(params.dt / 2, AttitudeThrustCommand(level, hover), armed=True)
        assert wait_for(lambda: peer.channels[2] > 1050)
        for k in range(200):  # 2 s lockstep: state -> firmware -> motors -> physics
            t = (k + 1) * params.dt
            bridge.send_command(t, AttitudeThrustCommand(level, hover), armed=True)
            s = sim.state[0].numpy()
            bridge.send_state(t, s[0:3], s[7:10], s[3:7], s[10:13], [0, 0, 9.81])
            motors = bridge.receive_motors(timeout=0.5)
            assert motors is not None, f"no servo_packet at step {k}"
            sim.step(torch.as_tensor(2 * motors - 1)[None])
        s = sim.state[0].numpy()
        assert abs(s[2] - 1.0) < 0.15 and np.linalg.norm(s[7:10]) < 0.3
        assert peer.fdm_received[-1][0] == pytest.approx(2.0)
        # malformed and old packets at the firmware side; malformed motor packets at the bridge
        bridge._out.sendto(bytes(100), ("127.0.0.1", peer.state_port))
        bridge.send_state(0.5, s[0:3], s[7:10], s[3:7], s[10:13], [0, 0, 9.81])  # older than 2.0 s
        bridge._out.sendto(bytes(12), ("127.0.0.1", bridge.motor_port))
        bridge._out.sendto(struct.pack("<4f", 0.5, float("nan"), 0.5, 0.5), ("127.0.0.1", bridge.motor_port))
        assert bridge.receive_motors(timeout=0.3) is None
        assert wait_for(lambda: peer.rejected == {"wrong_size": 1, "old_timestamp": 1})
        assert dict(bridge.rejected) == {"wrong_size": 1, "non_finite": 1}
        time.sleep(0.3)
        with pytest.raises(RobotError, match="no servo_packet"):
            bridge.check_link(timeout=0.2)
    finally:
        peer.close()
        bridge.close()
