"""MSP (MultiWii Serial Protocol) v1 and v2 framing, and the few Betaflight messages robo uses.

Frames (Betaflight ``src/main/msp/msp_serial.c``):

* v1: ``$M<`` (request) / ``$M>`` (reply) / ``$M!`` (error), uint8 size, uint8 command, payload,
  checksum = XOR of size, command and payload bytes.
* v2: ``$X<`` / ``$X>`` / ``$X!``, uint8 flags, uint16 command, uint16 size (little endian),
  payload, checksum = CRC-8/DVB-S2 (poly 0xD5) over flags..payload.

Payloads (Betaflight ``src/main/msp/msp.c``, little endian):

* ``MSP_STATUS`` (101): uint16 cycle time us, uint16 i2c errors, uint16 sensors, uint32 flight
  mode flags (bit 0 = ARM box), uint8 profile, then version-dependent fields (ignored).
* ``MSP_RAW_IMU`` (102): int16 acc[3] (acc_1G / scale), int16 gyro[3] deg/s, int16 mag[3].
* ``MSP_ATTITUDE`` (108): int16 roll and pitch in 0.1 deg, int16 yaw (heading) in deg.
* ``MSP_SET_RAW_RC`` (200): uint16 per channel, us (1000..2000).
* ``MSP_SET_MOTOR`` (214): uint16 x 8, us (1000..2000), applied only while disarmed (motor test).
* ``MSP_STATUS_EX`` (150): MSP_STATUS's first 15 bytes (its last two fields are the PID and rate
  profile counts), uint8 n + n bytes of further flight mode flags, uint8 flag count, uint32
  arming-disable flags (``fc/runtime_config.h``), uint8 config state (bit 0 = reboot required).
* Setup (a configurator's messages; every one is acknowledged by an empty reply, refused by ``$M!``):
  ``MSP_SET_MODE_RANGE`` (35): uint8 slot, permanent box id, AUX index, start step, end step
  (step = (us - 900) / 25); ``MSP_FEATURE_CONFIG``/``MSP_SET_FEATURE_CONFIG`` (36/37): uint32;
  ``MSP_ADVANCED_CONFIG``/``SET`` (90/91), ``MSP_FAILSAFE_CONFIG``/``SET`` (75/76) and
  ``MSP_RC_TUNING``/``SET`` (111/204), read-modify-written in the layouts below;
  ``MSP_ACC_CALIBRATION`` (205), ``MSP_EEPROM_WRITE`` (250), ``MSP_REBOOT`` (68): no payload;
  ``MSP_SET_ARMING_DISABLED`` (99): uint8 disable arming, uint8 disable runaway-takeoff prevention.
* ``MSP_MULTIPLE_MSP`` (230): request = command ids (uint8 each, no arguments); reply = for each,
  uint8 size + that command's reply payload (as many as fit the firmware's buffer).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

MSP_STATUS, MSP_RAW_IMU, MSP_MOTOR, MSP_RC, MSP_ATTITUDE = 101, 102, 104, 105, 108
MSP_SET_RAW_RC, MSP_SET_MOTOR = 200, 214
MSP_MODE_RANGES, MSP_SET_MODE_RANGE, MSP_FEATURE_CONFIG, MSP_SET_FEATURE_CONFIG = 34, 35, 36, 37
MSP_REBOOT, MSP_FAILSAFE_CONFIG, MSP_SET_FAILSAFE_CONFIG = 68, 75, 76
MSP_ADVANCED_CONFIG, MSP_SET_ADVANCED_CONFIG, MSP_RC_TUNING, MSP_STATUS_EX = 90, 91, 111, 150
MSP_SET_RC_TUNING, MSP_ACC_CALIBRATION, MSP_EEPROM_WRITE, MSP_MULTIPLE_MSP = 204, 205, 250, 230
MSP_SET_ARMING_DISABLED, MSP_PID, MSP_SET_PID = 99, 112, 202
# MSP_FAILSAFE_CONFIG: delay (0.1 s), landing time (s), throttle (us), switch mode, throttle-low delay (0.1 s),
# procedure
FAILSAFE_CONFIG = struct.Struct("<BBHBHB")
# MSP_RC_TUNING: roll rc rate, roll expo, rates r/p/y, (tpa), thr mid, thr expo, (tpa breakpoint), yaw expo,
# yaw rc rate, pitch rc rate, pitch expo, throttle limit type, throttle limit %, rate limits r/p/y, rates type,
# thr hover
RC_TUNING = struct.Struct("<BBBBBBBBHBBBBBBHHHBB")
MAX_PAYLOAD = 1024  # robo's messages are < 64 bytes; longer frames are treated as corrupt
DIRECTIONS = {ord("<"): "request", ord(">"): "reply", ord("!"): "error"}


def crc8_dvb_s2(data: bytes, crc: int = 0) -> int:
    """CRC-8/DVB-S2 (polynomial 0xD5, init 0), MSP v2's checksum."""
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0xD5) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def xor_checksum(data: bytes) -> int:
    """MSP v1's checksum: XOR of the bytes."""
    c = 0
    for byte in data:
        c ^= byte
    return c


def encode(command: int, payload: bytes = b"", version: int = 1, direction: str = "<") -> bytes:
    """One MSP frame. ``direction``: ``<`` to the flight controller, ``>`` reply, ``!`` error."""
    if version == 1:
        if not (0 <= command <= 255 and len(payload) <= 255):
            raise ValueError(f"MSP v1 carries command 0..255 and <= 255 payload bytes, got {command}, {len(payload)}")
        body = bytes([len(payload), command]) + payload
        return b"$M" + direction.encode() + body + bytes([xor_checksum(body)])
    if version == 2:
        if not (0 <= command <= 0xFFFF and len(payload) <= 0xFFFF):
            raise ValueError(f"MSP v2 carries command 0..65535 and <= 65535 payload bytes, got {command}")
        body = struct.pack("<BHH", 0, command, len(payload)) + payload
        return b"$X" + direction.encode() + body + bytes([crc8_dvb_s2(body)])
    raise ValueError(f"MSP version must be 1 or 2, got {version}")


@dataclass
class MspFrame:
    command: int
    payload: bytes
    version: int
    direction: str  # "request", "reply" or "error"


@dataclass
class MspParser:
    """Incremental MSP v1/v2 decoder for a byte stream (TCP or serial).

    ``feed(bytes)`` returns the complete, checksum-valid frames; everything else is skipped and
    counted in ``rejected`` (``bad_checksum``, ``oversize``, ``garbage``) so a corrupt stream never
    raises. A frame split across reads is kept until its remaining bytes arrive.
    """

    rejected: dict = field(default_factory=lambda: {"bad_checksum": 0, "oversize": 0, "garbage": 0})
    _buf: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> list[MspFrame]:
        self._buf += data
        frames = []
        while True:
            start = self._buf.find(b"$")
            if start < 0:
                if self._buf:
                    self.rejected["garbage"] += 1
                self._buf.clear()
                return frames
            if start > 0:
                self.rejected["garbage"] += 1
                del self._buf[:start]
            if len(self._buf) < 3:
                return frames
            kind, direction = self._buf[1], self._buf[2]
            if kind not in (ord("M"), ord("X")) or direction not in DIRECTIONS:
                self.rejected["garbage"] += 1
                del self._buf[:1]
                continue
            frame, used = self._try_frame(kind == ord("X"), DIRECTIONS[direction])
            if used == 0:
                return frames  # incomplete: wait for more bytes
            del self._buf[:used]
            if frame is not None:
                frames.append(frame)

    def _try_frame(self, v2: bool, direction: str) -> tuple[MspFrame | None, int]:
        """(frame or None if rejected, bytes consumed; 0 = need more bytes)."""
        b = self._buf
        header = 8 if v2 else 5
        if len(b) < header:
            return None, 0
        if v2:
            _, command, size = struct.unpack_from("<BHH", b, 3)
        else:
            size, command = b[3], b[4]
        if size > MAX_PAYLOAD:
            self.rejected["oversize"] += 1
            return None, 1
        end = header + size
        if len(b) < end + 1:
            return None, 0
        body = bytes(b[3:end])
        expected = crc8_dvb_s2(body) if v2 else xor_checksum(body)
        if b[end] != expected:
            self.rejected["bad_checksum"] += 1
            return None, 1  # resync on the next '$'
        return MspFrame(command, bytes(b[header:end]), 2 if v2 else 1, direction), end + 1


# payloads ---------------------------------------------------------------------------------------
def _need(payload: bytes, n: int, what: str) -> None:
    if len(payload) < n:
        raise ValueError(f"{what} payload has {len(payload)} bytes, expected at least {n}")


def unpack_attitude(payload: bytes) -> tuple[float, float, float]:
    """MSP_ATTITUDE -> (roll deg, pitch deg, yaw deg) in Betaflight's signs."""
    _need(payload, 6, "MSP_ATTITUDE")
    roll, pitch, yaw = struct.unpack_from("<hhh", payload)
    return roll / 10.0, pitch / 10.0, float(yaw)


def unpack_raw_imu(payload: bytes) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """MSP_RAW_IMU -> (acc[3] raw, gyro[3] deg/s, mag[3] raw), Betaflight's axes."""
    _need(payload, 18, "MSP_RAW_IMU")
    v = struct.unpack_from("<9h", payload)
    return v[0:3], v[3:6], v[6:9]


def unpack_status(payload: bytes) -> tuple[int, int]:
    """MSP_STATUS -> (cycle time us, flight mode flags); bit 0 of the flags is ARM."""
    _need(payload, 11, "MSP_STATUS")
    cycle, _, _, flags = struct.unpack_from("<HHHI", payload)
    return cycle, flags


def pack_channels(values) -> bytes:
    """uint16 list (RC channels or motors, us) -> MSP_SET_RAW_RC / MSP_SET_MOTOR payload."""
    vals = [int(v) for v in values]
    if any(not 0 <= v <= 0xFFFF for v in vals):
        raise ValueError(f"channel values must fit uint16, got {vals}")
    return struct.pack(f"<{len(vals)}H", *vals)


@dataclass
class StatusEx:
    """MSP_STATUS_EX, decoded. ``arming_disable``: the firmware's ``armingDisableFlags_e`` bit mask."""

    cycle_us: int
    flight_modes: int
    arming_disable: int
    reboot_required: bool
    load_percent: float


def unpack_status_ex(payload: bytes) -> StatusEx:
    _need(payload, 16, "MSP_STATUS_EX")
    cycle, _, _, modes, _, load = struct.unpack_from("<HHHIBH", payload)
    extra = payload[15]
    _need(payload, 16 + extra + 6, "MSP_STATUS_EX")
    _, disable, config = struct.unpack_from("<BIB", payload, 16 + extra)
    return StatusEx(cycle, modes, disable, bool(config & 1), load / 10.0)


def pack_mode_range(slot: int, permanent_id: int, aux_index: int, start_us: int, end_us: int) -> bytes:
    """MSP_SET_MODE_RANGE payload: box ``permanent_id`` active while AUX ``aux_index`` (0 = AUX1) is in
    [start_us, end_us] (900..2100, 25 us steps)."""
    if not (900 <= start_us < end_us <= 2100):
        raise ValueError(f"mode range must satisfy 900 <= start < end <= 2100 us, got {start_us}..{end_us}")
    return bytes([slot, permanent_id, aux_index, (start_us - 900) // 25, (end_us - 900) // 25])


def unpack_multiple(payload: bytes) -> list[bytes]:
    """MSP_MULTIPLE_MSP reply -> the payloads of the bundled replies, in request order."""
    out, i = [], 0
    while i < len(payload):
        n = payload[i]
        if i + 1 + n > len(payload):
            raise ValueError(f"MSP_MULTIPLE_MSP reply is cut inside a {n}-byte part at offset {i}")
        out.append(payload[i + 1:i + 1 + n])
        i += 1 + n
    return out
