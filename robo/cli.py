"""The ``robo`` command line: ``robo <command> [hydra overrides...]``.

Each command has a Hydra config of its own name in ``configs/`` (shipped as ``robo.configs``) and a module in
``robo/commands/``; everything after the command is passed to Hydra, so overrides, ``--cfg job`` and multirun
(``-m``) work as in any Hydra app. ``robo <command> --help`` lists the groups and keys the command uses.
A multirun with ``ray.address`` runs its jobs as Ray tasks (``robo.sweep``); under ``torchrun`` the ranks
other than 0 run in a scratch folder of their own, removed at the end (rank 0 writes the run folder).

The config is composed and checked (``robo.validation``) before a run folder is made: a bad input prints one
line and exits with code 2. A command that fails later removes its run folder if it holds only its config and log,
or else leaves it marked by a ``FAILED`` file with the traceback. ``ROBO_DEBUG=1`` shows tracebacks instead.
"""

from __future__ import annotations

import importlib
import math
import os
import re
import shutil
import sys
import tempfile
import traceback
from importlib.resources import files
from pathlib import Path

from robo.run_dir import compose

# command -> (module, what it does)
COMMANDS = {
    "eval": ("robo.commands.eval", "fly a policy in the batched quadrotor sim (or an imitation task) and score it"),
    "train": ("robo.commands.train", "RL from scratch on a quadrotor task, or imitation (policy=diffusion|energy)"),
    "record": ("robo.commands.record", "record demonstrations as a LeRobot v3.0 dataset (or convert an older one)"),
    "export": ("robo.commands.export", "export a policy to ONNX, TorchScript or C, checked against torch"),
    "deploy": ("robo.commands.deploy", "build a policy into Betaflight's firmware and fly it there (lockstep SITL)"),
    "finetune": ("robo.commands.finetune", "fine-tune a policy on a real (or stand-in) robot behind the safety layer"),
    "foundation": ("robo.commands.foundation", "RAPTOR-style teachers distilled into a recurrent foundation policy"),
    "steer": ("robo.commands.steer", "improve a frozen diffusion or energy policy by RL over its latent noise"),
    "imagine": ("robo.commands.imagine", "evaluate, train or synthesize data in a learned world model"),
}
MODE_COMMANDS = {"imagine"}  # `robo imagine evaluate ...` means `robo imagine mode=evaluate ...`
USAGE = "usage: robo <command> [group=option ...] [key=value ...] [-m]"
EXAMPLES = """examples:
  robo eval +experiment=hover_raptor              RAPTOR's released policy hovering 256 Crazyflies
  robo train +experiment=hover_quick              the main job: SAC hover from scratch
  robo train policy=diffusion task=pusht          imitation from scripted-expert demos
  robo train resume=runs/train/<time>             continue a run from its own config
  robo export policy=<checkpoint folder> format=c
  robo deploy policy=raptor robot.preset=x500     RAPTOR inside Betaflight's firmware, flown in robo's physics
  robo steer base=<checkpoint folder> task=pusht
  robo imagine evaluate task=hover"""
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, KeyError,
               ImportError)


class CommandFailed(Exception):
    """A command's run raised; carries the exit code and the one line to print."""


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(overview())
        return
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        fail(f"unknown command {command!r}; choose one of {', '.join(COMMANDS)} (robo --help)", prefix="robo:")
    if any(a in ("-h", "--help") for a in rest):
        try:
            print(command_help(command))
        except BrokenPipeError:  # `robo train --help | head`
            pass
        return
    if command in MODE_COMMANDS and rest and "=" not in rest[0] and not rest[0].startswith("-"):
        rest = [f"mode={rest[0]}", *rest[1:]]
    debug = os.environ.get("ROBO_DEBUG", "") not in ("", "0")
    try:
        module = command_module(command)
    except ImportError as e:
        fail(f"{command}: {e}", debug=debug)
    if hasattr(module, "rewrite_overrides"):  # a command may give shorthands for its overrides
        rest = module.rewrite_overrides(rest)
    ray_sweep(command, rest, debug)
    if not any(a.startswith("-") for a in rest):  # -m, --cfg, --info ...: Hydra's own modes, composed by Hydra
        from robo.validation import ConfigError, validate

        try:
            cfg = compose(command, rest)
            validate(command, cfg)
        except ConfigError as e:
            fail(f"{command}: {e}", debug=debug)
        except Exception as e:  # Hydra's composition errors: unknown group option or key, bad override syntax
            fail(f"{command}: {composition_error(str(e))}", debug=debug)
        if cfg.get("resume"):  # a resumed run writes its log into its own folder, not a new one
            rest = [*rest, f"hydra.run.dir={cfg.resume}", "hydra.output_subdir=null"]

    scratch = None
    if os.environ.get("RANK", "0") not in ("", "0"):  # torchrun: rank 0 alone writes the run folder
        scratch = tempfile.mkdtemp(prefix=f"robo-{command}-rank{os.environ['RANK']}-")
        rest = [*rest, f"hydra.run.dir={scratch}", "hydra.output_subdir=null"]

    import hydra
    from hydra.core.hydra_config import HydraConfig

    def task_fn(cfg) -> None:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        resumed = cfg.get("resume") if isinstance(cfg.get("resume"), str) else None  # commands resume in place
        try:
            from robo.validation import validate

            validate(command, cfg)  # again: a multirun's jobs are composed here only
            result = module.run(cfg, run_dir)
        except KeyboardInterrupt:
            where = clean_up(run_dir, keep=bool(resumed), reason="interrupted (Ctrl-C)")
            fail(f"{command}: interrupted{where}", code=130)
        except Exception as e:
            if debug:
                raise
            code = 2 if isinstance(e, USER_ERRORS) else 1
            if resumed and code == 2:  # e.g. an override that cannot change on resume: the run is as it was
                where = ""
            else:
                where = clean_up(run_dir, keep=bool(resumed), reason=traceback.format_exc())
            fail(f"{command}: {describe(e)}{where}", code=code)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
            return
        if resumed:  # a run that failed once and now completed
            (Path(resumed) / "FAILED").unlink(missing_ok=True)
        print(summary(command, result, Path(resumed) if resumed else run_dir))

    sys.argv = [f"robo-{command}", *rest]
    hydra.main(version_base="1.3", config_path="pkg://robo.configs", config_name=command)(task_fn)()


def ray_sweep(command: str, rest: list[str], debug: bool) -> None:
    """A multirun with ``ray.address=...``: check every job's config, run the jobs as Ray tasks, print their
    table and exit (code 1 if any job failed). Returns at once for any other command line."""
    from robo.sweep import expand, report, run_sweep, sweep_ray
    from robo.validation import ConfigError, validate

    try:
        ray = sweep_ray(rest)
        if ray is None:
            return
        for job in expand(rest):
            validate(command, compose(command, job))
    except ConfigError as e:
        fail(f"{command}: {e}", debug=debug)
    except Exception as e:  # a bad override or sweep syntax
        fail(f"{command}: {composition_error(str(e))}", debug=debug)
    table, code = report(run_sweep(command, rest, ray))
    print(table)
    sys.exit(code)


def command_module(command: str):
    """The module in ``robo/commands/`` that runs ``command`` (its ``run(cfg, run_dir) -> dict``)."""
    return importlib.import_module(COMMANDS[command][0])


def composition_error(text: str) -> str:
    """Hydra's multi-line composition error as one line: ``unknown robot 'foo'; choose one of ...``."""
    from robo.validation import one_line

    missing = re.search(r"Could not find '([\w/]+)/([^']+)'", text)
    if missing:
        group, name = missing.groups()
        options = re.search(r"Available options in '[^']+':(.*?)(Config search path|$)", text, re.S)
        choices = ", ".join(options.group(1).split()) if options else ""
        return f"unknown {group} {name!r}" + (f"; choose one of {choices}" if choices else "")
    return one_line(text.split("Config search path")[0])


def describe(e: BaseException) -> str:
    """One line for an exception: its message, with the type where the message alone would be unclear."""
    from robo.validation import one_line

    text = one_line(str(e)) or type(e).__name__
    if isinstance(e, KeyError):
        text = f"missing key {text}"
    return text if isinstance(e, USER_ERRORS) else f"{type(e).__name__}: {text}"


def clean_up(run_dir: Path, keep: bool, reason: str) -> str:
    """After a failure: remove a new run folder that holds only its config and log; else mark it ``FAILED``.
    Returns the words to add to the error line."""
    if not run_dir.is_dir():
        return ""
    bookkeeping = {".hydra", "config.yaml", "FAILED"} | {p.name for p in run_dir.glob("*.log")}
    if not keep and all(p.name in bookkeeping for p in run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)
        return " (no run folder kept)"
    (run_dir / "FAILED").write_text(reason if reason.endswith("\n") else reason + "\n")
    return f" (run folder kept, marked {run_dir / 'FAILED'})"


def fail(message: str, code: int = 2, debug: bool = False, prefix: str = "robo") -> None:
    """Print ``robo <message>`` as one line on stderr and exit with ``code`` (re-raise under ROBO_DEBUG)."""
    if debug and sys.exc_info()[0] is not None:
        raise
    hint = " (a bug? ROBO_DEBUG=1 shows the traceback)" if code == 1 else ""
    print(f"{prefix} {message}{hint}", file=sys.stderr)
    sys.exit(code)


def overview() -> str:
    width = max(map(len, COMMANDS))
    lines = [USAGE, "", "commands:"]
    lines += [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    lines += ["", "`robo <command> --help` lists the config groups and keys a command uses.", "", EXAMPLES]
    return "\n".join(lines)


def command_help(command: str) -> str:
    """The command's config groups (options, default) and its own keys, as commented in its YAML file."""
    configs = files("robo.configs")
    text = (configs / f"{command}.yaml").read_text()
    groups, keys, part = [], [], "head"
    for line in text.splitlines():
        if line.startswith("defaults:"):
            part = "defaults"
            continue
        if line.startswith("hydra:"):
            part = "hydra"
            continue
        if part == "defaults" and line.startswith("  - "):
            entry = line[4:].split("#")[0].strip()
            if ":" in entry:
                name, default = (s.strip() for s in entry.split(":", 1))
                name = name.removeprefix("optional ")
                if not default.startswith("${"):
                    options = sorted(p.name[:-5] for p in (configs / name).iterdir() if p.name.endswith(".yaml"))
                    groups.append(f"  {name:<12} {'|'.join(options)} (default: {default})")
            continue
        if part == "defaults" and not line.startswith(" "):
            part = "keys"
        if part == "keys" and not line.startswith("command:"):
            keys.append("  " + line)
    about = COMMANDS[command][1]
    head = [f"robo {command}: {about}", f"usage: robo {command} [group=option ...] [key=value ...] [-m]"]
    presets = sorted(p.name[:-5] for p in (configs / "experiment").iterdir() if p.name.endswith(".yaml"))
    out = [*head, ""]
    if groups:
        out += ["config groups:", *groups, ""]
    out += [f"keys (configs/{command}.yaml):", *[k for k in keys if k.strip()], ""]
    out += [f"presets: +experiment={'|'.join(presets)}", "Hydra's own help: --hydra-help; the full config: --cfg job"]
    return "\n".join(out)


def summary(command: str, result: dict, run_dir: Path) -> str:
    width = max((len(k) for k in result), default=0)
    lines = [f"robo {command}: results", "-" * (width + 16)]
    for k, v in result.items():
        if isinstance(v, float) and math.isinf(v):  # an error over no surviving flight
            v = "none (every flight crashed)"
        lines.append(f"{k:<{width}}  {v:.4f}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    lines.append(f"run folder: {run_dir}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
