"""A Crazyflie stand-in on a UDP CRTP link (cflib's ``udp://host:port`` driver), backed by robo's sim.

cflib's UDP link (``cflib/crtp/udpdriver.py``, used by Crazyflie SITL / CrazySim) carries one CRTP
packet per datagram: byte 0 the CRTP header, then up to 30 payload bytes, no checksum. This peer
answers everything ``cflib.crazyflie.Crazyflie.open_link`` asks for, so the real cflib connect
handshake runs against it: link-control "source" probe, platform protocol version (12, so cflib
uses the supervisor port), log and parameter TOCs (TOC v2), memory count (0), parameter reads
and writes, log block create/append/start/stop/delete and periodic log data, supervisor state and
arming, the RPYT commander (``struct CommanderCrtpLegacyValues``: float roll, pitch, yaw; uint16
thrust) and the generic commander's stop setpoint.

Conventions served, as the firmware's: ``stateEstimate.{x,y,z,vx,vy,vz}`` m and m/s (world FLU),
``stateEstimate.{qx,qy,qz,qw}`` body -> world, ``gyro.{x,y,z}`` deg/s (body FLU); RPYT packet
roll deg (right wing down +), pitch deg in the firmware's legacy sign (nose up +; cflib's
``send_setpoint`` negates the caller's pitch), yaw rate deg/s clockwise + ("legacy rate input is
inverted"), thrust 0..65535 of full power. ``motorPowerSet.enable`` / ``m1..m4`` (uint16) set the
motors directly (m1 front-right, m2 back-right, m3 back-left, m4 front-left, robo's order).

Every incoming packet is decoded with cflib's ``CRTPPacket``; malformed ones are counted in
``rejected`` and dropped.
"""

from __future__ import annotations

import math
import socket
import struct
import time

import numpy as np

from .extras import require
from .loops import BackgroundLoops
from .sim_vehicle import SimVehicle

LogTocElement = require("cflib.crazyflie.log").LogTocElement
ParamTocElement = require("cflib.crazyflie.param").ParamTocElement
_crtpstack = require("cflib.crtp.crtpstack")
CRTPPacket, CRTPPort = _crtpstack.CRTPPacket, _crtpstack.CRTPPort

PROTOCOL_VERSION = 12
LOG_VARIABLES = [  # (group, name, C type): the subset of the firmware's log TOC robo reads
    ("stateEstimate", n, "float") for n in ("x", "y", "z", "vx", "vy", "vz", "qx", "qy", "qz", "qw")
] + [("gyro", n, "float") for n in ("x", "y", "z")]
PARAMS = [("motorPowerSet", "enable", "uint8_t")] + [("motorPowerSet", f"m{i}", "uint16_t") for i in range(1, 5)]
TOC_CMD_ITEM_V2, TOC_CMD_INFO_V2 = 2, 3
LOG_CREATE, LOG_APPEND, LOG_DELETE, LOG_START, LOG_STOP, LOG_RESET = 6, 7, 2, 3, 4, 5
SUPERVISOR_GET_STATE, SUPERVISOR_ARM, SUPERVISOR_EMERGENCY_STOP = 0x0C, 0x01, 0x03


def _type_id(types: dict, ctype: str) -> int:
    return next(k for k, v in types.items() if v[0] == ctype)


def _toc_item(ident: int, type_byte: int, group: str, name: str) -> bytes:
    return struct.pack("<BHB", TOC_CMD_ITEM_V2, ident, type_byte) + group.encode() + b"\0" + name.encode() + b"\0"


class CrazyflieLinkPeer:
    """A UDP CRTP endpoint that cflib connects to as if it were a Crazyflie.

    Args:
        vehicle: the simulated vehicle (default: a new ``SimVehicle`` with the crazyflie preset).
        host, port: where to listen (port 0: a free port; read ``uri`` after construction).
    """

    def __init__(self, vehicle: SimVehicle | None = None, host: str = "127.0.0.1", port: int = 0):
        self.vehicle = vehicle or SimVehicle()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((host, port))
        self._sock.settimeout(0.05)
        self.uri = "udp://%s:%d" % self._sock.getsockname()
        self._client: tuple | None = None
        self._t0 = time.monotonic()
        self._blocks: dict[int, dict] = {}  # id -> {"vars": [(type_byte, ident)], "period": s, "next": t}
        self._params = {f"{g}.{n}": 0 for g, n, _ in PARAMS}
        self._thrust_locked = True
        self.rejected = 0
        self.received: list[CRTPPacket] = []  # every decoded packet, for tests
        self.silent = False  # True: stop answering and streaming (link loss)
        self._loops = BackgroundLoops("CrazyflieLinkPeer")

    # lifecycle -------------------------------------------------------------------------------
    def start(self) -> "CrazyflieLinkPeer":
        self.vehicle.start()
        self._loops.start(self._serve, self._stream)
        return self

    def close(self) -> None:
        self._loops.stop()
        self.vehicle.stop()
        self._sock.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # sending ---------------------------------------------------------------------------------
    def send(self, port: int, channel: int, data: bytes) -> None:
        pk = CRTPPacket()
        pk.set_header(port, channel)
        pk.data = data
        self.send_raw(bytes([pk.header]) + bytes(pk.data))

    def send_raw(self, datagram: bytes) -> None:
        """Send arbitrary bytes to the connected client (fault injection)."""
        if self._client is not None:
            self._sock.sendto(datagram, self._client)

    def firmware_time_ms(self) -> int:
        return int((time.monotonic() - self._t0) * 1000) & 0xFFFFFF

    # receiving -------------------------------------------------------------------------------
    def _serve(self) -> None:
        while self._loops.running:
            try:
                datagram, addr = self._sock.recvfrom(64)
            except (socket.timeout, OSError):
                continue
            if self.silent:
                continue
            self._client = addr
            if not 1 <= len(datagram) <= 1 + CRTPPacket.MAX_DATA_SIZE:
                self.rejected += 1
                continue
            pk = CRTPPacket(datagram[0], datagram[1:])
            self.received.append(pk)
            try:
                self._handle(pk)
            except (struct.error, IndexError, KeyError, ValueError):
                self.rejected += 1

    def _handle(self, pk: CRTPPacket) -> None:
        port, ch, d = pk.port, pk.channel, bytes(pk.data)
        if port == CRTPPort.LINKCTRL:
            if ch == 0:  # echo (latency ping)
                self.send(port, 0, d)
            elif ch == 1:  # "source": identifies a Crazyflie that supports protocol versioning
                self.send(port, 1, b"Bitcraze Crazyflie")
            elif (pk.header & 0xF3) == 0xF3:  # null packet (scan probe)
                self.send_raw(b"\xff")
        elif port == CRTPPort.PLATFORM:
            if ch == 1 and d[0] == 0:
                self.send(port, 1, bytes([0, PROTOCOL_VERSION]))
            elif ch == 0 and d[0] == 1:  # legacy arming request
                self._arm(bool(d[1]))
        elif port == CRTPPort.MEM and ch == 0 and d[0] == 1:
            self.send(port, 0, bytes([1, 0]))  # no memories
        elif port == CRTPPort.LOGGING:
            self._handle_log(ch, d)
        elif port == CRTPPort.PARAM:
            self._handle_param(ch, d)
        elif port == CRTPPort.SUPERVISOR:
            self._handle_supervisor(ch, d)
        elif port == CRTPPort.COMMANDER and ch == 0:
            self._handle_rpyt(d)
        elif port == CRTPPort.COMMANDER_GENERIC and ch == 0 and d[0] == 0:  # stop setpoint
            self.vehicle.set_motors(np.zeros(4))
            self._thrust_locked = True

    def _handle_toc(self, port: int, d: bytes, items: list[tuple[int, str, str]]) -> None:
        if d[0] == TOC_CMD_INFO_V2:
            crc = hash(tuple(items)) & 0xFFFFFFFF
            self.send(port, 0, struct.pack("<BHIBB", TOC_CMD_INFO_V2, len(items), crc, 16, 128))
        elif d[0] == TOC_CMD_ITEM_V2:
            ident = struct.unpack("<H", d[1:3])[0]
            self.send(port, 0, _toc_item(ident, *items[ident]))

    def _handle_log(self, ch: int, d: bytes) -> None:
        if ch == 0:
            items = [(_type_id(LogTocElement.types, t), g, n) for g, n, t in LOG_VARIABLES]
            return self._handle_toc(CRTPPort.LOGGING, d, items)
        cmd, status = d[0], 0
        if cmd == LOG_RESET:
            self._blocks.clear()
            return self.send(CRTPPort.LOGGING, 1, bytes([cmd, 0, 0]))
        block = d[1]
        if cmd in (LOG_CREATE, LOG_APPEND):
            entries = [struct.unpack("<BH", d[i:i + 3]) for i in range(2, len(d) - 2, 3)]
            if cmd == LOG_CREATE:
                self._blocks[block] = {"vars": entries, "period": None, "next": 0.0}
            else:
                self._blocks[block]["vars"] += entries
        elif cmd == LOG_START:
            self._blocks[block]["period"] = d[2] * 0.01
        elif cmd == LOG_STOP:
            self._blocks[block]["period"] = None
        elif cmd == LOG_DELETE:
            status = 0 if self._blocks.pop(block, None) else 2  # ENOENT
        self.send(CRTPPort.LOGGING, 1, bytes([cmd, block, status]))

    def _handle_param(self, ch: int, d: bytes) -> None:
        items = [(_type_id(ParamTocElement.types, t), g, n) for g, n, t in PARAMS]
        if ch == 0:
            return self._handle_toc(CRTPPort.PARAM, d, items)
        ident = struct.unpack("<H", d[:2])[0]
        type_byte, group, name = items[ident]
        fmt = ParamTocElement.types[type_byte][1]
        if ch == 2:  # write: store, then echo the new value back
            self._params[f"{group}.{name}"] = struct.unpack(fmt, d[2:])[0]
            self._apply_motor_power()
            self.send(CRTPPort.PARAM, 2, d[:2] + struct.pack(fmt, self._params[f"{group}.{name}"]))
        elif ch == 1:  # read: id, status 0, value
            self.send(CRTPPort.PARAM, 1, d[:2] + b"\0" + struct.pack(fmt, self._params[f"{group}.{name}"]))

    def _handle_supervisor(self, ch: int, d: bytes) -> None:
        if ch == 0 and d[0] == SUPERVISOR_GET_STATE:
            bits = 1 | (int(self.vehicle.armed) << 1) | (int(self.vehicle.armed) << 3)  # can arm, armed, can fly
            self.send(CRTPPort.SUPERVISOR, 0, struct.pack("<BH", 0x80 | SUPERVISOR_GET_STATE, bits))
        elif ch == 1 and d[0] == SUPERVISOR_ARM:
            self._arm(bool(d[1]))
            self.send(CRTPPort.SUPERVISOR, 1, bytes([0x80 | SUPERVISOR_ARM, 1, int(self.vehicle.armed)]))
        elif ch == 1 and d[0] == SUPERVISOR_EMERGENCY_STOP:
            self._arm(False)

    def _handle_rpyt(self, d: bytes) -> None:
        roll, pitch_legacy, yaw_rate_cw, thrust = struct.unpack("<fffH", d)
        if thrust == 0:
            self._thrust_locked = False  # the firmware unlocks thrust on a zero-thrust setpoint
        if self._thrust_locked or self._params["motorPowerSet.enable"]:
            return
        self.vehicle.set_attitude(math.radians(roll), -math.radians(pitch_legacy), -math.radians(yaw_rate_cw),
                                  thrust / 65535.0)

    def _apply_motor_power(self) -> None:
        if self._params["motorPowerSet.enable"]:
            self.vehicle.set_motors(np.array([self._params[f"motorPowerSet.m{i}"] for i in range(1, 5)]) / 65535.0)

    def _arm(self, arm: bool) -> None:
        self.vehicle.armed = arm
        self._thrust_locked = True
        if not arm:
            self.vehicle.set_motors(np.zeros(4))

    # log streaming ---------------------------------------------------------------------------
    def _log_values(self) -> dict[int, float]:
        s = self.vehicle.snapshot()
        qw, qx, qy, qz = s.quaternion
        values = [*s.position, *s.velocity, qx, qy, qz, qw, *np.degrees(s.angular_velocity)]
        return dict(enumerate(values))  # TOC ident -> value, in LOG_VARIABLES order

    def _stream(self) -> None:
        while self._loops.running:
            time.sleep(0.002)
            if self.silent or self._client is None:
                continue
            now = time.monotonic()
            due = [(b, blk) for b, blk in list(self._blocks.items()) if blk["period"] and now >= blk["next"]]
            if not due:
                continue
            values, stamp = self._log_values(), self.firmware_time_ms()
            for block, blk in due:
                blk["next"] = now + blk["period"]
                payload = b"".join(struct.pack(LogTocElement.types[t & 0x0F][1], values[ident])
                                   for t, ident in blk["vars"])
                self.send(CRTPPort.LOGGING, 2, bytes([block]) + stamp.to_bytes(3, "little") + payload)
