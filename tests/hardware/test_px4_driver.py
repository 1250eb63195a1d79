"""PX4Robot against the simulated PX4 vehicle on loopback; pymavlink decodes robo's bytes on the peer."""

import time
from functools import partial

import numpy as np
import pytest
from pymavlink.dialects.v20 import common as mavlink

from hardware.drivers import frames
from hardware.drivers.base import AttitudeThrustCommand, MotorCommand, RobotError
from hardware.drivers.px4 import PX4_MAIN_MODE_OFFBOARD, PX4Robot
from sims.vehicles import MavlinkVehicle
from tests.hardware import polling

wait_for = partial(polling.wait_for, timeout=2.0)  # the PX4 tests wait up to 2 s


def test_telemetry_arrives_in_flu(vehicle, px4):
    q_flu = frames.euler_to_quat(0.2, -0.3, 1.0)
    vehicle.set_state(position=[0.5, -0.3, 1.2], quaternion=q_flu, velocity=[0.1, 0.2, -0.3],
                      angular_velocity=[0.4, -0.5, 0.6])
    t_set = time.monotonic()
    # each field comes in a message of its own: wait until all of them have arrived since the change
    assert wait_for(lambda: px4.read_state().timestamp > t_set + 0.03
                    and np.allclose(px4.read_state().position, [0.5, -0.3, 1.2], atol=1e-6)
                    and np.allclose(px4.read_state().velocity, [0.1, 0.2, -0.3], atol=1e-6)
                    and np.allclose(px4.read_state().quaternion, q_flu, atol=1e-6)
                    and np.allclose(px4.read_state().angular_velocity, [0.4, -0.5, 0.6], atol=1e-6))
    s = px4.read_state()
    np.testing.assert_allclose(s.position, [0.5, -0.3, 1.2], atol=1e-6)
    np.testing.assert_allclose(s.velocity, [0.1, 0.2, -0.3], atol=1e-6)
    np.testing.assert_allclose(s.quaternion, q_flu, atol=1e-6)
    np.testing.assert_allclose(s.angular_velocity, [0.4, -0.5, 0.6], atol=1e-6)
    assert not s.armed and s.extra["main_mode"] != PX4_MAIN_MODE_OFFBOARD
    # on the wire it was NED/FRD: the raw LOCAL_POSITION_NED has z = -1.2 (1.2 m up)
    raw = vehicle.telemetry_messages()[0]
    assert raw.get_type() == "LOCAL_POSITION_NED" and raw.z == pytest.approx(-1.2) and raw.y == pytest.approx(0.3)


def test_gcs_heartbeat_at_least_1hz(vehicle, px4):
    time.sleep(1.2)
    times = [t for t, m in zip(vehicle.received_at, vehicle.received) if m.get_type() == "HEARTBEAT"]
    hb = vehicle.messages("HEARTBEAT")
    assert len(times) >= 2 and np.diff(times).max() < 1.0
    assert hb[-1].type == mavlink.MAV_TYPE_GCS and hb[-1].get_srcSystem() == 255


def test_no_vehicle_raises_naming_the_address(free_port):
    port = free_port
    robot = PX4Robot(connection=f"udpout:127.0.0.1:{port}")
    with pytest.raises(RobotError, match=f"127.0.0.1:{port}"):
        robot.connect(timeout=0.3)


def test_offboard_then_arm_with_ack(vehicle, px4):
    px4.arm()
    assert vehicle.armed and vehicle.mode == PX4_MAIN_MODE_OFFBOARD
    assert wait_for(lambda: px4.armed and px4.main_mode == PX4_MAIN_MODE_OFFBOARD)
    kinds = [m.get_type() for m in vehicle.received]
    i_mode = next(i for i, m in enumerate(vehicle.received)
                  if m.get_type() == "COMMAND_LONG" and m.command == mavlink.MAV_CMD_DO_SET_MODE)
    mode_cmd = vehicle.received[i_mode]
    assert mode_cmd.param1 == mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED and mode_cmd.param2 == 6
    assert kinds[:i_mode].count("SET_ACTUATOR_CONTROL_TARGET") >= 5  # setpoints streamed before the switch
    arm = [m for m in vehicle.messages("COMMAND_LONG") if m.command == mavlink.MAV_CMD_COMPONENT_ARM_DISARM]
    assert arm[-1].param1 == 1 and arm[-1].target_system == 1
    px4.disarm()
    assert not vehicle.armed


def test_refused_arming_raises(vehicle):
    with MavlinkVehicle(refuse_arming=True) as v, PX4Robot(connection=f"udpout:{v.address}") as robot:
        robot.connect(3.0)
        with pytest.raises(RobotError, match="DENIED"):
            robot.arm()


def test_offboard_refused_without_setpoint_stream(vehicle):
    with PX4Robot(connection=f"udpout:{vehicle.address}", offboard_stream_s=0.0) as robot:
        robot.connect(3.0)
        with pytest.raises(RobotError, match="TEMPORARILY_REJECTED"):
            robot.set_offboard()


def test_motor_setpoints_decoded_in_px4_order(vehicle, px4):
    px4.send(MotorCommand(np.array([0.1, 0.2, 0.3, 0.4])))  # robo FR, BR, BL, FL
    assert wait_for(lambda: len(vehicle.messages("SET_ACTUATOR_CONTROL_TARGET")) > 0)
    m = vehicle.messages("SET_ACTUATOR_CONTROL_TARGET")[-1]
    np.testing.assert_allclose(m.controls[:4], [0.1, 0.3, 0.4, 0.2], atol=1e-7)  # PX4: FR, BL, FL, BR
    assert m.target_system == 1 and m.target_component == 1 and m.group_mlx == 0
    np.testing.assert_allclose(vehicle.motors, [0.1, 0.2, 0.3, 0.4], atol=1e-7)


def test_attitude_setpoints_decoded_in_ned_frd(vehicle, px4):
    q_flu = frames.euler_to_quat(0.1, 0.2, -0.7)
    px4.send(AttitudeThrustCommand(q_flu, 0.6, body_rates=np.array([0.1, 0.2, 0.3])))
    px4.send(AttitudeThrustCommand(q_flu, 0.5))
    assert wait_for(lambda: len(vehicle.messages("SET_ATTITUDE_TARGET")) == 2)
    with_rates, attitude_only = vehicle.messages("SET_ATTITUDE_TARGET")
    w, x, y, z = q_flu
    np.testing.assert_allclose(with_rates.q, [w, x, -y, -z], atol=1e-7)  # pi about x
    np.testing.assert_allclose([with_rates.body_roll_rate, with_rates.body_pitch_rate, with_rates.body_yaw_rate],
                               [0.1, -0.2, -0.3], atol=1e-7)
    assert with_rates.type_mask == 0 and with_rates.thrust == pytest.approx(0.6)
    assert attitude_only.type_mask & 0b111 == 0b111 and attitude_only.thrust == pytest.approx(0.5)


@pytest.mark.parametrize("bad", [MotorCommand(np.array([0.1, np.nan, 0.2, 0.3])), MotorCommand(np.ones(3)),
                                 AttitudeThrustCommand(np.array([2.0, 0, 0, 0]), 0.5)])
def test_bad_commands_raise_before_the_wire(px4, bad):
    with pytest.raises(ValueError):
        px4.send(bad)


def test_malformed_and_stale_packets_are_rejected_and_counted(vehicle, px4):
    rng = np.random.default_rng(0)
    assert wait_for(lambda: px4.read_state().extra["position_time_boot_ms"] > 100)
    newest = px4.read_state().extra["position_time_boot_ms"]
    good = b"".join(m.pack(vehicle._mav) for m in vehicle.telemetry_messages())
    corrupt = bytearray(good)
    corrupt[20] ^= 0xFF  # payload byte of the first frame: CRC no longer matches
    vehicle.send_raw(bytes(corrupt))
    vehicle.send_raw(good[:15])  # truncated frame
    vehicle.send_raw(b"\xfd\xff garbage bytes \x00\x01\x02")
    for _ in range(200):  # fuzz: random datagrams
        vehicle.send_raw(rng.integers(0, 256, rng.integers(1, 300), dtype=np.uint8).tobytes())
    # an old packet (time_boot_ms older than the newest) claiming the vehicle is 99 m away
    stale = vehicle._mav.local_position_ned_encode(max(newest - 50, 0), 99.0, 99.0, -99.0, 0, 0, 0)
    vehicle.send_raw(stale.pack(vehicle._mav))
    assert wait_for(lambda: px4.stats["stale"] >= 1 and px4.stats["malformed"] >= 200)
    t = time.monotonic()
    assert wait_for(lambda: px4.read_state().timestamp > t)  # still alive and tracking
    np.testing.assert_allclose(px4.read_state().position, vehicle.true_state()["position"], atol=1e-6)
    assert all(th.is_alive() for th in px4._threads)
    print("rejection counts:", px4.stats)


def test_udpin_listens_where_the_vehicle_sends(free_port):
    port = free_port
    with MavlinkVehicle(remote=("127.0.0.1", port)) as v, PX4Robot(connection=f"udpin:127.0.0.1:{port}") as robot:
        robot.connect(3.0)
        assert robot.local_port == port
        robot.arm()
        assert v.armed


def test_euler_attitude_telemetry_converted_to_flu():
    with MavlinkVehicle(euler_attitude=True) as v, PX4Robot(connection=f"udpout:{v.address}") as robot:
        q_flu = frames.euler_to_quat(0.3, 0.2, -2.0)
        v.set_state(quaternion=q_flu, angular_velocity=[0.1, 0.2, 0.3])
        t = time.monotonic()
        robot.connect(3.0)
        assert wait_for(lambda: robot.read_state().timestamp > t + 0.03)
        s = robot.read_state()
        np.testing.assert_allclose(frames.quat_to_rotmat(s.quaternion), frames.quat_to_rotmat(q_flu), atol=1e-6)
        np.testing.assert_allclose(s.angular_velocity, [0.1, 0.2, 0.3], atol=1e-6)


def test_rebooted_vehicle_is_followed_not_rejected(vehicle, px4):
    with vehicle._lock:
        vehicle.time_ms = 60_000  # one minute after boot
    assert wait_for(lambda: px4.read_state().extra["position_time_boot_ms"] >= 60_000)
    with vehicle._lock:
        vehicle.time_ms = 0  # reboot: the clock starts again
    assert wait_for(lambda: px4.read_state().extra["position_time_boot_ms"] < 10_000)
    assert px4.stats["reboots"] == 1


def test_px4_robot_and_safety_layer_are_robots(px4):
    from hardware.drivers.base import Robot
    from hardware.safety import SafetyLayer

    assert isinstance(px4, Robot) and isinstance(SafetyLayer(px4), Robot)


@pytest.mark.parametrize("euler_deg, accel_axis, sign", [
    ((0.0, 10.0, 0.0), 0, +1),  # +pitch about FLU y (left) tips the nose down: flies forward (+x)
    ((10.0, 0.0, 0.0), 1, -1),  # +roll about FLU x dips the right side: flies right (-y)
    ((0.0, 0.0, 0.0), None, 0),  # level at the hover thrust: stays put
])
def test_attitude_mode_flies_where_the_setpoint_points(euler_deg, accel_axis, sign):
    """Attitude/thrust control end to end through the vehicle's PX4-style attitude controller (x500)."""
    from sims.envs import make_robot

    q_sp = frames.euler_to_quat(*np.radians(euler_deg))
    with MavlinkVehicle(robot="x500") as v, PX4Robot(connection=f"udpout:{v.address}", control="attitude") as robot:
        robot.connect(3.0)
        robot.arm()
        last = robot.read_state().timestamp
        for _ in range(100):  # 1 s, lockstep
            robot.send(AttitudeThrustCommand(q_sp, make_robot("x500").hover_command))
            assert wait_for(lambda: robot.read_state().timestamp > last)
            last = robot.read_state().timestamp
        s, steps = robot.read_state(), v.steps
    np.testing.assert_allclose(frames.quat_to_rotmat(s.quaternion), frames.quat_to_rotmat(q_sp), atol=0.01)
    assert abs(s.position[2] - 1.0) < 0.1 and steps == 100
    if accel_axis is None:
        assert np.linalg.norm(s.velocity) < 0.01
    else:
        assert sign * s.velocity[accel_axis] > 1.0 and abs(s.velocity[1 - accel_axis]) < 0.05


def test_reconnect_after_close_starts_afresh(vehicle):
    robot = PX4Robot(connection=f"udpout:{vehicle.address}")
    robot.connect(3.0)
    robot.close()
    with pytest.raises(RobotError, match="not connected"):
        robot.send(MotorCommand(np.zeros(4)))
    vehicle.close()  # the vehicle is gone: a reconnect must fail, not reuse the old connection's state
    with pytest.raises(RobotError, match="no HEARTBEAT"):
        robot.connect(timeout=0.3)


# MAVLink 2 signing ---------------------------------------------------------------------------------------------------
KEY, OTHER_KEY = bytes(range(1, 33)), bytes(range(101, 133))


@pytest.fixture(autouse=True)
def no_key_in_environment(monkeypatch):
    monkeypatch.delenv("ROBO_MAVLINK_KEY", raising=False)


def _attacker_send(port, *frames):
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for f in frames:
            s.sendto(f, ("127.0.0.1", port))


def _spoofed_position(key=None, timestamp=None):
    """A LOCAL_POSITION_NED from system 1 claiming the vehicle is 99 m away: unsigned, or signed with ``key``."""
    from hardware.drivers import mavlink_signing

    mav = mavlink.MAVLink(None, 1, 1)
    if key is not None:
        mavlink_signing.sign_outgoing(mav, key, 0, timestamp)
    return mav.local_position_ned_encode(10**9, 99.0, 99.0, -99.0, 0, 0, 0).pack(mav)


def test_signed_stand_in_accepts_robos_signed_commands():
    with MavlinkVehicle(signing_key=KEY) as v, PX4Robot(connection=f"udpout:{v.address}", signing_key=KEY) as robot:
        robot.connect(3.0)
        robot.arm()
        last = robot.read_state().timestamp
        for _ in range(20):  # lockstep: each signed setpoint steps the vehicle once and brings signed telemetry
            robot.send(MotorCommand(np.full(4, 0.5)))
            assert wait_for(lambda: robot.read_state().timestamp > last)
            last = robot.read_state().timestamp
        assert v.armed and v.steps == 20 and robot.armed
        assert v.received and all(m.get_signed() for m in v.received)  # everything robo sent carries a valid signature
        assert v.rejected == {"unsigned": 0, "bad_signature": 0} and robot.rejected_messages == 0 and robot.signed
        assert robot.stats["received"] > 20


def test_unsigned_forged_and_replayed_senders_are_ignored_and_counted():
    from hardware.drivers import mavlink_signing

    with MavlinkVehicle(signing_key=KEY, initial_position=(0.5, -0.3, 1.2)) as v, \
            PX4Robot(connection=f"udpout:{v.address}", signing_key=KEY) as robot:
        robot.connect(3.0)
        with v._lock:  # a genuine signed frame, held back: replayed later, its timestamp is old
            held = v.telemetry_messages()[0].pack(v._mav)
        assert wait_for(lambda: robot.stats["received"] > 10)
        future = mavlink_signing.now_timestamp() + 10**12
        _attacker_send(robot.local_port, *[_spoofed_position() for _ in range(5)],          # no key
                       *[_spoofed_position(OTHER_KEY) for _ in range(4)],                  # another key
                       _spoofed_position(OTHER_KEY, future),                               # forged far future
                       held)                                                               # replay
        assert wait_for(lambda: robot.stats["unsigned"] == 5 and robot.stats["bad_signature"] == 6)
        assert robot.rejected_messages == 11
        t = time.monotonic()  # the forged far-future stamp did not lock the genuine stream out
        assert wait_for(lambda: robot.read_state().timestamp > t + 0.05)
        np.testing.assert_allclose(robot.read_state().position, [0.5, -0.3, 1.2], atol=1e-6)
        robot.arm()
        assert v.armed
        print("senders: 1 genuine, 1 attacker; rejections:", robot.stats)


def test_unsigned_robo_is_refused_by_a_signing_vehicle(free_port):
    # the vehicle sends to a fixed address, as PX4 SITL to 14540 (it answers only signed senders otherwise)
    with MavlinkVehicle(signing_key=KEY, remote=("127.0.0.1", free_port)) as v, \
            PX4Robot(connection=f"udpin:127.0.0.1:{free_port}", command_tries=2, ack_timeout=0.2,
                     offboard_stream_s=0.1) as robot:
        robot.connect(3.0)  # robo without a key reads the signed telemetry, but cannot command
        with pytest.raises(RobotError, match="no COMMAND_ACK"):
            robot.arm()
        assert not v.armed and v.rejected["unsigned"] > 5 and not v.messages("COMMAND_LONG")


@pytest.mark.parametrize("vehicle_key, match", [(None, "unsigned messages"), (OTHER_KEY, "another key")],
                         ids=["unsigned", "other-key"])
def test_signing_robo_refuses_an_unsigned_or_other_key_vehicle(vehicle_key, match, free_port):
    with MavlinkVehicle(signing_key=vehicle_key, remote=("127.0.0.1", free_port)):
        robot = PX4Robot(connection=f"udpin:127.0.0.1:{free_port}", signing_key=KEY)
        with pytest.raises(RobotError, match=match):
            robot.connect(0.8)
        assert robot.rejected_messages > 0 and robot.stats["received"] == 0


def test_key_from_file_or_environment_never_from_the_config(tmp_path, monkeypatch):
    import dataclasses
    import hashlib

    from hardware.drivers import mavlink_signing as ms
    from hardware.drivers.px4_protocol import PX4Config

    raw, px4_file, hex_file = tmp_path / "k.bin", tmp_path / "mavlink-signing-key.bin", tmp_path / "k.hex"
    raw.write_bytes(KEY)
    px4_file.write_bytes(KEY + (123).to_bytes(8, "little"))  # PX4's SD-card file: key + timestamp
    hex_file.write_text(KEY.hex() + "\n")
    for path in (raw, px4_file, hex_file):
        assert ms.read_key_file(path) == KEY
        robot = PX4Robot(signing_key_file=str(path))
        assert robot.signed and KEY.hex() not in repr(dataclasses.asdict(robot.config))
    monkeypatch.setenv("ROBO_MAVLINK_KEY", KEY.hex())
    assert PX4Robot()._key == KEY
    monkeypatch.setenv("ROBO_MAVLINK_KEY", "correct horse battery staple")  # MAVProxy's passphrase -> sha256
    assert PX4Robot()._key == hashlib.sha256(b"correct horse battery staple").digest()
    assert PX4Robot(signing_key_file=str(raw))._key == KEY  # the file wins over the environment
    monkeypatch.delenv("ROBO_MAVLINK_KEY")
    assert not PX4Robot().signed
    (tmp_path / "short").write_bytes(b"\x01" * 7)
    (tmp_path / "zeros").write_bytes(bytes(32))
    for name, match in (("missing", "does not exist"), ("short", "has 7 bytes; expected a 32-byte key"),
                        ("zeros", "all zeros")):
        with pytest.raises(ValueError, match=match) as e:
            PX4Config(signing_key_file=str(tmp_path / name)) and PX4Robot(signing_key_file=str(tmp_path / name))
        assert "\n" not in str(e.value)


def test_loopback_by_default_and_a_bind_to_all_interfaces_is_logged(free_port, caplog):
    from hardware.drivers.px4_protocol import PX4Config, listens_everywhere

    assert PX4Config().connection == "udpin:127.0.0.1:14540" and not listens_everywhere(PX4Config().connection)
    assert listens_everywhere("udpin:0.0.0.0:14540") and listens_everywhere("udp:0.0.0.0:14540")
    assert not listens_everywhere("udpout:0.0.0.0:14540") and not listens_everywhere("/dev/ttyACM0")
    robot = PX4Robot(connection=f"udpin:0.0.0.0:{free_port}")
    with caplog.at_level("WARNING", logger="hardware.drivers.px4"), pytest.raises(RobotError, match="no HEARTBEAT"):
        robot.connect(timeout=0.2)
    lines = [r.getMessage() for r in caplog.records if "every interface" in r.getMessage()]
    assert len(lines) == 1 and "any sender" in lines[0] and "signing key" in lines[0] and "\n" not in lines[0]
