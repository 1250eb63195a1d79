"""The ``robo`` command line: ``robo <command> [hydra overrides...]``.

Each command has a Hydra config of its own name in ``configs/`` (shipped as
``robo.configs``); everything after the command is passed to Hydra, so overrides,
``--cfg job``, ``--help`` and multirun (``-m``) work as in any Hydra app.

    robo eval                                  # RAPTOR hovering a Crazyflie, 256 envs
    robo eval robot=x500 task=figure_eight seconds=12
    robo eval -m robot=crazyflie,racer5,x500   # a sweep, one run folder per job
    robo train task=hover algo=td3 robot=crazyflie curriculum=scheduled
    robo train resume=runs/train/<time>        # continue a killed run
    robo export policy=<checkpoint folder> format=onnx   # or format=c, format=torchscript; policy=raptor
    robo finetune real_robot=px4 base=raptor   # SAC fine-tuning on the (stand-in) PX4 robot
    robo foundation teachers=16                # RAPTOR-style teachers (Ray) + DAgger GRU student
    robo steer base=<policy checkpoint> task=pusht   # DSRL over a frozen diffusion policy
    robo imagine evaluate task=hover           # rank policies in a learned world model
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

COMMANDS = {"eval": "robo.commands.eval", "train": "robo.commands.train", "record": "robo.commands.record",
            "export": "robo.commands.export", "finetune": "robo.commands.finetune",
            "foundation": "robo.commands.foundation", "steer": "robo.commands.steer",
            "imagine": "robo.commands.imagine"}
MODE_COMMANDS = {"imagine"}  # `robo imagine evaluate ...` means `robo imagine mode=evaluate ...`
USAGE = "usage: robo <command> [key=value ...] [-m]\ncommands: " + ", ".join(COMMANDS)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        print(__doc__)
        return
    command, rest = argv[0], argv[1:]
    if command in MODE_COMMANDS and rest and "=" not in rest[0] and not rest[0].startswith("-"):
        rest = [f"mode={rest[0]}", *rest[1:]]
    if command not in COMMANDS:
        sys.exit(f"robo: unknown command {command!r}\n{USAGE}")
    module = importlib.import_module(COMMANDS[command])
    if hasattr(module, "rewrite_overrides"):  # a command may give shorthands for its overrides
        rest = module.rewrite_overrides(rest)

    import hydra
    from hydra.core.hydra_config import HydraConfig

    def task_fn(cfg) -> None:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        result = module.run(cfg, run_dir)
        resumed = cfg.get("resume") if isinstance(cfg.get("resume"), str) else None  # commands resume in place
        print(_summary(command, result, Path(resumed) if resumed else run_dir))

    sys.argv = [f"robo-{command}", *rest]
    hydra.main(version_base="1.3", config_path="pkg://robo.configs", config_name=command)(task_fn)()


def _summary(command: str, result: dict, run_dir: Path) -> str:
    width = max(len(k) for k in result)
    lines = [f"robo {command}: results", "-" * (width + 16)]
    for k, v in result.items():
        lines.append(f"{k:<{width}}  {v:.4f}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    lines.append(f"run folder: {run_dir}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
