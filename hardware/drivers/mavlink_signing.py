"""MAVLink 2 message signing as robo sets it up on pymavlink: the secret key and the signing state.

The key (32 bytes, shared with the vehicle) comes from, in this order: the bytes given to the driver,
a key file, or the environment variable ``ROBO_MAVLINK_KEY``. Never from a config value: robo saves
its resolved configs into run folders, so a config may name a key *file*, not hold a key.

* key file: 32 raw bytes; PX4's own 40-byte ``mavlink-signing-key.bin`` (the key, then a uint64
  timestamp); or 64 hex digits (whitespace around them ignored).
* ``ROBO_MAVLINK_KEY``: 64 hex digits are the key itself; any other text is a passphrase, hashed
  with SHA-256 to the key as MAVProxy's ``signing setup PASSPHRASE`` does (``sha256(passphrase)``).

Timestamps are MAVLink's: units of 10 us since 2015-01-01 00:00 UTC, taken from the wall clock.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from .extras import require

mavlink = require("pymavlink.dialects.v20.common")

ENV_VAR = "ROBO_MAVLINK_KEY"
KEY_BYTES = 32
PX4_KEY_FILE_BYTES = 40  # PX4's /mavlink/mavlink-signing-key.bin: key (32) + timestamp (uint64 LE)
MAVLINK_EPOCH = 1420070400  # 2015-01-01 00:00 UTC, s since the Unix epoch


class SigningKeyError(ValueError):
    """A signing key that cannot be used (missing file, wrong length, not hex, all zero)."""


def key_from_passphrase(passphrase: str) -> bytes:
    """The 32-byte key of a passphrase: SHA-256 of its UTF-8 bytes (MAVProxy's ``signing setup``)."""
    if not passphrase:
        raise SigningKeyError("the MAVLink signing passphrase is empty")
    return hashlib.sha256(passphrase.encode("utf-8")).digest()


def key_from_text(text: str, source: str) -> bytes:
    """64 hex digits -> those 32 bytes; any other text -> ``key_from_passphrase``."""
    text = text.strip()
    if len(text) == 2 * KEY_BYTES:
        try:
            return _checked(bytes.fromhex(text), source)
        except ValueError:
            pass  # 64 characters that are not hex: a passphrase
    return _checked(key_from_passphrase(text), source)


def read_key_file(path: str | os.PathLike) -> bytes:
    """The key in ``path``: 32 raw bytes, PX4's 40-byte key file, or 64 hex digits."""
    p = Path(path).expanduser()
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise SigningKeyError(f"MAVLink signing key file {p} does not exist") from None
    except OSError as e:
        raise SigningKeyError(f"cannot read MAVLink signing key file {p}: {e.strerror or e}") from None
    if len(data) in (KEY_BYTES, PX4_KEY_FILE_BYTES):
        return _checked(data[:KEY_BYTES], str(p))
    try:
        text = data.decode("ascii").strip()
        if len(text) == 2 * KEY_BYTES:
            return _checked(bytes.fromhex(text), str(p))
    except ValueError:
        pass
    raise SigningKeyError(f"MAVLink signing key file {p} has {len(data)} bytes; expected a {KEY_BYTES}-byte key, "
                          f"PX4's {PX4_KEY_FILE_BYTES}-byte mavlink-signing-key.bin, or {2 * KEY_BYTES} hex digits")


def resolve_key(key: bytes | None = None, key_file: str | os.PathLike | None = None,
                environ: dict | None = None) -> bytes | None:
    """The signing key: ``key`` if given, else ``key_file``'s, else ``$ROBO_MAVLINK_KEY``'s, else None (no signing)."""
    if key is not None:
        return _checked(bytes(key), "the given key")
    if key_file:
        return read_key_file(key_file)
    text = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return key_from_text(text, f"${ENV_VAR}") if text.strip() else None


def _checked(key: bytes, source: str) -> bytes:
    if len(key) != KEY_BYTES:
        raise SigningKeyError(f"MAVLink signing key from {source} has {len(key)} bytes, expected {KEY_BYTES}")
    if not any(key):
        raise SigningKeyError(f"MAVLink signing key from {source} is all zeros (the value that disables signing)")
    return key


def now_timestamp() -> int:
    """Now as a MAVLink signing timestamp (10 us units since 2015-01-01 UTC)."""
    return int((max(time.time(), MAVLINK_EPOCH) - MAVLINK_EPOCH) * 100_000)


def sign_outgoing(mav: mavlink.MAVLink, key: bytes, link_id: int, timestamp: int | None = None) -> None:
    """Sign every message ``mav`` packs from now on (``link_id``; timestamps from now, or ``timestamp``)."""
    mav.signing.secret_key = key
    mav.signing.link_id = int(link_id)
    mav.signing.timestamp = now_timestamp() if timestamp is None else int(timestamp)
    mav.signing.sign_outgoing = True


def refuse_unsigned(mav: mavlink.MAVLink, msg_id: int) -> bool:
    """pymavlink's ``allow_unsigned_callback``: accept no unsigned or badly signed message. (PX4 signs
    all it sends once it has a key, HEARTBEAT included, so nothing robo reads needs an exception.)"""
    return False


def incoming_signing(key: bytes, allow_unsigned=refuse_unsigned) -> mavlink.MAVLinkSigning:
    """The signing state of a parser that accepts only messages signed with ``key``: a new stream is accepted
    if its timestamp is at most one minute behind now, then only ever newer timestamps (replays refused).
    ``allow_unsigned(mav, msg_id)``: pymavlink's hook for the unsigned messages let through (none by default)."""
    s = mavlink.MAVLinkSigning()
    s.secret_key = key
    s.timestamp = now_timestamp()
    s.allow_unsigned_callback = allow_unsigned
    return s


def verify_signatures(mav: mavlink.MAVLink, signing: mavlink.MAVLinkSigning) -> mavlink.MAVLink:
    """Make ``mav`` check signatures with ``signing`` (which may outlive ``mav``: replay state and counts).

    pymavlink (2.4.50) records a stream's timestamp before it compares the signature, so one forged frame
    with a far-future timestamp would make every genuine frame of that stream "old" afterwards; here a
    frame that fails the check leaves the recorded timestamp as it was."""
    mav.signing = signing
    check = type(mav).check_signature

    def check_then_record(msgbuf, src_system, src_component):
        stream = (msgbuf[-13], src_system, src_component)
        before = signing.stream_timestamps.get(stream)
        if check(mav, msgbuf, src_system, src_component):
            return True
        if before is None:
            signing.stream_timestamps.pop(stream, None)
        else:
            signing.stream_timestamps[stream] = before
        return False

    mav.check_signature = check_then_record
    return mav


def rejection_kind(msg) -> str | None:
    """For a BAD_DATA message: ``unsigned`` or ``bad_signature`` if it was refused for its signature
    (a CRC-valid frame without one, or with a wrong key, a replayed or a stale timestamp), else None."""
    if getattr(msg, "reason", "") != "Invalid signature":
        return None
    data = msg.data
    signed = len(data) > 2 and data[0] == mavlink.PROTOCOL_MARKER_V2 and data[2] & mavlink.MAVLINK_IFLAG_SIGNED
    return "bad_signature" if signed else "unsigned"


def frame_source(data) -> tuple[int, int] | None:
    """(system id, message id) from a raw frame's header, or None if too short."""
    if len(data) >= 10 and data[0] == mavlink.PROTOCOL_MARKER_V2:
        return data[5], data[7] | data[8] << 8 | data[9] << 16
    if len(data) >= 6 and data[0] == mavlink.PROTOCOL_MARKER_V1:
        return data[3], data[5]
    return None
