"""Mutation fuzzing of robo's readers of outside bytes: each input must be read, or refused with a one-line error;
never an unexpected exception, a hang or a crash.

Readers, one row each (``fuzz_inputs`` mutates, times and classifies):

* ``dataset``: ``LeRobotDataset`` (robo/datasets/reader.py) on a 2-episode state + action dataset written by
  ``DatasetWriter``, one of its files mutated per input (or, 3 %, removed), then every episode read
  (``episode(i, images=False)``) and ``normalization_stats()``. Refusals: ValueError, FileNotFoundError (and
  ``normalization_stats``' KeyError) naming the dataset folder.
* ``checkpoint``: ``MLPPolicy.load`` (policies/checkpoint.py: ``load_checkpoint``, ``TorchPolicyCheckpointing.load``)
  of a saved policy with ``config.json`` or ``model.safetensors`` mutated, then one ``act``. Refusals: ValueError,
  FileNotFoundError naming the checkpoint folder.
* ``msp``: hardware/drivers/msp.py: ``MspParser.feed`` of 1-3 reply frames (MSP v1/v2: ATTITUDE, RAW_IMU, STATUS,
  STATUS_EX, MULTIPLE_MSP) in 1-3 pieces, every frame it returns decoded (``unpack_*``). Half the inputs mutate a
  payload and frame it with a valid checksum, so that the decoders see it. Refusals: ValueError; an input the
  parser drops whole (counted in ``rejected``) is refused too.
* ``sitl``: Betaflight SITL packets: sims/vehicles/betaflight_sitl.py's ``BetaflightSITLPeer`` (an ``fdm_packet`` or
  ``rc_packet`` after a valid one) and ``BetaflightMSPServer`` (1-3 MSP requests through its pymsp stream, each
  answered), and the ``servo_packet`` decoders (hardware/drivers/betaflight_sitl.py ``unpack_servo``,
  sims/vehicles/betaflight_firmware.py ``motors_from_servo``) and ``FdmPacket.unpack``. Refusals: ValueError; a
  packet the peer or server drops and counts in ``rejected`` is refused.

Prints one table: reader, inputs, read, refused, other, hang, the slowest input (s) and inputs per second; then
the first other/hang inputs (index, what was mutated, the exception). Exits 1 if there is any. Each reader runs in
a worker process (started again after a crash; its address space capped at 8 GiB, so that a reader allocating
without bound fails, as an "other", instead of swapping), each input under ``--limit`` s; ``--minutes`` caps a
reader's run.
``--case N`` reads input N of one reader in this process and prints its outcome and traceback.

    python benchmarks/fuzz_readers.py --inputs 10000
    python benchmarks/fuzz_readers.py --inputs 300 --readers msp,sitl --seed 1
    python benchmarks/fuzz_readers.py --readers dataset --case 1234
"""

from __future__ import annotations

import argparse
import math
from abc import ABC, abstractmethod
import shutil
import socket
import struct
import sys
import tempfile
import time
import traceback
import warnings
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_inputs import LIMIT, case_rng, fuzz_isolated, mutate, mutate_json, run_case  # noqa: E402
from table import print_table  # noqa: E402


class FolderTarget(ABC):
    """A valid folder kept in memory; each input mutates (3 %: removes) one of its files, reads, restores it."""

    name = ""
    refusals: tuple[type, ...] = (ValueError, FileNotFoundError)

    def __init__(self):
        self.tmp = Path(tempfile.mkdtemp(prefix=f"fuzz-{self.name}-"))
        valid = self.write(self.tmp / "valid")
        self.files = {p.relative_to(valid).as_posix(): p.read_bytes() for p in sorted(valid.rglob("*")) if p.is_file()}
        self.root = self.tmp / "input"
        shutil.copytree(valid, self.root)

    @abstractmethod
    def write(self, root: Path) -> Path:
        """Write the valid folder under ``root``; return it."""

    @abstractmethod
    def read(self):
        """Read ``self.root`` with the reader under test."""

    def case(self, rng):
        rel = rng.choice(sorted(self.files))
        path = self.root / rel
        if rng.random() < 0.03:
            path.unlink()
            label = f"{rel} removed"
        else:
            path.write_bytes((mutate_json if rel.endswith(".json") else mutate)(self.files[rel], rng))
            label = f"{rel} mutated"

        def read():
            try:
                return self.read()
            finally:
                path.write_bytes(self.files[rel])
        return label, read

    def refused(self, exc: BaseException) -> bool:
        return type(exc) in self.refusals and str(self.root) in str(exc)

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


class DatasetTarget(FolderTarget):
    name = "dataset"
    refusals = (ValueError, FileNotFoundError, KeyError)

    def write(self, root: Path) -> Path:
        from robo.datasets import DatasetWriter

        rng = np.random.default_rng(0)
        features = {"observation.state": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
                    "action": {"dtype": "float32", "shape": [2], "names": ["a", "b"]}}
        with DatasetWriter(root, fps=10, features=features, robot_type="fuzz") as w:
            for n, task in ((3, "hover"), (4, "land")):
                for _ in range(n):
                    w.add_frame({"observation.state": rng.standard_normal(3).astype(np.float32),
                                 "action": rng.standard_normal(2).astype(np.float32),
                                 "next.reward": np.float32(rng.random())})
                w.save_episode(task)
        return root

    def read(self):
        from robo.datasets import LeRobotDataset

        ds = LeRobotDataset(self.root)
        for i in range(ds.num_episodes):
            ds.episode(i, images=False)
        ds.normalization_stats()


class CheckpointTarget(FolderTarget):
    name = "checkpoint"

    def write(self, root: Path) -> Path:
        import torch

        from policies.mlp import MLPConfig, MLPPolicy

        torch.manual_seed(0)
        return MLPPolicy(MLPConfig(obs_dim=5, action_dim=2, hidden_dims=[8, 8])).save(root)

    def read(self):
        from policies.mlp import MLPPolicy

        policy = MLPPolicy.load(self.root)
        policy.act(np.zeros((1, policy.obs_dim), np.float32))


def _split(data: bytes, rng) -> list[bytes]:
    """``data`` in 1-3 pieces (as a stream's reads deliver it)."""
    cuts = sorted(rng.randint(0, len(data)) for _ in range(rng.randint(0, 2)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def _frames(rng, payloads: dict, encode) -> tuple[str, bytes]:
    """1-3 frames of random commands of ``payloads`` ({command: payload}), MSP v1 or v2, mutated: half the time one
    payload, framed with a valid checksum (so that decoders see it), else the stream's bytes."""
    chosen = [(rng.choice(sorted(payloads)), rng.choice((1, 2))) for _ in range(rng.randint(1, 3))]
    payload_mode = rng.random() < 0.5
    k = rng.randrange(len(chosen))
    parts = []
    for j, (command, version) in enumerate(chosen):
        payload = payloads[command]
        if payload_mode and j == k:
            payload = mutate(payload, rng)
            version = version if len(payload) <= 255 else 2
        parts.append(encode(command, payload, version))
    data = b"".join(parts)
    if not payload_mode:
        data = mutate(data, rng)
    return f"{'payload' if payload_mode else 'stream'} of {[c for c, _ in chosen]}", data


class MspTarget:
    name = "msp"

    def __init__(self):
        from hardware.drivers import msp

        self.msp = msp
        status = struct.pack("<HHHIBH", 125, 0, 1, 1, 0, 50)
        replies = {msp.MSP_ATTITUDE: struct.pack("<hhh", 123, -45, 270),
                   msp.MSP_RAW_IMU: struct.pack("<9h", 10, -20, 512, 100, -200, 300, 0, 0, 0),
                   msp.MSP_STATUS: status,
                   msp.MSP_STATUS_EX: status + bytes([3, 1, 1, 0]) + struct.pack("<BIB", 30, 0x40, 0)}
        self.bundled = [msp.MSP_ATTITUDE, msp.MSP_RAW_IMU, msp.MSP_STATUS]
        replies[msp.MSP_MULTIPLE_MSP] = b"".join(bytes([len(replies[c])]) + replies[c] for c in self.bundled)
        self.replies = replies
        self.decoders = {msp.MSP_ATTITUDE: msp.unpack_attitude, msp.MSP_RAW_IMU: msp.unpack_raw_imu,
                         msp.MSP_STATUS: msp.unpack_status, msp.MSP_STATUS_EX: msp.unpack_status_ex}

    def case(self, rng):
        label, data = _frames(rng, self.replies, lambda c, p, v: self.msp.encode(c, p, v, ">"))
        pieces = _split(data, rng)

        def read():
            parser = self.msp.MspParser()
            frames = [f for piece in pieces for f in parser.feed(piece)]
            for f in frames:
                if f.command == self.msp.MSP_MULTIPLE_MSP:
                    for command, part in zip(self.bundled, self.msp.unpack_multiple(f.payload)):
                        self.decoders[command](part)
                elif f.command in self.decoders:
                    self.decoders[f.command](f.payload)
            return bool(frames)
        return label, read

    def refused(self, exc: BaseException) -> bool:
        return type(exc) is ValueError

    def close(self) -> None:
        pass


class SitlTarget:
    name = "sitl"
    kinds = ("fdm", "rc", "servo", "fdm unpack", "msp")

    def __init__(self):
        from pymsp import MSPStreamProcessor

        from hardware.drivers import betaflight_sitl as sitl
        from hardware.drivers import msp
        from sims.vehicles import betaflight_firmware
        from sims.vehicles.betaflight_sitl import BetaflightMSPServer, BetaflightSITLPeer

        self.sitl, self.firmware, self.stream_class = sitl, betaflight_firmware, MSPStreamProcessor
        self.peer = BetaflightSITLPeer()
        self.sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # where the peer's servo packets go
        self.sink.bind(("127.0.0.1", 0))
        self.sink.setblocking(False)
        self.peer.motor_address = self.sink.getsockname()
        self.server = BetaflightMSPServer()

        def fdm(t):
            return sitl.state_to_fdm(t, [1.0, 2.0, 3.0], [0.1, 0.2, 0.3], [1.0, 0.0, 0.0, 0.0], [0.01, 0.02, 0.03],
                                     [0.0, 0.0, 9.81]).pack()

        channels = sitl.attitude_to_rc(0.1, -0.1, 0.2, 0.4, armed=True)
        self.valid = {"fdm": (fdm(0.5), fdm(1.0)), "rc": (sitl.pack_rc(0.5, channels), sitl.pack_rc(1.0, channels)),
                      "servo": sitl.SERVO.pack(0.1, 0.2, 0.3, 0.4), "fdm unpack": fdm(1.0)}
        self.requests = {msp.MSP_ATTITUDE: b"", msp.MSP_RAW_IMU: b"", msp.MSP_STATUS: b"", msp.MSP_MOTOR: b"",
                         msp.MSP_SET_RAW_RC: msp.pack_channels(channels),
                         msp.MSP_SET_MOTOR: msp.pack_channels([1000] * 8)}
        self.msp = msp

    def case(self, rng):
        kind = rng.choice(self.kinds)
        if kind == "msp":
            label, data = _frames(rng, self.requests, lambda c, p, v: self.msp.encode(c, p, v, "<"))
            return f"msp {label}", partial(self._msp, _split(data, rng))
        if kind in ("fdm", "rc"):
            first, second = self.valid[kind]
            return kind, partial(self._peer, kind, first, mutate(second, rng))
        return kind, partial(self._decode, kind, mutate(self.valid[kind], rng))

    def _peer(self, kind: str, first: bytes, data: bytes) -> bool:
        """The peer takes a valid packet, then ``data``; False if it dropped ``data``."""
        peer = self.peer
        peer._last_fdm_time = peer._last_rc_time = -math.inf
        handle = peer._on_fdm if kind == "fdm" else peer._on_rc
        handle(first)
        before = sum(peer.rejected.values())
        handle(data)
        try:
            while True:
                self.sink.recv(64)
        except BlockingIOError:
            pass
        return sum(peer.rejected.values()) == before

    def _decode(self, kind: str, data: bytes) -> None:
        if kind == "fdm unpack":
            self.sitl.FdmPacket.unpack(data)
        else:
            self.sitl.unpack_servo(data)
            self.firmware.motors_from_servo(data)

    def _msp(self, pieces: list[bytes]) -> bool:
        """The server's stream takes ``pieces``; False if it answered no frame or refused one."""
        stream, answered = self.stream_class(), 0
        before = sum(self.server.rejected.values())
        for piece in pieces:
            for frame in stream.push_bytes(piece):
                answered += self.server.reply(frame) is not None
        return answered > 0 and sum(self.server.rejected.values()) == before

    def refused(self, exc: BaseException) -> bool:
        return type(exc) is ValueError

    def close(self) -> None:
        self.peer.close()
        self.server.close()
        self.sink.close()


TARGETS = {"dataset": DatasetTarget, "checkpoint": CheckpointTarget, "msp": MspTarget, "sitl": SitlTarget}


def make_target(name: str):
    """A target, set up for a worker process (one torch thread; the warnings of corrupt inputs silenced)."""
    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    return TARGETS[name]()


def show_case(name: str, index: int, seed: int, limit: float) -> None:
    """Input ``index`` of ``name``: its outcome, and the traceback of what it raised."""
    target = make_target(name)
    try:
        r = run_case(target, case_rng(seed, index), limit)
        print(f"{name} input {index}: {r.outcome} in {r.seconds:.3f} s, {r.label}; {r.message}")
        if r.outcome in ("other", "refused") and r.message:
            label, read = target.case(case_rng(seed, index))
            try:
                read()
            except Exception:  # noqa: BLE001 - printed for the reader of the report
                traceback.print_exc()
    finally:
        target.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=1000, help="inputs per reader (default 1000)")
    ap.add_argument("--seed", type=int, default=0, help="input i of seed s is the same on every run")
    ap.add_argument("--readers", default=",".join(TARGETS), help=f"comma-separated, of {','.join(TARGETS)}")
    ap.add_argument("--limit", type=float, default=LIMIT, help=f"s an input may take (default {LIMIT})")
    ap.add_argument("--minutes", type=float, default=15.0, help="stop a reader after this long (default 15)")
    ap.add_argument("--case", type=int, help="read only this input of the one reader of --readers, here")
    args = ap.parse_args()
    readers = args.readers.split(",")
    unknown = [r for r in readers if r not in TARGETS]
    if unknown or args.inputs < 1:
        ap.exit(2, f"{ap.prog}: error: unknown readers {unknown}; choose from {','.join(TARGETS)}\n" if unknown else
                f"{ap.prog}: error: --inputs must be >= 1, got {args.inputs}\n")
    if args.case is not None:
        if len(readers) != 1:
            ap.exit(2, f"{ap.prog}: error: --case reads one reader's input; name one in --readers\n")
        show_case(readers[0], args.case, args.seed, args.limit)
        return
    rows, tallies = [], []
    for name in readers:
        t0 = time.monotonic()
        tally = fuzz_isolated(partial(make_target, name), args.inputs, args.seed, args.limit,
                              budget=args.minutes * 60)
        rows.append({**tally.row(), "inputs/s": tally.inputs / (time.monotonic() - t0)})
        tallies.append(tally)
    print_table(rows, ["reader", "inputs", "read", "refused", "other", "hang", "max s", "inputs/s"])
    for tally in tallies:
        if tally.inputs < args.inputs:
            print(f"{tally.name}: stopped after {args.minutes:g} min, {tally.inputs} of {args.inputs} inputs")
        for index, label, message in tally.examples:
            print(f"{tally.name} input {index} ({label}): {message}")
    sys.exit(1 if any(t.bad for t in tallies) else 0)


if __name__ == "__main__":
    main()
