"""Crash safety of checkpoint writes: one ``robo train`` run killed with SIGKILL at a random moment of a write of
``checkpoints/latest`` (uniform over the write's measured duration, so some kills land after its last rename),
``--kills`` times, and resumed (``robo train resume=<run>``) after each kill. One table: per phase of the write
at the kill, how many kills, how many resumes started from a complete checkpoint, and the env steps lost (the
step of the write that was killed minus the step the resume started from; a checkpoint interval at most).

A resume that finds no checkpoint, fails to load one, or starts from scratch counts as lost.

    python benchmarks/crash_safe.py --kills 50
    python benchmarks/crash_safe.py --kills 5 checkpoint_every=4096
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import parse, parser  # noqa: E402
from table import print_table  # noqa: E402

from robo.run_dir import read_state  # noqa: E402

DEFAULTS = ["+experiment=hover_quick", "total_steps=100000000", "checkpoint_every=2048", "eval_every=100000000",
            "video.enabled=false"]
RESUMED = re.compile(r"resumed from .* at env step (\d+)")


def robo(*words: str) -> list[str]:
    return [sys.executable, "-m", "robo", *words]


def wait_for(predicate, timeout: float, poll: float = 0.001) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(poll)
    return False


def writing(ckpt: Path) -> bool:
    """A write of checkpoints/latest is under way: its temporary folder exists."""
    return any(ckpt.glob(".latest.tmp-*"))


def main(argv=None) -> None:
    ap = parser(__doc__, "train", "checkpoint_every=4096")
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0, help="draws the kill moments")
    ap.add_argument("--timeout", type=float, default=120.0, help="s to wait for a process to reach a write")
    args = parse(ap, argv)
    rng = random.Random(args.seed)
    interval = int(next((w.split("=")[1] for w in reversed(args.overrides) if w.startswith("checkpoint_every=")),
                        "2048"))
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="robo-crash-") as tmp:
        run, logs = Path(tmp) / "run", Path(tmp) / "logs"
        ckpt = run / "checkpoints"
        logs.mkdir()
        durations: list[float] = []
        for k in range(args.kills + 1):
            words = ([f"resume={run}", f"hydra.run.dir={logs / str(k)}"] if k
                     else [*DEFAULTS, *args.overrides, f"hydra.run.dir={run}"])
            log_path = logs / f"{k}.log"
            with open(log_path, "w") as log:
                proc = subprocess.Popen(robo("train", *words),
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                if k:  # the resume of kill k - 1: where did it start?
                    started = wait_for(lambda: RESUMED.search(log_path.read_text()) or proc.poll() is not None,
                                       args.timeout, 0.05)
                    m = RESUMED.search(log_path.read_text())
                    resumed = int(m.group(1)) if m else None
                    o = outcomes[-1]
                    o["resumed"] = resumed
                    o["complete"] = bool(started) and resumed is not None and resumed >= o["before"]
                    o["lost"] = o["writing"] - resumed if resumed is not None else None
                    if k == args.kills:
                        break
                # the next write after a complete checkpoint exists: read that checkpoint's step, then kill
                if not wait_for(lambda: (ckpt / "latest" / "state.json").exists() and writing(ckpt), args.timeout):
                    raise RuntimeError(f"no checkpoint write within {args.timeout} s: see {log_path}")
                before = int(read_state(ckpt / "latest")["step"])
                t0 = time.monotonic()
                window = max(durations) if durations else 0.0
                if window == 0.0:  # measure this write, kill at the next one
                    wait_for(lambda: not writing(ckpt), args.timeout)
                    durations.append(time.monotonic() - t0)
                    before = int(read_state(ckpt / "latest")["step"])
                    wait_for(lambda: writing(ckpt), args.timeout)
                    t0 = time.monotonic()
                    window = durations[0]
                delay = rng.uniform(0.0, 1.2 * window)
                time.sleep(max(0.0, delay - (time.monotonic() - t0)))
                during = writing(ckpt)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                outcomes.append({"kill": k, "delay_ms": 1e3 * delay, "during write": during, "before": before,
                                 "writing": before + interval})
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    rows = []
    for phase, members in (("temporary folder present", [o for o in outcomes if o["during write"]]),
                           ("after the temporary folder", [o for o in outcomes if not o["during write"]])):
        complete = [o for o in members if o.get("complete")]
        lost = [o["lost"] for o in complete]
        rows.append({"kill moment": phase, "kills": len(members), "resumed from a complete checkpoint": len(complete),
                     "env steps lost (max)": max(lost) if lost else "-", "interval": interval})
    print(f"write duration measured: {1e3 * durations[0]:.0f} ms; kill delays uniform in [0, "
          f"{1.2e3 * durations[0]:.0f}] ms after the temporary folder appears")
    print_table(rows, list(rows[0]))
    failed = [o for o in outcomes if not o.get("complete") or (o["lost"] or 0) > interval]
    if failed:
        print(f"FAILED: {failed}")
        sys.exit(1)


if __name__ == "__main__":
    main()
