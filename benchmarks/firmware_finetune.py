"""Real-robot fine-tuning through Betaflight's firmware beside the stand-in loop (one table).

Both rows are ``robo finetune`` with the same settings (``configs/finetune.yaml`` plus this benchmark's defaults
and the command line's overrides), on the same hidden robot (a Crazyflie 30 % heavier than the twin's nominal),
from hand-placed starts around (0.2, -0.2, 1.1) m, hovering at (0, 0, 1) m:

- ``stand-in``: ``real_robot=px4``, the MAVLink stand-in (the actor in Python, its commands over UDP, lockstep).
- ``firmware``: ``real_robot=betaflight_sitl``, every actor exported to C, built into Betaflight's SITL firmware
  and flown inside it (lockstep, 1 kHz loop, the firmware's attitude estimate and gyro in the observation), the
  transitions read from the firmware's log (``robo.real.firmware``).

Each: identification (``twin_pretrain.identify_steps`` real steps), twin pre-training (``twin_pretrain.steps``),
``total_steps`` real steps with the twin gate, the deployed actor the twin ranks best; mean tracking error over
``eval_episodes`` 2 s episodes before (base alone), after pre-training and after fine-tuning; safety faults over
every real flight.

    nice -n 10 .venv/bin/python benchmarks/firmware_finetune.py base=runs/deploy/sac300/checkpoints/latest/policy
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from common import command_config, parse, parser  # benchmarks/ is on sys.path when run as a script
from table import print_table

from robo.commands import finetune

LOOPS = {"stand-in": ["real_robot=px4", "reset=prompt"], "firmware": ["real_robot=betaflight_sitl"]}
BENCH_DEFAULTS = ["total_steps=5000", "twin_pretrain.steps=60000", "residual_scale=0.5",
                  "learner.learning_rate=0.0001", "learner.snapshot_every=500", "twin_gate.tolerance=0.1",
                  "eval_episodes=10"]
COLS = ["loop", "identified_g", "before_m", "pretrained_m", "after_m", "final_before_m", "final_after_m",
        "real_steps", "episodes", "safety_faults", "gate", "deployed", "wall_s"]


def main() -> None:
    ap = parser(__doc__, "finetune", "base=<checkpoint folder> total_steps=2000 seed=1")
    ap.add_argument("--loops", default=",".join(LOOPS), help="which rows: stand-in,firmware")
    args = parse(ap)
    rows = []
    for name in args.loops.split(","):
        if name not in LOOPS:
            ap.exit(2, f"{ap.prog}: error: unknown loop {name!r}; choose from {list(LOOPS)}\n")
        cfg = command_config(ap, "finetune", args.overrides, defaults=BENCH_DEFAULTS, forced=LOOPS[name])
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"robo-finetune-{name}-") as d:
            r = finetune.run(cfg, Path(d))
        rows.append({"loop": name, "identified_g": 1000 * r.get("identified_mass", float("nan")),
                     "before_m": r["tracking_error_before"], "pretrained_m": r.get("tracking_error_pretrained", "-"),
                     "after_m": r["tracking_error_after"], "final_before_m": r["final_error_before"],
                     "final_after_m": r["final_error_after"], "real_steps": r["real_steps"],
                     "episodes": r["episodes"], "safety_faults": r["safety_faults"],
                     "gate": f"{r['gate_admitted']}/{r['gate_checks']}", "deployed": r.get("deployed_actor", "last"),
                     "wall_s": time.monotonic() - t0})
        print_table(rows, COLS)  # as each loop finishes
    print()
    print_table(rows, COLS)


if __name__ == "__main__":
    main()
