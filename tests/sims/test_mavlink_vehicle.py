"""The simulated PX4 vehicle on its own, driven by a bare pymavlink client (no robo driver)."""

import socket
import time

import numpy as np
import pytest
import torch
from pymavlink.dialects.v20 import common as mavlink

from sims.envs import make_robot
from sims.quadrotor import BatchedQuadrotorSim, ParamsBatch
from sims.quadrotor.dynamics import hover_state
from sims.vehicles import MavlinkVehicle


class Client:
    """A minimal MAVLink GCS on a UDP socket."""

    def __init__(self, vehicle):
        self.addr = ("127.0.0.1", vehicle.port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(0.02)
        self.mav = mavlink.MAVLink(None, 255, 190)

    def send(self, msg):
        self.sock.sendto(msg.pack(self.mav), self.addr)

    def recv(self, kind, timeout=1.0, where=lambda m: True):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                data = self.sock.recv(65535)
            except socket.timeout:
                continue
            for m in self.mav.parse_buffer(data) or []:
                if m.get_type() == kind and where(m):
                    return m
        raise AssertionError(f"no {kind} within {timeout} s")

    def command(self, command, *params):
        p = (list(params) + [0.0] * 7)[:7]
        self.send(self.mav.command_long_encode(1, 1, command, 0, *p))
        return self.recv("COMMAND_ACK", where=lambda m: m.command == command).result

    def motors(self, px4_order):
        self.send(self.mav.set_actuator_control_target_encode(0, 0, 1, 1, list(px4_order) + [0.0] * 4))

    def close(self):
        self.sock.close()


@pytest.fixture
def vehicle():
    with MavlinkVehicle(initial_position=(0.0, 0.0, 1.0)) as v:
        yield v


@pytest.fixture
def client(vehicle):
    c = Client(vehicle)
    c.send(c.mav.heartbeat_encode(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 0))
    yield c
    c.close()


def _offboard_and_arm(client):
    for _ in range(3):
        client.motors([0.0] * 4)
    assert client.command(mavlink.MAV_CMD_DO_SET_MODE, 1, 6) == mavlink.MAV_RESULT_ACCEPTED
    assert client.command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1) == mavlink.MAV_RESULT_ACCEPTED


def test_heartbeat_and_ned_telemetry_like_px4(vehicle, client):
    hb = client.recv("HEARTBEAT")
    assert hb.autopilot == mavlink.MAV_AUTOPILOT_PX4 and hb.type == mavlink.MAV_TYPE_QUADROTOR
    assert (hb.custom_mode >> 16) & 0xFF == 3 and not hb.base_mode & mavlink.MAV_MODE_FLAG_SAFETY_ARMED
    pos = client.recv("LOCAL_POSITION_NED")
    assert pos.z == pytest.approx(-1.0)  # 1 m up is z = -1 in NED
    att = client.recv("ATTITUDE_QUATERNION")
    np.testing.assert_allclose([att.q1, att.q2, att.q3, att.q4], [1, 0, 0, 0], atol=1e-7)


def test_offboard_refused_without_setpoints(vehicle, client):
    assert client.command(mavlink.MAV_CMD_DO_SET_MODE, 1, 6) == mavlink.MAV_RESULT_TEMPORARILY_REJECTED
    assert client.command(mavlink.MAV_CMD_DO_REPOSITION) == mavlink.MAV_RESULT_UNSUPPORTED


def test_lockstep_one_step_per_actuator_command_matches_the_simulator(vehicle, client):
    _offboard_and_arm(client)
    params = ParamsBatch.from_params(make_robot("crazyflie"), 1, dtype=torch.float64)
    ref = BatchedQuadrotorSim(params)
    ref.reset(hover_state(params, torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)))
    rng = np.random.default_rng(0)
    for k in range(20):
        u = rng.uniform(0.3, 0.8, 4).astype(np.float32).astype(np.float64)  # robo order FR, BR, BL, FL (MAVLink float)
        client.motors(u[[0, 2, 3, 1]])  # PX4 order FR, BL, FL, BR
        client.recv("ATTITUDE_QUATERNION", where=lambda m: m.time_boot_ms == vehicle.time_ms)
        ref.step(torch.as_tensor(2 * u - 1)[None])
        assert vehicle.steps == k + 1
    np.testing.assert_allclose(vehicle.sim.state.numpy(), ref.state.numpy(), atol=1e-12)


def test_disarmed_vehicle_holds_still(vehicle, client):
    client.motors([1.0] * 4)
    time.sleep(0.05)
    assert vehicle.steps == 0 and np.allclose(vehicle.true_state()["position"], [0, 0, 1])


def test_real_time_mode_steps_by_itself():
    with MavlinkVehicle(lockstep=False) as v:
        c = Client(v)
        c.send(c.mav.heartbeat_encode(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 0))
        _offboard_and_arm(c)
        c.motors([0.0] * 4)  # motors off: it falls
        time.sleep(0.3)
        assert v.steps >= 5 and v.true_state()["position"][2] < 1.0
        c.close()


def test_garbage_does_not_stop_the_vehicle(vehicle, client):
    rng = np.random.default_rng(0)
    for _ in range(100):
        client.sock.sendto(rng.integers(0, 256, 64, dtype=np.uint8).tobytes(), client.addr)
    assert client.command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1) == mavlink.MAV_RESULT_ACCEPTED
    assert vehicle.bad_data > 0


def _signed_client(vehicle, key):
    c = Client(vehicle)
    c.mav.signing.secret_key, c.mav.signing.sign_outgoing = key, True
    c.mav.signing.timestamp = int((time.time() - 1420070400) * 100_000)  # 10 us units since 2015-01-01
    return c


def test_signing_vehicle_takes_commands_only_with_its_key():
    key = bytes(range(1, 33))
    with MavlinkVehicle(signing_key=key) as v:
        stranger, other, owner = Client(v), _signed_client(v, bytes(range(2, 34))), _signed_client(v, key)
        for c in (stranger, other):  # HEARTBEAT is on PX4's unsigned allowlist, commands are not
            c.send(c.mav.heartbeat_encode(mavlink.MAV_TYPE_GCS, mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 0))
            c.send(c.mav.command_long_encode(1, 1, mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 0, 1, 0, 0, 0, 0, 0, 0))
        time.sleep(0.2)
        # as PX4's accept_unsigned callback: the allowlisted HEARTBEAT passes unsigned or wrongly signed
        assert not v.armed and v.rejected == {"unsigned": 1, "bad_signature": 1}
        assert not v.messages("COMMAND_LONG") and [m.get_type() for m in v.received] == ["HEARTBEAT", "HEARTBEAT"]
        with pytest.raises(AssertionError):  # nothing was sent to the strangers: only a signed sender is answered
            stranger.recv("HEARTBEAT", timeout=0.1)
        _offboard_and_arm(owner)
        assert v.armed
        hb = owner.recv("HEARTBEAT")  # the vehicle signs what it sends, and the owner's parser checks it
        verifier = mavlink.MAVLink(None)
        verifier.signing.secret_key = key
        assert hb.get_signed() and verifier.decode(bytearray(hb.get_msgbuf())).get_signed()
        for c in (stranger, other, owner):
            c.close()


def test_non_finite_setpoints_and_commands_are_refused(vehicle, client):
    _offboard_and_arm(client)
    client.motors([float("nan"), 0.5, 0.5, 0.5])
    assert client.command(mavlink.MAV_CMD_DO_SET_MODE, 1, float("inf")) == mavlink.MAV_RESULT_DENIED
    assert client.command(mavlink.MAV_CMD_DO_SET_MODE, 1, 1e30) == mavlink.MAV_RESULT_DENIED  # not a main mode
    assert vehicle.refused == 2 and vehicle.steps == 0 and np.isfinite(vehicle.true_state()["position"]).all()
